"""The exported RL-TCP agent (models/rltcp_agent.py, the shipped agent files) without the kernel.

File round trip (the numpy forward pass equals the saved network's), every
kind of bad file refused with one line naming it, the action mappings (the
paper's and the multiplicative one) and the state's scaling, the delay
reward's values and its mode recorded in the file (older files read as the
paper's), and the shipped agent served by a real PolicyServer over UDP
answering in-range cwnds.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from test_remote_protocol import KEY, running

from ccswitch.models.rltcp_agent import (
    CWND_MAX,
    CWND_MIN,
    DEFAULT_AGENT,
    DELAY_REWARD,
    MULT_FACTORS,
    AgentError,
    apply_action,
    features,
    load_agent,
    reward,
    save_agent,
)
from ccswitch.remote import protocol as p
from ccswitch.remote.agents import cwnd_agent
from ccswitch.remote.client import PolicyClient
from ccswitch.remote.server import PolicyServer


def obs_grid() -> np.ndarray:
    """CWND_OBS over the ranges a 10-100 Mbit/s path produces, with and without losses."""
    rng = np.random.default_rng(0)
    n = 500
    obs = np.zeros(n, dtype=p.CWND_OBS)
    obs["cookie"] = np.arange(1, n + 1)
    obs["step_us"] = rng.integers(80_000, 300_000, n)
    obs["cwnd"] = rng.integers(2, 2000, n)
    obs["ssthresh"] = rng.choice([2, 50, 0x7FFFFFFF], n)
    obs["mss"] = 1448
    obs["acked"] = rng.integers(0, 900, n)
    obs["lost"] = rng.integers(0, 3, n)
    obs["inflight_avg"] = rng.integers(0, 2000, n)
    obs["srtt_us"] = rng.integers(1000, 300_000, n)
    return obs


def random_net(rng: np.random.Generator, widths: tuple[int, ...] = (5, 20, 20, 4)) -> tuple[list, list]:
    ks = [rng.normal(0, 0.5, (a, b)).astype(np.float32) for a, b in itertools.pairwise(widths)]
    bs = [rng.normal(0, 0.1, b).astype(np.float32) for b in widths[1:]]
    return ks, bs


def test_round_trip_matches_the_network(tmp_path: Path) -> None:
    ks, bs = random_net(np.random.default_rng(1))
    path = tmp_path / "a.json"
    save_agent(path, kernels=ks, biases=bs, mode="mult", training={"note": "test"})
    agent = load_agent(path)
    x = features(obs_grid())
    h = x
    for k, b in zip(ks[:-1], bs[:-1], strict=True):
        h = np.maximum(h @ k + b, 0)
    assert np.allclose(agent.q_values(x), h @ ks[-1] + bs[-1], atol=1e-5)
    assert agent.mode == "mult" and agent.training == {"note": "test"} and agent.checksum.startswith("sha256:")


def corrupt(path: Path, edit) -> None:
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))


def resign(doc: dict) -> None:
    from ccswitch.models.policy import document_checksum

    doc["checksum"] = document_checksum(doc)


@pytest.mark.parametrize(("edit", "needle"), [
    (lambda d: d.update(format="ccswitch-policy"), "not an RL-TCP agent file"),
    (lambda d: d.update(version=9), "version 9"),
    (lambda d: d["network"]["layers"].pop(), "checksum mismatch"),
    (lambda d: (d["network"]["layers"].pop(), resign(d)), "outputs, RL-TCP has 4 actions"),
    (lambda d: (d.update(features=["cwnd"]), resign(d)), "features"),
    (lambda d: (d["action"].update(mode="bbr"), resign(d)), "unknown action mode 'bbr'"),
    (lambda d: (d["action"].update(factors=[0.5, 1, 2, 4]), resign(d)), "action factors"),
    (lambda d: (d["network"]["layers"][0]["kernel"].update(data="!!"), resign(d)), "bad data"),
    (lambda d: (d["reward"].update(mode="bbr"), resign(d)), "unknown reward mode 'bbr'"),
    (lambda d: (d.update(reward="delay"), resign(d)), "unknown reward mode None"),
])
def test_bad_files_are_one_line_naming_the_file(tmp_path: Path, edit, needle: str) -> None:
    path = tmp_path / "a.json"
    save_agent(path, kernels=random_net(np.random.default_rng(2))[0], biases=random_net(np.random.default_rng(2))[1])
    corrupt(path, edit)
    with pytest.raises(AgentError) as e:
        load_agent(path)
    assert needle in str(e.value) and str(path) in str(e.value) and "\n" not in str(e.value)


def test_missing_and_non_json_files(tmp_path: Path) -> None:
    with pytest.raises(AgentError, match="no such RL-TCP agent file"):
        load_agent(tmp_path / "none.json")
    with pytest.raises(AgentError, match="cannot read the RL-TCP agent file"):
        load_agent(tmp_path)  # a folder
    (tmp_path / "x.json").write_text("{not json")
    with pytest.raises(AgentError, match="invalid JSON"):
        load_agent(tmp_path / "x.json")
    with pytest.raises(ValueError, match="takes no agent file"):
        cwnd_agent("delay-aimd", tmp_path / "x.json")
    with pytest.raises(AgentError, match="invalid JSON"):  # AgentError is a ValueError: the CLI prints one line
        cwnd_agent("rl-tcp", tmp_path / "x.json")


def test_serve_refuses_a_bad_agent_file_in_one_line(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from ccswitch.cli import cli

    key = tmp_path / "key"
    key.write_bytes(b"0123456789abcdef0123")
    key.chmod(0o600)
    (tmp_path / "bad.json").write_text("[]")
    r = CliRunner().invoke(cli, ["policy", "serve", "--key", str(key), "--no-cca", "--agent", "rl-tcp",
                                 "--agent-file", str(tmp_path / "bad.json")])
    assert r.exit_code == 1 and "not an RL-TCP agent file" in r.output and len(r.output.splitlines()) == 1


def test_action_mappings() -> None:
    obs = np.zeros(4, dtype=p.CWND_OBS)
    obs["cookie"], obs["cwnd"], obs["inflight_avg"], obs["mss"], obs["step_us"] = [1, 2, 3, 4], 100, 60, 1448, 1e5
    mult = apply_action(obs, np.arange(4), "mult")
    assert list(mult["cwnd"]) == [int(100 * f) for f in MULT_FACTORS] and list(mult["cookie"]) == [1, 2, 3, 4]
    assert (mult["ssthresh"] == 0).all()  # the kernel's cwnd / 2 at a loss
    paper = apply_action(obs, np.arange(4), "paper")
    assert list(paper["cwnd"]) == [100, 101, 100, 101] and list(paper["ssthresh"]) == [2, 2, 2, 30]
    small = obs.copy()
    small["cwnd"] = [2, 2, 3, 400]
    s = apply_action(small, np.array([0, 2, 2, 3]), "mult")
    assert list(s["cwnd"]) == [CWND_MIN, 3, 4, CWND_MAX]  # floor, +1 packet at least when growing, ceiling
    with pytest.raises(ValueError, match=r"0\.\.3"):
        apply_action(obs, np.array([0, 1, 2, 4]))
    with pytest.raises(ValueError, match="unknown action mode"):
        apply_action(obs, np.arange(4), "bbr")


def test_state_and_reward_scale_a_late_step() -> None:
    obs = np.zeros(2, dtype=p.CWND_OBS)
    obs["cwnd"], obs["inflight_avg"], obs["mss"], obs["ssthresh"] = 35, 35, 1448, 0x7FFFFFFF
    obs["acked"], obs["step_us"] = [86, 172], [100_000, 200_000]  # 10 Mbit/s over 0.1 s and over 0.2 s
    x = features(obs)
    assert np.allclose(x[0], [10.0, 0.35, 0.86, 1.0, 0.35]) and np.allclose(x[0], x[1])
    assert np.allclose(reward(obs), (86 - 35 - 35) / 100)


def step_obs(acked: list[int], rtt_ms: list[float], lost: list[int], step_us: int = 100_000) -> np.ndarray:
    """Hand-made CWND_OBS steps on a 40 ms path (min RTT 40 ms)."""
    obs = np.zeros(len(acked), dtype=p.CWND_OBS)
    obs["cwnd"], obs["inflight_avg"], obs["mss"], obs["step_us"] = 35, 35, 1448, step_us
    obs["acked"], obs["lost"], obs["min_rtt_us"] = acked, lost, 40_000
    obs["rtt_avg_us"] = np.asarray(rtt_ms) * 1000
    return obs


def test_delay_reward_rewards_throughput_and_charges_queueing_and_loss() -> None:
    beta, loss_w, scale = DELAY_REWARD["DELAY_BETA"], DELAY_REWARD["LOSS_WEIGHT"], DELAY_REWARD["DELAY_REWARD_SCALE"]
    # base: 86 packets/step at the min RTT; the same with a base RTT of queue; with 10 % loss; a fair
    # share behind CUBIC's full FIFO (160 ms) vs the window floor there; a step without an RTT sample
    obs = step_obs([86, 86, 77, 43, 1, 86], [40, 80, 40, 160, 160, 0], [0, 0, 9, 0, 0, 0])
    r = reward(obs, "delay")
    expect = scale * np.array([np.log2(87), np.log2(87) - beta, np.log2(78) - loss_w * 9 / 86,
                               np.log2(44) - 3 * beta, np.log2(2) - 3 * beta, np.log2(87)])
    assert np.allclose(r, expect)
    assert r[0] > r[1] and r[0] > r[2]  # queueing delay and loss cost
    assert r[3] > r[4] + 0.2  # behind the same queue, a fair share beats the floor (the paper's reward: not)
    assert r[5] == r[0]  # no RTT sample: not charged
    assert np.allclose(reward(obs), reward(obs, "paper"))  # the default is the paper's
    late = step_obs([172], [40], [0], step_us=200_000)  # a late step is scaled, not more throughput
    assert np.allclose(reward(late, "delay"), r[0])
    capped = step_obs([86], [40 * 100], [0])  # a stalled step: qdelay / min RTT capped
    assert np.allclose(reward(capped, "delay"), scale * (np.log2(87) - beta * DELAY_REWARD["QDELAY_CAP"]))
    with pytest.raises(ValueError, match="unknown reward mode"):
        reward(obs, "aurora")


def test_reward_mode_round_trips_and_old_files_read_as_paper(tmp_path: Path) -> None:
    ks, bs = random_net(np.random.default_rng(3))
    save_agent(tmp_path / "d.json", kernels=ks, biases=bs, reward_mode="delay")
    save_agent(tmp_path / "p.json", kernels=ks, biases=bs)
    assert load_agent(tmp_path / "d.json").reward == "delay" and load_agent(tmp_path / "p.json").reward == "paper"
    assert json.loads((tmp_path / "d.json").read_text())["reward"]["constants"] == DELAY_REWARD
    corrupt(tmp_path / "d.json", lambda d: (d.pop("reward"), resign(d)))  # a file written before the field
    old = load_agent(tmp_path / "d.json")
    assert old.reward == "paper" and old.mode == "mult"
    with pytest.raises(ValueError, match="unknown reward mode"):
        save_agent(tmp_path / "x.json", kernels=ks, biases=bs, reward_mode="aurora")


def test_shipped_agent_served_returns_in_range_cwnds() -> None:
    assert DEFAULT_AGENT.exists(), f"{DEFAULT_AGENT} is missing (python -m ccswitch.models.dqn_rltcp)"
    agent = load_agent()
    assert agent.name == "rl-tcp" and agent.training.get("algorithm", "").startswith("DQN")
    obs = obs_grid()
    local = agent.decide(obs)
    assert ((local["cwnd"] >= CWND_MIN) & (local["cwnd"] <= CWND_MAX)).all()
    server = PolicyServer(KEY, cwnd_agent("rl-tcp"), None)
    with running(server) as addr, PolicyClient(addr, KEY, deadline_s=2.0) as c:
        for chunk in np.array_split(obs, 5):  # 100 flows per request
            dec, remote = c.cwnd(chunk, None)
            assert remote and dec is not None, c.fallbacks
            assert list(dec["cookie"]) == list(chunk["cookie"])
            assert np.array_equal(dec["cwnd"], agent.decide(chunk)["cwnd"])  # the server runs the same agent
