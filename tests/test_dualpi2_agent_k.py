"""The ``residual-k`` DualPI2 agent (issue 14's stretch item: the agent also sets the coupling factor k).

* Unit (no kernel): the k mapping and its bounds; a residual-k actor file round-trips (two outputs, 15
  features) and a mis-shaped or re-scaled one is refused; the actor files shipped before it load and act
  exactly as before (checksums pinned, the 12-feature observation); the extra features and the L:C reward
  term on synthetic states; the router loop against a fake control socket: it asks for k too, sends the
  factor and k every interval, and gives k back to the scenario's value at stop and at once when a set
  is refused.
* Kernel: the k a constant residual-k actor sets is linkemu's k (read back from its state) within an
  interval, and stop() puts the scenario's k back (as the other agent tests: a live linkemu, no flows);
  a k set with a short ``hold_ms`` through linkemu's socket is the scenario's k again once the lease has
  passed (linkemu's own lease on k, for a loop that hangs), a k set without one stays.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np
import pytest
from test_linkemu_control import FakeLinkemu

from ccswitch.models.dualpi2_actor import (
    K_MAX,
    K_MIN,
    LC_CAP,
    OBS_FEATURES,
    OBS_FEATURES_K,
    RESIDUAL_SCALE,
    STATE_KEYS,
    STATE_KEYS_K,
    ActorError,
    Observer,
    action_dims,
    control_params,
    coupling_k,
    features_for,
    lc_imbalance,
    load_actor,
    reward,
    reward_k,
    save_actor,
)
from ccswitch.models.policy import write_signed

MODELS = Path(__file__).resolve().parents[1] / "models"
# The actor files shipped before residual-k, and their checksums as shipped (26 Nov): they must not change.
OLD_ACTORS = {
    "dualpi2_a3c.json": "residual",
    "dualpi2_a3c_step.json": "step",
}


def k_actor(path: Path, a_p: float, a_k: float, interval_s: float = 0.02) -> Path:
    """A residual-k actor whose outputs are (a_p, a_k) whatever the state."""
    n = len(OBS_FEATURES_K)
    kernels = [np.zeros((n, 4), np.float32), np.zeros((4, 2), np.float32)]
    biases = [np.zeros(4, np.float32),
              np.arctanh(np.clip(np.array([a_p, a_k]), -0.999999, 0.999999)).astype(np.float32)]
    save_actor(path, kernels=kernels, biases=biases, interval_s=interval_s, mode="residual-k")
    return path


def k_only_actor(path: Path, a_k: float, interval_s: float = 0.02) -> Path:
    """A ``k`` actor (one output: k alone) whose output is a_k whatever the state."""
    n = len(OBS_FEATURES_K)
    kernels = [np.zeros((n, 4), np.float32), np.zeros((4, 1), np.float32)]
    biases = [np.zeros(4, np.float32), np.arctanh(np.clip(np.array([a_k]), -0.999999, 0.999999)).astype(np.float32)]
    save_actor(path, kernels=kernels, biases=biases, interval_s=interval_s, mode="k")
    return path


# ---------------------------------------------------------------- unit ---


def test_k_mapping_is_log2_around_rfc_9332s_2() -> None:
    assert coupling_k(0.0) == 2.0  # a_k = 0: plain DualPI2's k (an untrained actor changes nothing)
    assert coupling_k(1.0) == K_MAX == 4.0 and coupling_k(-1.0) == K_MIN == 1.0
    assert coupling_k(5.0) == 4.0 and coupling_k(-5.0) == 1.0  # clipped to [-1, 1]
    assert coupling_k(0.5) == pytest.approx(2 ** 1.5)
    assert control_params("residual-k", 0.2, (0.0, 0.0)) == {"prob_scale": 1.0, "k": 2.0}
    assert control_params("residual-k", 0.2, (-1.0, 1.0)) == {"prob_scale": pytest.approx(2 ** -RESIDUAL_SCALE),
                                                              "k": 4.0}
    assert (features_for("residual-k"), action_dims("residual-k")) == (OBS_FEATURES_K, 2)
    # k alone: the same observation, one output, and nothing but k sent (p' stays the PI controller's)
    assert (features_for("k"), action_dims("k")) == (OBS_FEATURES_K, 1)
    assert control_params("k", 0.2, 0.0) == {"k": 2.0} and control_params("k", 0.2, -1.0) == {"k": 1.0}
    for old in ("step", "residual"):
        assert (features_for(old), action_dims(old)) == (OBS_FEATURES, 1)
    assert OBS_FEATURES_K[:len(OBS_FEATURES)] == OBS_FEATURES and (*STATE_KEYS, "k") == STATE_KEYS_K


def test_residual_k_actor_file_round_trip(tmp_path: Path) -> None:
    a = load_actor(k_actor(tmp_path / "k.json", -0.25, 0.75))
    assert a.mode == "residual-k" and a.checksum.startswith("sha256:")
    doc = json.loads((tmp_path / "k.json").read_text())
    assert doc["features"] == list(OBS_FEATURES_K) and doc["action"]["k_min"] == 1.0
    for obs in (np.zeros(len(OBS_FEATURES_K)), np.full(len(OBS_FEATURES_K), 2.0)):
        got = a.act_all(obs)
        assert got == pytest.approx((-0.25, 0.75), abs=1e-5) and a.act(obs) == got[0]
    # Another k range, a one-output network or the 12 features: refused with one line naming the file.
    doc["action"]["k_max"] = 8.0
    write_signed(tmp_path / "range.json", doc)
    with pytest.raises(ActorError, match="trained for another action mapping"):
        load_actor(tmp_path / "range.json")
    n = len(OBS_FEATURES_K)
    save_actor(tmp_path / "one.json", kernels=[np.zeros((n, 1), np.float32)], biases=[np.zeros(1, np.float32)],
               interval_s=0.05, mode="residual-k")
    with pytest.raises(ActorError, match="do not chain from 15 inputs to 2 output"):
        load_actor(tmp_path / "one.json")
    doc = json.loads((tmp_path / "k.json").read_text())
    doc["features"] = list(OBS_FEATURES)
    write_signed(tmp_path / "feat.json", doc)
    with pytest.raises(ActorError, match="its features are not"):
        load_actor(tmp_path / "feat.json")


def test_k_only_actor_file_round_trip(tmp_path: Path) -> None:
    a = load_actor(k_only_actor(tmp_path / "k.json", 0.5))
    assert a.mode == "k" and a.act(np.zeros(len(OBS_FEATURES_K))) == pytest.approx(0.5, abs=1e-5)
    doc = json.loads((tmp_path / "k.json").read_text())
    assert doc["action"]["kind"] != json.loads((k_actor(tmp_path / "rk.json", 0, 0)).read_text())["action"]["kind"]
    assert "scale" not in doc["action"] and (doc["action"]["k_min"], doc["action"]["k_max"]) == (1.0, 4.0)
    doc["action"]["k_scale"] = 2.0
    write_signed(tmp_path / "scale.json", doc)
    with pytest.raises(ActorError, match="trained for another action mapping"):
        load_actor(tmp_path / "scale.json")


@pytest.mark.parametrize(("name", "mode"), sorted(OLD_ACTORS.items()))
def test_old_actor_files_load_and_act_as_before(name: str, mode: str) -> None:
    """The files shipped before residual-k: same mode, 12 features, one output; act() is the mean network as
    it always was, act_all() its one output; their observer is the 12-number one."""
    a = load_actor(MODELS / name)
    doc = json.loads((MODELS / name).read_text())
    assert a.mode == mode and tuple(doc["features"]) == OBS_FEATURES and a.kernels[-1].shape[1] == 1
    assert a.checksum == doc["checksum"]
    rng = np.random.default_rng(3)
    for _ in range(50):
        obs = rng.uniform(-1, 2, len(OBS_FEATURES)).astype(np.float32)
        x = obs
        for k, b in zip(a.kernels[:-1], a.biases[:-1], strict=True):
            x = np.maximum(x @ k + b, 0.0)
        want = float(np.tanh(x @ a.kernels[-1] + a.biases[-1])[0])
        assert a.act(obs) == want and a.act_all(obs) == (want,)
    o = Observer(50.0)
    assert o.update({"base_prob": 0.1, "k": 3.0}, 0.0)[0].shape == (len(OBS_FEATURES),)


def test_old_actor_files_are_byte_for_byte_as_committed() -> None:
    import subprocess

    root = MODELS.parent
    for name in OLD_ACTORS:
        try:
            head = subprocess.run(["git", "-C", str(root), "show", f"HEAD:models/{name}"], capture_output=True,
                                  check=True).stdout
        except (OSError, subprocess.CalledProcessError):
            pytest.skip("not a git checkout")
        assert (MODELS / name).read_bytes() == head, name


def test_extended_observation_and_lc_reward() -> None:
    o = Observer(rate_mbit=8.0, extended=True)  # 1 MB/s
    s0 = {"base_prob": 0.1, "k": 4.0, "classic_delay_ms": 15.0, "bytes_out": 0, "classic_packets_in": 0,
          "l4s_packets_in": 0, "classic_drops": 0}
    o0, r0 = o.update(s0, 1.0)
    assert o0.shape == (15,) and math.isnan(r0["l4s_share"])
    f0 = dict(zip(OBS_FEATURES_K, o0.tolist(), strict=True))
    assert f0["coupling_k"] == 1.0 and f0["l4s_share"] == 0.0 and f0["l4s_share_avg"] == 0.0
    # 50 ms: 40 Classic packets in, 10 dropped -> 30 through; 90 L4S: share 0.75.
    s1 = dict(s0, bytes_out=50_000, classic_packets_in=40, classic_drops=10, l4s_packets_in=90)
    o1, r1 = o.update(s1, 1.05)
    f1 = dict(zip(OBS_FEATURES_K, o1.tolist(), strict=True))
    assert f1["l4s_share"] == pytest.approx(0.75) and f1["l4s_share_avg"] == pytest.approx(0.75)
    assert (r1["classic_pkts"], r1["l4s_pkts"], r1["k"]) == (30.0, 90.0, 4.0)
    # The first 12 are those of the plain observer on the same states.
    plain = Observer(rate_mbit=8.0)
    plain.update(s0, 1.0)
    assert o1[:12].tolist() == plain.update(s1, 1.05)[0].tolist()
    # Per flow: 3 L4S flows share 90, 1 Classic 30 -> L:C 1: balanced, no charge.
    assert lc_imbalance(r1, 3, 1) == 0.0 and reward_k(r1, 3, 1) == reward(r1)
    # 1 L4S flow vs 1 Classic: 3:1 -> |log2 3| = 1.58, charged w_lc 0.5; 1:2 costs as 2:1.
    assert lc_imbalance(r1, 1, 1) == pytest.approx(math.log2(3))
    assert reward_k(r1, 1, 1) == pytest.approx(reward(r1) - 0.5 * math.log2(3))
    assert lc_imbalance(dict(r1, l4s_pkts=15.0), 1, 1) == pytest.approx(1.0)
    assert lc_imbalance(dict(r1, l4s_pkts=1.0), 1, 1) == LC_CAP  # capped
    # No judgement without both classes.
    assert lc_imbalance(r1, 0, 1) == 0.0 and lc_imbalance(dict(r1, classic_pkts=0.0), 1, 1) == 0.0


class _FakeDualPi2:
    """Answers like linkemu's DualPI2 (for test_linkemu_control's FakeLinkemu, which serves connections one
    after the other: the loop reconnects after a failure): states with growing counters, sets acknowledged
    (k kept, and in the state); ``refuse_after``: the n-th set with a factor and later are refused."""

    def __init__(self, path: Path, refuse_after: int | None = None) -> None:
        self.refuse_after = refuse_after
        self.k = 2.0
        self.n = 0
        self.server = FakeLinkemu(path, self._answer)
        self.requests = self.server.requests

    def _answer(self, req: dict) -> dict:
        if req["op"] == "set":
            sets = sum(r["op"] == "set" for r in self.requests[:-1])
            if self.refuse_after is not None and sets >= self.refuse_after and "prob_scale" in req:
                return {"ok": False, "id": req["id"], "error": "prob_scale: refused (test)"}
            if "k" in req:
                self.k = req["k"]
            return {"ok": True, "id": req["id"], "t_s": 1.0, "dir": req["dir"], "applied": {}}
        self.n += 1
        n = self.n
        d = {"base_prob": 0.02, "classic_delay_ms": 12.0, "bytes_out": 6_000 * n, "bytes_in": 6_500 * n,
             "classic_packets_in": 3 * n, "l4s_packets_in": 2 * n, "k": self.k}
        if "fields" in req:
            d = {k: v for k, v in d.items() if k in req["fields"]}
        return {"ok": True, "id": req["id"], "t_s": 0.01 * n, req["dir"]: d}


def _run_until(loop: object, cond: object, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond() and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.01)


def test_loop_sets_factor_and_k_and_gives_k_back_at_stop(tmp_path: Path) -> None:
    from ccswitch.testbed.runs.dualpi2_agent import AgentLoop

    fake = _FakeDualPi2(tmp_path / "ctl.sock")
    actor = load_actor(k_actor(tmp_path / "k.json", 0.0, 1.0))  # factor 1, k = 4
    loop = AgentLoop(tmp_path / "ctl.sock", actor, rate_mbit=50, interval_s=0.005, k_restore=3.0,
                     log_csv=tmp_path / "agent.csv").start()
    _run_until(loop, lambda: loop.steps >= 8)
    assert fake.k == pytest.approx(4.0, rel=1e-5)  # tanh(atanh(0.999999)): 4 to within 1e-5
    loop.stop()
    assert loop.error is None and loop.steps >= 8
    states = [r for r in fake.requests if r["op"] == "state"]
    sets = [r for r in fake.requests if r["op"] == "set"]
    assert states[0]["fields"] == list(STATE_KEYS_K)
    assert all(r["k"] == pytest.approx(4.0, rel=1e-5) and r["prob_scale"] == 1.0 and r["hold_ms"] > 0
               for r in sets[:-1])
    last = sets[-1]
    assert (last["base_prob"], last["k"]) == ("auto", 3.0) and fake.k == 3.0  # the scenario's k again
    rows = (tmp_path / "agent.csv").read_text().splitlines()
    assert rows[0].split(",")[-5:] == ["action", "action_k", "prob_scale_set", "k_set", "reward"]
    assert rows[0].split(",")[1:16] == list(OBS_FEATURES_K)
    assert float(rows[1].split(",")[-2]) == pytest.approx(4.0, rel=1e-5)


def test_loop_that_fails_gives_k_back_at_once(tmp_path: Path) -> None:
    """A refused set ends the loop; k goes back to the scenario's value right then (not only at stop())."""
    from ccswitch.testbed.runs.dualpi2_agent import AgentLoop

    fake = _FakeDualPi2(tmp_path / "ctl.sock", refuse_after=4)
    actor = load_actor(k_actor(tmp_path / "k.json", 0.5, -1.0))  # k = 1
    loop = AgentLoop(tmp_path / "ctl.sock", actor, rate_mbit=50, interval_s=0.005, k_restore=2.0).start()
    _run_until(loop, lambda: loop.error is not None)
    assert loop.error is not None and "refused" in loop.error
    _run_until(loop, lambda: fake.k == 2.0, 2.0)
    assert fake.k == 2.0  # restored before anyone called stop()
    assert [r for r in fake.requests if r["op"] == "set"][-1] == {"op": "set", "dir": "uplink", "k": 2.0,
                                                                  "id": fake.requests[-1]["id"]}
    loop.stop()
    assert fake.k == 2.0


def test_k_only_loop_sends_k_alone_and_gives_it_back_at_stop(tmp_path: Path) -> None:
    from ccswitch.testbed.runs.dualpi2_agent import AgentLoop

    fake = _FakeDualPi2(tmp_path / "ctl.sock")
    loop = AgentLoop(tmp_path / "ctl.sock", load_actor(k_only_actor(tmp_path / "k.json", -1.0)), rate_mbit=50,
                     interval_s=0.005, k_restore=2.0, log_csv=tmp_path / "agent.csv").start()
    _run_until(loop, lambda: loop.steps >= 5)
    assert fake.k == pytest.approx(1.0, rel=1e-5)
    loop.stop()
    assert loop.error is None
    sets = [r for r in fake.requests if r["op"] == "set"]
    # k and its lease only: no factor, no p' (the PI controller keeps p')
    assert all(set(r) == {"op", "dir", "id", "k", "hold_ms"} for r in sets[:-1]), sets[:2]
    assert (sets[-1]["base_prob"], sets[-1]["k"]) == ("auto", 2.0) and fake.k == 2.0
    rows = (tmp_path / "agent.csv").read_text().splitlines()
    assert rows[0].split(",")[-3:] == ["action_k", "k_set", "reward"]
    assert len(rows[1].split(",")) == len(rows[0].split(","))


def test_plain_residual_loop_still_sends_no_k(tmp_path: Path) -> None:
    from ccswitch.testbed.runs.dualpi2_agent import AgentLoop

    fake = _FakeDualPi2(tmp_path / "ctl.sock")
    loop = AgentLoop(tmp_path / "ctl.sock", load_actor(MODELS / "dualpi2_a3c.json"), rate_mbit=50,
                     interval_s=0.005).start()
    _run_until(loop, lambda: loop.steps >= 5)
    loop.stop()
    assert loop.error is None
    assert next(r for r in fake.requests if r["op"] == "state")["fields"] == list(STATE_KEYS)
    sets = [r for r in fake.requests if r["op"] == "set"]
    assert all("k" not in r for r in sets) and sets[-1]["base_prob"] == "auto"


# -------------------------------------------------------------- kernel ---


@pytest.mark.kernel
def test_k_the_agent_sets_reaches_linkemu_and_stop_restores_it(tmp_path: Path) -> None:
    from ccswitch.testbed.runs.dualpi2_agent import AgentLoop
    from ccswitch.testbed.runs.emulator import Emulator, dualpi2, emulator_config, link
    from ccswitch.testbed.runs.linkemu_control import LinkemuControl
    from ccswitch.testbed.runs.topology import Topology

    interval = 0.02
    actor = load_actor(k_actor(tmp_path / "k.json", 0.0, 1.0, interval))  # factor 1, k = 4
    sock = tmp_path / "linkemu.sock"
    with Topology(1) as topo:
        cfg = emulator_config(topo.client_ifs, topo.server_if, uplink=link(20, 5, qdisc=dualpi2(k=2.5)),
                              downlink=link(20, 5), control={"socket": str(sock)})
        with Emulator(topo.router, cfg, stats_dir=tmp_path / "emu"), LinkemuControl(sock) as ctl:
            assert ctl.state("uplink")["uplink"]["k"] == 2.5
            with AgentLoop(sock, actor, rate_mbit=20, direction="uplink", k_restore=2.5,
                           log_csv=tmp_path / "agent.csv") as loop:
                deadline = time.monotonic() + 3.0
                while loop.steps < 3 and time.monotonic() < deadline:
                    time.sleep(interval / 2)
                up = ctl.state("uplink")["uplink"]
                assert loop.error is None and loop.steps >= 3
                assert up["k"] == pytest.approx(4.0, rel=1e-5) and up["prob_scale"] == 1.0 and up["pi"] == "auto"
            up = ctl.state("uplink")["uplink"]
            assert up["k"] == 2.5 and up["prob_scale"] == 1.0  # stop(): the scenario's k, the PI alone
    rows = (tmp_path / "agent.csv").read_text().splitlines()
    assert all(float(r.split(",")[-2]) == pytest.approx(4.0, rel=1e-5) for r in rows[1:]) and len(rows) > 3


@pytest.mark.kernel
def test_a_k_lease_that_is_not_renewed_gives_linkemu_the_scenarios_k_back(tmp_path: Path) -> None:
    from ccswitch.testbed.runs.emulator import Emulator, dualpi2, emulator_config, link
    from ccswitch.testbed.runs.linkemu_control import LinkemuControl
    from ccswitch.testbed.runs.topology import Topology

    sock = tmp_path / "linkemu.sock"
    with Topology(1) as topo:
        cfg = emulator_config(topo.client_ifs, topo.server_if, uplink=link(20, 5, qdisc=dualpi2(k=2.5)),
                              downlink=link(20, 5), control={"socket": str(sock)})
        with Emulator(topo.router, cfg, stats_dir=tmp_path / "emu") as emu, LinkemuControl(sock) as ctl:
            applied = ctl.set("uplink", k=4.0, hold_ms=60.0)  # k alone with a lease
            assert (applied["k"], applied["k_was"], applied["k_hold_ms"]) == (4.0, 2.5, 60.0)
            up = ctl.state("uplink")["uplink"]
            assert up["k"] == 4.0 and up["k_config"] == 2.5 and 0 < up["k_hold_left_ms"] <= 60.0
            time.sleep(0.3)  # the lease (60 ms) and the next PI update (16 ms later at most) have passed
            up = ctl.state("uplink")["uplink"]
            assert (up["k"], up["k_hold_left_ms"], up["k_lease_expiries"], up["lease_expiries"]) == (2.5, -1.0, 1, 0)
            ctl.set("uplink", k=4.0)  # without hold_ms: stays
            time.sleep(0.2)
            up = ctl.state("uplink")["uplink"]
            assert (up["k"], up["k_hold_left_ms"], up["k_lease_expiries"]) == (4.0, -1.0, 1)
    assert emu.summary["uplink"]["qdisc_stats"]["k_lease_expiries"] == 1  # summary.json counts it too
