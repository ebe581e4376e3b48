"""Paper 000's DualPI2 agent: the actor file, the observation, the loop beside a live linkemu, the runner.

* Unit (no kernel): actor files round-trip; a missing, corrupt, edited or mis-shaped one gives one
  ActorError line naming the file; scenario files naming a bad actor get one ScenarioError line; the
  observation and reward of synthetic control-socket states; the action mapping's bounds.
* Kernel: an agent with a constant action against the real linkemu -- every set reaches the
  emulator within one control interval (p' read back from the emulator's state, and p' = 1e-3 * 2**n
  after n steps, ACTION_SCALE 0.5); when the agent dies without a word, the lease hands p' back to the PI controller;
  a scenario naming the shipped actor runs end to end with the agent's rows and record.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from ccswitch.models.dualpi2_actor import (
    ACTION_SCALE,
    LEASE_INTERVALS,
    OBS_FEATURES,
    P_MAX,
    P_MIN,
    ActorError,
    Observer,
    load_actor,
    next_base_prob,
    reward,
    save_actor,
)
from ccswitch.testbed.scenario import ScenarioError, load_scenario

SHIPPED = Path(__file__).resolve().parents[1] / "models" / "dualpi2_a3c.json"


def constant_actor(path: Path, action: float, interval_s: float = 0.02) -> Path:
    """An actor whose output is tanh(atanh(action)) = action whatever the state."""
    n = len(OBS_FEATURES)
    kernels = [np.zeros((n, 4), np.float32), np.zeros((4, 1), np.float32)]
    biases = [np.zeros(4, np.float32), np.array([np.arctanh(np.clip(action, -0.999999, 0.999999))], np.float32)]
    save_actor(path, kernels=kernels, biases=biases, interval_s=interval_s)
    return path


# ---------------------------------------------------------------- unit ---


def test_actor_file_round_trip_and_constant_action(tmp_path: Path) -> None:
    a = load_actor(constant_actor(tmp_path / "a.json", 0.5))
    assert a.interval_s == 0.02 and a.checksum.startswith("sha256:")
    for obs in (np.zeros(len(OBS_FEATURES)), np.full(len(OBS_FEATURES), 2.0)):
        assert a.act(obs) == pytest.approx(0.5, abs=1e-5)


@pytest.mark.parametrize(("mutate", "message"), [
    (None, "no such actor file"),
    ("not json", "not a readable actor file"),
    ({"format": "ccswitch-policy"}, "not a DualPI2 actor file"),
    ({"version": 99}, "actor format version 99 is not supported"),
    ({"interval_s": 0.5}, "checksum mismatch"),
])
def test_bad_actor_files_give_one_line_errors(tmp_path: Path, mutate: object, message: str) -> None:
    p = tmp_path / "a.json"
    if mutate is not None:
        constant_actor(p, 0.1)
        if isinstance(mutate, str):
            p.write_text(mutate)
        else:
            doc = json.loads(p.read_text())
            doc.update(mutate)
            p.write_text(json.dumps(doc))
    with pytest.raises(ActorError) as e:
        load_actor(p)
    assert message in str(e.value) and str(p) in str(e.value) and "\n" not in str(e.value)


def test_actor_with_other_features_is_refused(tmp_path: Path) -> None:
    n = len(OBS_FEATURES) + 1
    save_actor(tmp_path / "a.json", kernels=[np.zeros((n, 1), np.float32)], biases=[np.zeros(1, np.float32)],
               interval_s=0.05)
    with pytest.raises(ActorError, match="do not chain from 12 inputs"):
        load_actor(tmp_path / "a.json")


SCENARIO = """
name = "agent"
duration_s = {duration}
clients = 1
[link.uplink]
rate_mbit = 20
delay_ms = 5
qdisc = {{ kind = "dualpi2", classifier = "dscp", l_dscp = [40], {agent} }}
[link.downlink]
rate_mbit = 20
delay_ms = 5
[[flows]]
name = "C1"
client = 1
cca = "cubic"
"""


@pytest.mark.parametrize(("agent", "message"), [
    ('agent = "missing.json"', "link.uplink.qdisc.agent: "),
    ('agent = "bad.json"', "not a readable actor file"),
    ("agent_interval_ms = 20", 'only used with agent = "PATH"'),
])
def test_scenario_with_a_bad_agent_is_one_error_line(tmp_path: Path, agent: str, message: str) -> None:
    (tmp_path / "bad.json").write_text("{")
    p = tmp_path / "s.toml"
    p.write_text(SCENARIO.format(duration=4, agent=agent))
    with pytest.raises(ScenarioError) as e:
        load_scenario(p)
    assert message in str(e.value) and "\n" not in str(e.value).strip()


def test_scenario_agent_resolves_and_stays_out_of_linkemu_config(tmp_path: Path) -> None:
    constant_actor(tmp_path / "a.json", 0.0)
    p = tmp_path / "s.toml"
    p.write_text(SCENARIO.format(duration=4, agent='agent = "a.json", agent_interval_ms = 25'))
    sc = load_scenario(p)
    q = sc.router_agents()["uplink"]
    assert (q.agent, q.agent_interval_ms) == ((tmp_path / "a.json").resolve(), 25.0)
    cfg = sc.emulator_config(["c1"], "srv", 1, tmp_path)
    assert "agent" not in cfg["uplink"]["qdisc"] and cfg["control"]["socket"].endswith("linkemu.sock")


def test_observation_and_reward_of_two_states() -> None:
    obs_ = Observer(rate_mbit=8.0)  # 1 MB/s
    s0 = {"base_prob": 0.1, "classic_delay_ms": 10.0, "bytes_out": 0, "bytes_in": 0, "classic_packets_in": 0,
          "classic_drops": 0, "l4s_packets_in": 0}
    o0, r0 = obs_.update(s0, 1.0)
    assert o0.shape == (len(OBS_FEATURES),) and r0["utilisation"] == 0.0
    s1 = dict(s0, classic_delay_ms=30.0, bytes_out=50_000, bytes_in=60_000, classic_packets_in=100,
              classic_drops=2, l4s_packets_in=10, l4s_native_marks=5)
    o1, r1 = obs_.update(s1, 1.05)  # 50 ms: the link could carry 50,000 bytes
    f = dict(zip(OBS_FEATURES, o1.tolist(), strict=True))
    assert f["utilisation"] == pytest.approx(1.0) and f["offered_load"] == pytest.approx(1.2)
    assert f["classic_drop_frac"] == pytest.approx(0.2) and f["l4s_mark_frac"] == pytest.approx(0.5)
    assert f["classic_delay_trend"] == pytest.approx(0.4)
    # 30 ms against a 15 ms target: one target over (-1), 2 % drops (-0.2); an empty queue costs 0.3.
    assert reward(dict(r1, classic_delay_ms=0.0, classic_drop_frac=0.0)) == pytest.approx(1.0 - 0.3)
    assert reward(r1) == pytest.approx(1.0 - 1.0 - 0.2)
    assert reward(dict(r1, classic_delay_ms=10_000.0, classic_drop_frac=0.0)) == pytest.approx(1.0 - 4.0)


def test_action_mapping_bounds() -> None:
    assert next_base_prob(0.0, 0.0) == P_MIN
    assert next_base_prob(0.1, 1.0) == pytest.approx(0.1 * 2**ACTION_SCALE)
    assert next_base_prob(0.1, -5.0) == pytest.approx(0.1 / 2**ACTION_SCALE)  # a is clipped to [-1, 1]
    assert next_base_prob(0.9, 1.0) == P_MAX


# -------------------------------------------------------------- kernel ---


@pytest.mark.kernel
def test_agent_sets_reach_linkemu_within_an_interval_and_a_dead_agent_hands_back(tmp_path: Path) -> None:
    from ccswitch.testbed.runs.dualpi2_agent import AgentLoop
    from ccswitch.testbed.runs.emulator import Emulator, dualpi2, emulator_config, link
    from ccswitch.testbed.runs.linkemu_control import LinkemuControl
    from ccswitch.testbed.runs.topology import Topology

    interval = 0.02
    actor = load_actor(constant_actor(tmp_path / "a.json", 1.0, interval))  # p' x 2**ACTION_SCALE every interval
    sock = tmp_path / "linkemu.sock"
    with Topology(1) as topo:
        cfg = emulator_config(topo.client_ifs, topo.server_if, uplink=link(20, 5, qdisc=dualpi2()),
                              downlink=link(20, 5), control={"socket": str(sock)})
        with Emulator(topo.router, cfg, stats_dir=tmp_path / "emu") as emu, LinkemuControl(sock) as ctl:
            loop = AgentLoop(sock, actor, rate_mbit=20, direction="uplink", log_csv=tmp_path / "agent.csv")
            loop.start()
            seen = []
            deadline = time.monotonic() + 3.0
            while loop.steps < 8 and time.monotonic() < deadline:
                steps = loop.steps
                up = ctl.state("uplink")["uplink"]
                if steps and up["pi"] == "manual":
                    seen.append((steps, up["base_prob"]))
                time.sleep(interval / 4)
            assert loop.error is None
            # Read within a quarter interval of the step count: p' is the one set at step n or n+1
            # (the loop may have stepped between reading `steps` and the state).
            for n, p in seen:
                # tanh(atanh(0.999999)) in float32: the factor is 2 to within 1e-6 per step.
                want = [pytest.approx(min(P_MIN * 2 ** (ACTION_SCALE * k), 1.0), rel=1e-4) for k in (n, n + 1)]
                assert p in want, (n, p)
            # The agent dies without a word: its thread stops, its socket closes, no "auto" is sent.
            loop._stop.set()
            assert loop._thread is not None
            loop._thread.join(2.0)
            assert loop._ctl is not None
            loop._ctl.close()
            t_dead = time.monotonic()
            lease = LEASE_INTERVALS * interval
            while ctl.state("uplink")["uplink"]["pi"] != "auto" and time.monotonic() - t_dead < 2.0:
                time.sleep(0.005)
            handed_back = time.monotonic() - t_dead
            up = ctl.state("uplink")["uplink"]
            assert up["pi"] == "auto" and up["lease_expiries"] == 1
            # Lease plus one PI update (16 ms) plus scheduling slack on a loaded 2-core machine.
            assert handed_back < lease + 0.016 + 0.25, handed_back
    q = emu.summary["uplink"]["qdisc_stats"]
    assert q["lease_expiries"] == 1 and q["manual_updates"] > 0
    rows = (tmp_path / "agent.csv").read_text().splitlines()
    assert rows[0].split(",")[:2] == ["t_s", "p_prime"] and len(rows) >= 6


@pytest.mark.kernel
def test_scenario_with_the_shipped_actor_runs_it(tmp_path: Path) -> None:
    from ccswitch.testbed.runs.runner import run_once

    p = tmp_path / "s.toml"
    p.write_text(SCENARIO.format(duration=4, agent=f'agent = "{SHIPPED}"'))
    summary = run_once(load_scenario(p), tmp_path / "run", progress=False)
    rec = summary["meta"]["router_agents"]["uplink"]
    interval = load_actor(SHIPPED).interval_s
    assert rec["error"] is None and rec["checksum"] == load_actor(SHIPPED).checksum
    assert rec["steps"] >= 0.7 * 4 / interval, rec  # ran the whole run (slack: start-up, a loaded machine)
    rows = (tmp_path / "run" / "emulator" / "agent-uplink.csv").read_text().splitlines()
    assert len(rows) == rec["steps"] + 1
    q = summary["emulator"]["uplink"]["qdisc_stats"]
    assert q["manual_updates"] > 0 and summary["iperf3"]["C1"]
