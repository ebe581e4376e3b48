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

import contextlib
import json
import math
import socket
import threading
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
    RESIDUAL_SCALE,
    STATE_KEYS,
    Actor,
    ActorError,
    Observer,
    control_params,
    load_actor,
    next_base_prob,
    reward,
    save_actor,
)
from ccswitch.testbed.scenario import ScenarioError, load_scenario

SHIPPED = Path(__file__).resolve().parents[1] / "models" / "dualpi2_a3c.json"
STEP_ACTOR = SHIPPED.with_name("dualpi2_a3c_step.json")  # paper 000's mapping (the agent sets p'), 25 Nov


def constant_actor(path: Path, action: float, interval_s: float = 0.02, mode: str = "step") -> Path:
    """An actor whose output is tanh(atanh(action)) = action whatever the state."""
    n = len(OBS_FEATURES)
    kernels = [np.zeros((n, 4), np.float32), np.zeros((4, 1), np.float32)]
    biases = [np.zeros(4, np.float32), np.array([np.arctanh(np.clip(action, -0.999999, 0.999999))], np.float32)]
    save_actor(path, kernels=kernels, biases=biases, interval_s=interval_s, mode=mode)
    return path


# ---------------------------------------------------------------- unit ---


def test_actor_file_round_trip_and_constant_action(tmp_path: Path) -> None:
    a = load_actor(constant_actor(tmp_path / "a.json", 0.5))
    assert a.interval_s == 0.02 and a.checksum.startswith("sha256:")
    for obs in (np.zeros(len(OBS_FEATURES)), np.full(len(OBS_FEATURES), 2.0)):
        assert a.act(obs) == pytest.approx(0.5, abs=1e-5)


@pytest.mark.parametrize(("mutate", "message"), [
    (None, "no such DualPI2 actor file"),
    ("not json", "not a readable DualPI2 actor file"),
    ({"format": "ccswitch-policy"}, "not a DualPI2 actor file"),
    ({"version": 99}, "actor file version 99 is not supported"),
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
    ('agent = "bad.json"', "not a readable DualPI2 actor file"),
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


def test_residual_actor_sends_a_factor_on_the_pi_controllers_p(tmp_path: Path) -> None:
    a = load_actor(constant_actor(tmp_path / "r.json", -1.0, mode="residual"))
    assert a.mode == "residual" and load_actor(constant_actor(tmp_path / "s.json", 0.3)).mode == "step"
    assert control_params("residual", 0.2, 0.0) == {"prob_scale": 1.0}  # a = 0: DualPI2 as it is
    assert control_params("residual", 0.2, -3.0) == {"prob_scale": pytest.approx(2 ** -RESIDUAL_SCALE)}
    assert control_params("residual", 0.2, 1.0) == {"prob_scale": pytest.approx(2 ** RESIDUAL_SCALE)}
    assert control_params("step", 0.2, 1.0) == {"base_prob": next_base_prob(0.2, 1.0)}
    # An actor file claiming another residual scale is refused (trained for another mapping).
    doc = json.loads((tmp_path / "r.json").read_text())
    doc["action"]["scale"] = 2.0
    from ccswitch.models.policy import write_signed
    write_signed(tmp_path / "r2.json", doc)
    with pytest.raises(ActorError, match="trained for another action mapping"):
        load_actor(tmp_path / "r2.json")


# The computation as it was before issue 14 made it cheaper, kept verbatim: the loop's fast path must
# give the same observation, raw metrics, action and p' (bit for bit) for the same states.


def _ref_num(d: dict, key: str) -> float:
    v = d.get(key, 0.0)
    return float(v) if isinstance(v, int | float) and math.isfinite(float(v)) else 0.0


class _RefObserver:
    def __init__(self, rate_mbit: float) -> None:
        self.rate_mbit = rate_mbit
        self._prev: dict | None = None
        self._prev_t: float | None = None
        self._prev_delay = 0.0

    def update(self, d: dict, t_s: float) -> tuple[np.ndarray, dict[str, float]]:
        prev = self._prev or {}
        dt = max(t_s - self._prev_t, 1e-3) if self._prev_t is not None else 0.0

        def delta(key: str) -> float:
            return max(_ref_num(d, key) - _ref_num(prev, key), 0.0) if prev else 0.0

        link_bytes = self.rate_mbit * 1e6 / 8 * dt if dt > 0 else 0.0
        c_in = delta("classic_packets_in")
        l_in = delta("l4s_packets_in")
        c_drops = delta("classic_drops") + delta("classic_limit_drops")
        raw = {
            "p_prime": _ref_num(d, "base_prob"),
            "classic_delay_ms": _ref_num(d, "classic_delay_ms"),
            "l4s_delay_ms": _ref_num(d, "l4s_delay_ms"),
            "utilisation": delta("bytes_out") / link_bytes if link_bytes > 0 else 0.0,
            "offered_load": delta("bytes_in") / link_bytes if link_bytes > 0 else 0.0,
            "classic_drop_frac": c_drops / c_in if c_in > 0 else 0.0,
            "classic_mark_frac": delta("classic_marks") / c_in if c_in > 0 else 0.0,
            "l4s_mark_frac": (delta("l4s_native_marks") + delta("l4s_coupled_marks")) / l_in if l_in > 0 else 0.0,
        }
        byte_ms = 8 / (self.rate_mbit * 1e3)
        classic_delay = raw["classic_delay_ms"] / 50.0
        obs = np.array([
            (math.log2(max(raw["p_prime"], P_MIN)) + 10.0) / 10.0,
            classic_delay,
            raw["l4s_delay_ms"] / 5.0,
            _ref_num(d, "qdelay_ms") / 50.0,
            _ref_num(d, "classic_bytes") * byte_ms / 50.0,
            _ref_num(d, "l4s_bytes") * byte_ms / 5.0,
            raw["utilisation"],
            raw["offered_load"],
            10.0 * raw["classic_drop_frac"],
            10.0 * raw["classic_mark_frac"],
            raw["l4s_mark_frac"],
            classic_delay - self._prev_delay if prev else 0.0,
        ], dtype=np.float32)
        self._prev, self._prev_t, self._prev_delay = dict(d), t_s, classic_delay
        return np.clip(obs, -1.0, 2.0), raw


def _ref_act(kernels: list[np.ndarray], biases: list[np.ndarray], obs: np.ndarray) -> float:
    x = np.asarray(obs, dtype=np.float32)
    for k, b in zip(kernels[:-1], biases[:-1], strict=True):
        x = np.maximum(x @ k + b, 0.0)
    return float(np.tanh(x @ kernels[-1] + biases[-1])[0])


def _ref_next_base_prob(p_prime: float, action: float) -> float:
    a = float(np.clip(action, -1.0, 1.0))
    return float(np.clip(max(p_prime, P_MIN) * 2.0 ** (ACTION_SCALE * a), P_MIN, P_MAX))


_GAUGE_KEYS = ("base_prob", "classic_delay_ms", "l4s_delay_ms", "qdelay_ms", "classic_bytes", "l4s_bytes")
_COUNTER_KEYS = ("bytes_out", "bytes_in", "classic_packets_in", "l4s_packets_in", "classic_drops",
                 "classic_limit_drops", "classic_marks", "l4s_native_marks", "l4s_coupled_marks")


def _random_states(rng: np.random.Generator, n: int) -> list[tuple[dict, float]]:
    """Control-socket-like DualPI2 states: growing counters (ints, as linkemu sends them) and gauges over
    the whole clipping range, with the odd one out: a key missing, a counter that went back, a bool, a
    string, NaN/inf, an int gauge, an empty state, a clock that did not move."""
    odd = [None, "missing", True, "x", float("nan"), float("inf"), -float("inf"), -5, 10**6, 1e300]
    counters = dict.fromkeys(_COUNTER_KEYS, 0)
    t, out = 10.0, []
    for _ in range(n):
        for k in counters:
            counters[k] += int(rng.integers(0, 400 if "bytes" not in k else 300_000))
        d: dict = {"kind": "dualpi2", "pi": "auto", "drops": {"aqm": 1}, **counters,
                   "base_prob": float(10 ** rng.uniform(-4.5, 0.2)), "classic_delay_ms": float(rng.uniform(0, 150)),
                   "l4s_delay_ms": float(rng.uniform(0, 15)), "qdelay_ms": float(rng.uniform(0, 150)),
                   "classic_bytes": int(rng.integers(0, 1_000_000)), "l4s_bytes": int(rng.integers(0, 100_000))}
        if rng.random() < 0.3:
            key = str(rng.choice(_GAUGE_KEYS + _COUNTER_KEYS))
            v = odd[int(rng.integers(len(odd)))]
            if v == "missing":
                del d[key]
            else:
                d[key] = v
        if rng.random() < 0.05:
            d = {}
        t += 0.0 if rng.random() < 0.05 else float(rng.uniform(0.0005, 0.03))
        out.append((d, t))
    return out


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")  # the reference, 1e300
def test_fast_observation_action_and_p_match_the_reference() -> None:
    """Issue 14: Observer.update, Actor.act and next_base_prob as the loop runs them now give exactly
    what the computation before gave, for the shipped actor and a random deeper one."""
    rng = np.random.default_rng(14)
    shipped = load_actor(SHIPPED)
    random_actor = Actor([rng.normal(0, 0.7, s).astype(np.float32) for s in ((12, 24), (24, 16), (16, 8), (8, 1))],
                         [rng.normal(0, 0.3, s).astype(np.float32) for s in (24, 16, 8, 1)], interval_s=0.01)
    for rate in (50.0, 7.5):
        fast, ref = Observer(rate), _RefObserver(rate)
        for d, t in _random_states(rng, 600):
            o, raw = fast.update(d, t)
            o_ref, raw_ref = ref.update(d, t)
            assert o.dtype == o_ref.dtype == np.float32 and o.shape == o_ref.shape
            assert np.array_equal(o, o_ref, equal_nan=True), (d, o, o_ref)
            assert raw.keys() == raw_ref.keys() and all(
                raw[k] == raw_ref[k] or (math.isnan(raw[k]) and math.isnan(raw_ref[k])) for k in raw), (raw, raw_ref)
            for actor in (shipped, random_actor):
                a = actor.act(o)
                assert a == _ref_act(actor.kernels, actor.biases, o)
                assert next_base_prob(raw["p_prime"], a) == _ref_next_base_prob(raw_ref["p_prime"], a)
    # Inputs off the loop's path take the general route, with the same results.
    for obs in (np.linspace(-1, 2, 12), list(np.linspace(2, -1, 12)), np.linspace(-1, 2, 12).astype(np.float16)):
        assert shipped.act(obs) == _ref_act(shipped.kernels, shipped.biases, obs)
    f64 = Actor([k.astype(np.float64) for k in shipped.kernels], shipped.biases, shipped.interval_s)
    assert f64.act(np.ones(12)) == _ref_act(f64.kernels, f64.biases, np.ones(12))
    for p in (0.0, 1e-4, 0.3, 0.99, 2.0, float("inf"), float("nan"), np.float32(0.01), 0):
        for a in (-7.0, -1.0, -0.3, 0.0, 0.6, 1.0, 3.0, float("nan"), np.float32(0.2), 1):
            got, want = next_base_prob(p, a), _ref_next_base_prob(p, a)
            assert got == want or (math.isnan(got) and math.isnan(want)), (p, a)


class _FakeLinkemu:
    """A control socket answering like linkemu: DualPI2 states whose counters grow with each request
    (all of them kept in ``served``), sets acknowledged.  ``old``: refuses ``fields`` as linkemu did before
    them.  ``compact``: sorted compact JSON like linkemu's serde_json (else json.dumps' default)."""

    def __init__(self, path: Path, *, old: bool, compact: bool) -> None:
        self.old, self.compact = old, compact
        self.requests: list[dict] = []
        self.served: list[tuple[dict, float]] = []
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.srv.bind(str(path))
        self.srv.listen(2)
        threading.Thread(target=self._serve, daemon=True).start()

    def _state(self, n: int) -> dict:
        return {"kind": "dualpi2", "pi": "manual", "drops": {"aqm": n}, "base_prob": 0.02 + 0.001 * (n % 7),
                "classic_delay_ms": 3.0 * (n % 11), "l4s_delay_ms": 0.5 * (n % 5), "qdelay_ms": 2.5 * (n % 13),
                "classic_bytes": 1500 * (n % 17), "l4s_bytes": 1500 * (n % 3), "bytes_in": 70_000 * n,
                "bytes_out": 62_000 * n, "classic_packets_in": 40 * n, "l4s_packets_in": 7 * n,
                "classic_drops": n // 3, "classic_limit_drops": 0, "classic_marks": n // 2,
                "l4s_native_marks": 2 * n, "l4s_coupled_marks": n, "packets_in": 47 * n}

    def _answer(self, req: dict) -> dict:
        if req["op"] == "set":
            return {"ok": True, "id": req["id"], "t_s": 1.0, "dir": req["dir"],
                    "applied": {"base_prob": req["base_prob"], "base_prob_was": 0.01, "hold_ms": req.get("hold_ms")}}
        if "fields" in req and self.old:
            return {"ok": False, "id": req["id"],
                    "error": "fields: unknown field for state (fields: op, id, dir, max_flows)"}
        d, t = self._state(len(self.served) + 1), 0.01 * (len(self.served) + 1)
        self.served.append((d, t))
        if "fields" in req:
            d = {k: v for k, v in d.items() if k in req["fields"]}
        return {"ok": True, "id": req["id"], "t_s": t, req["dir"]: d}

    def _serve(self) -> None:
        with contextlib.suppress(OSError):
            conn, _ = self.srv.accept()
            with conn, conn.makefile("rwb") as f:
                for line in f:
                    req = json.loads(line)
                    self.requests.append(req)
                    resp = self._answer(req)
                    out = json.dumps(resp, separators=(",", ":"), sort_keys=True) if self.compact else json.dumps(resp)
                    f.write(out.encode() + b"\n")
                    f.flush()


@pytest.mark.parametrize(("old", "compact"), [(False, True), (False, False), (True, True)])
def test_agent_loop_reads_only_its_fields_and_acts_as_on_the_whole_state(tmp_path: Path, old: bool,
                                                                          compact: bool) -> None:
    """Issue 14: the loop asks linkemu for STATE_KEYS only (an older linkemu refuses them: then the whole
    state); the p' it sets every interval are the ones the computation before issue 14 gives for the whole
    states served, in order."""
    from ccswitch.testbed.runs.dualpi2_agent import AgentLoop

    fake = _FakeLinkemu(tmp_path / "ctl.sock", old=old, compact=compact)
    actor = load_actor(STEP_ACTOR)  # sets base_prob, which the pre-issue-14 reference computes
    loop = AgentLoop(tmp_path / "ctl.sock", actor, rate_mbit=50, interval_s=0.005).start()
    deadline = time.monotonic() + 5.0
    while loop.steps < 12 and time.monotonic() < deadline:
        time.sleep(0.01)
    loop.stop()
    assert loop.error is None and loop.steps >= 12
    states = [r for r in fake.requests if r["op"] == "state"]
    sets = [r for r in fake.requests if r["op"] == "set" and r["base_prob"] != "auto"]
    assert states[0]["fields"] == list(STATE_KEYS) and states[0]["dir"] == "uplink"
    assert all(("fields" in r) != old for r in states[1:])
    ref, want = _RefObserver(50), []
    for d, t in fake.served:
        o, raw = ref.update(d, t)
        want.append(_ref_next_base_prob(raw["p_prime"], _ref_act(actor.kernels, actor.biases, o)))
    assert [r["base_prob"] for r in sets] == want[:len(sets)] and len(sets) >= 12
    assert {r["hold_ms"] for r in sets} == {LEASE_INTERVALS * 0.005 * 1000}
    assert fake.requests[-1] == {"op": "set", "dir": "uplink", "base_prob": "auto", "id": fake.requests[-1]["id"]}


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
def test_residual_agent_scales_the_running_pi_controller_and_stop_hands_back(tmp_path: Path) -> None:
    from ccswitch.testbed.runs.dualpi2_agent import AgentLoop
    from ccswitch.testbed.runs.emulator import Emulator, dualpi2, emulator_config, link
    from ccswitch.testbed.runs.linkemu_control import LinkemuControl
    from ccswitch.testbed.runs.topology import Topology

    interval = 0.02
    actor = load_actor(constant_actor(tmp_path / "r.json", -1.0, interval, mode="residual"))  # x 2**-1
    sock = tmp_path / "linkemu.sock"
    with Topology(1) as topo:
        cfg = emulator_config(topo.client_ifs, topo.server_if, uplink=link(20, 5, qdisc=dualpi2()),
                              downlink=link(20, 5), control={"socket": str(sock)})
        with Emulator(topo.router, cfg, stats_dir=tmp_path / "emu"), LinkemuControl(sock) as ctl:
            with AgentLoop(sock, actor, rate_mbit=20, direction="uplink", log_csv=tmp_path / "agent.csv") as loop:
                deadline = time.monotonic() + 3.0
                while loop.steps < 5 and time.monotonic() < deadline:
                    time.sleep(interval / 2)
                up = ctl.state("uplink")["uplink"]
                assert loop.error is None and loop.steps >= 5
                # The PI controller keeps running (pi stays "auto"); p' is its value times the factor.
                assert up["pi"] == "auto" and up["prob_scale"] == pytest.approx(0.5)
                assert up["base_prob"] == pytest.approx(up["prob_scale"] * up["pi_base_prob"], abs=1e-12)
                assert up["hold_left_ms"] > 0
            up = ctl.state("uplink")["uplink"]  # stop() sent "auto": the factor is 1 again
            assert up["prob_scale"] == 1.0 and up["base_prob"] == up["pi_base_prob"]
    rows = (tmp_path / "agent.csv").read_text().splitlines()
    assert rows[0].split(",")[-2] == "prob_scale_set"
    assert {float(r.split(",")[-2]) for r in rows[1:]} == {0.5}


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
    # The shipped actor is a residual one (26 Nov): it scales the PI controller's p' instead of fixing it.
    fixed_or_scaled = "scaled_updates" if load_actor(SHIPPED).mode == "residual" else "manual_updates"
    assert q[fixed_or_scaled] > 0 and summary["iperf3"]["C1"]
