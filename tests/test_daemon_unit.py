"""Unit tests of the daemon's pure parts: guard (fake clock), config, aggregation, reward, heuristic, recorder.

The guard's real counterpart (a real flow switched by a running daemon) is
tests/test_daemon.py::test_daemon_switches_a_real_flow_and_respects_a_manual_pin.
"""

from __future__ import annotations

import json
import logging
import math
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ccswitch.daemon.aggregate import aggregate
from ccswitch.daemon.config import ConfigError, load_config, parse_config, render_default
from ccswitch.daemon.guard import Guard, GuardConfig
from ccswitch.daemon.policies import HeuristicDecider, build_decider, eval_scores_batch
from ccswitch.daemon.recorder import Recorder, RecordError
from ccswitch.daemon.unfairness import fairness, rewards
from ccswitch.envs.reward import RewardConfig, eval_scores, reward
from ccswitch.models.policy import PolicyError
from ccswitch.schema import FLOW_SAMPLE_SCHEMA

REPO = Path(__file__).resolve().parents[1]


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def guard(**kw: float) -> tuple[Guard, Clock]:
    c = Clock()
    base = {"min_dwell_s": 5.0, "margin": 0.1, "consecutive": 3, "max_switches_per_min": 2, "eval_window_s": 3.0,
            "revert_threshold": 0.1, "holdoff_s": 30.0, "jitter_s": 0.0}
    return Guard(GuardConfig(**{**base, **kw}), clock=c), c


WANT_BBR = {"cubic": 1.0, "bbr": 2.0}


def test_hysteresis_needs_consecutive_wins_by_the_margin() -> None:
    # a tick where bbr only wins by less than the margin restarts the streak
    g2, _ = guard(eval_window_s=0)
    v = [g2.decide(1, "cubic", WANT_BBR).reason for _ in range(2)]
    assert v[0].endswith("(1/3)") and v[1].endswith("(2/3)")
    assert "margin" in g2.decide(1, "cubic", {"cubic": 1.0, "bbr": 1.05}).reason
    assert g2.decide(1, "cubic", WANT_BBR).reason.endswith("(1/3)")
    assert g2.decide(1, "cubic", WANT_BBR).action == "keep"
    v3 = g2.decide(1, "cubic", WANT_BBR)
    assert (v3.action, v3.to) == ("switch", "bbr")


def test_relative_margin_scales_with_the_q_values() -> None:
    # Q-values of -100 / -92: an absolute gain of 8 is 8 % of |Q[current]|
    g, _ = guard(eval_window_s=0, consecutive=1, margin=0.05, margin_rel=0.1)
    v = g.decide(1, "cubic", {"cubic": -100.0, "bbr": -92.0})
    assert v.action == "keep" and "< margin 10" in v.reason
    assert g.decide(1, "cubic", {"cubic": -100.0, "bbr": -89.0}).action == "switch"
    # near zero the absolute margin still applies; an unscored current CCA (reno) always yields
    g2, _ = guard(eval_window_s=0, consecutive=1, margin=0.05, margin_rel=0.1)
    assert g2.decide(2, "cubic", {"cubic": -0.1, "bbr": -0.06}).action == "keep"
    assert g2.decide(3, "reno", {"cubic": -50.0}).action == "switch"


def test_dwell_blocks_until_min_dwell_after_a_switch() -> None:
    g, c = guard(eval_window_s=0, consecutive=1)
    assert g.decide(1, "cubic", WANT_BBR).action == "switch"
    g.applied(1, "cubic", "bbr", "policy")
    c.t += 4.9
    v = g.decide(1, "bbr", {"cubic": 2.0, "bbr": 1.0})
    assert v.action == "keep" and "dwell" in v.reason
    c.t += 0.2
    assert g.decide(1, "bbr", {"cubic": 2.0, "bbr": 1.0}).action == "switch"


def test_cap_limits_switches_per_minute() -> None:
    g, c = guard(eval_window_s=0, consecutive=1, min_dwell_s=0, max_switches_per_min=2)
    cur = "cubic"
    for _ in range(2):
        other = "bbr" if cur == "cubic" else "cubic"
        v = g.decide(1, cur, {cur: 0.0, other: 1.0})
        assert v.action == "switch"
        g.applied(1, cur, other, "policy")
        cur = other
        c.t += 10
    other = "bbr" if cur == "cubic" else "cubic"
    v = g.decide(1, cur, {cur: 0.0, other: 1.0})
    assert v.action == "keep" and "cap" in v.reason
    c.t += 41  # the first switch leaves the 60 s window
    assert g.decide(1, cur, {cur: 0.0, other: 1.0}).action == "switch"


def test_post_switch_evaluation_reverts_and_holds_the_choice_off() -> None:
    g, c = guard(consecutive=1, min_dwell_s=0)
    for _ in range(3):  # before: reward 1.0
        g.observe(1, "cubic", 1.0)
        c.t += 1
    assert g.decide(1, "cubic", WANT_BBR).action == "switch"
    g.applied(1, "cubic", "bbr", "policy")
    v = None
    for _ in range(3):  # after: reward 0.5 -> worse by 0.5 > 0.1
        c.t += 1
        v = g.observe(1, "bbr", 0.5)
    assert v is not None and (v.action, v.to) == ("revert", "cubic"), v
    g.applied(1, "bbr", "cubic", "revert")
    # bbr is held off: even a strong preference keeps cubic
    c.t += 10
    v = g.decide(1, "cubic", {"cubic": 0.0, "bbr": 5.0})
    assert v.action == "keep" and v.reason == "policy prefers the current CCA"
    c.t += 25  # hold-off (30 s) over, but both switches are still inside the cap's 60 s
    assert "cap" in g.decide(1, "cubic", {"cubic": 0.0, "bbr": 5.0}).reason
    c.t += 30
    assert g.decide(1, "cubic", {"cubic": 0.0, "bbr": 5.0}).action == "switch"


def test_desync_delays_policy_switches_by_a_per_flow_random_draw() -> None:
    import random

    c = Clock()
    g = Guard(GuardConfig(min_dwell_s=5.0, margin=0.1, consecutive=1, eval_window_s=0.0, jitter_s=4.0),
              clock=c, rng=random.Random(7))
    delays = []
    for flow in range(40):
        g.track(flow, "cubic")
        delays.append(g.flows[flow].not_before - c.t)
    assert all(0.0 <= d <= 4.0 for d in delays) and max(delays) - min(delays) > 2.0  # spread, within bounds
    flow = max(range(40), key=lambda f: delays[f])
    v = g.decide(flow, "cubic", WANT_BBR)
    assert v.action == "keep" and "desync" in v.reason
    c.t += delays[flow] + 0.01
    v = g.decide(flow, "cubic", WANT_BBR)
    assert v.action == "switch"
    g.applied(flow, "cubic", "bbr", "policy")
    wait = g.flows[flow].not_before - c.t
    assert 5.0 <= wait <= 9.0  # dwell plus a fresh draw
    c.t += 5.01
    v = g.decide(flow, "bbr", {"cubic": 2.0, "bbr": 1.0})
    assert v.action == ("keep" if wait > 5.01 else "switch")
    restored = Guard(g.cfg, clock=c)
    restored.from_state(g.to_state())
    assert restored.flows[flow].not_before == g.flows[flow].not_before


def test_desync_off_changes_nothing() -> None:
    g, _ = guard(consecutive=1, jitter_s=0.0)
    g.track(1, "cubic")
    assert g.decide(1, "cubic", WANT_BBR).action == "switch"


def test_flap_damping_blocks_only_going_back_after_a_confirmed_switch() -> None:
    """return_holdoff_s: after cubic->pcc is confirmed, pcc->cubic waits; pcc->bbr does not; a state
    saved in between (daemon restart) keeps the damping."""
    g, c = guard(consecutive=1, min_dwell_s=0, max_switches_per_min=10, return_holdoff_s=20.0)
    g.observe(1, "cubic", 1.0)
    g.applied(1, "cubic", "pcc", "policy")
    v = None
    for _ in range(3):  # as good as before: confirmed
        c.t += 1
        v = g.observe(1, "pcc", 1.0)
    assert v is not None and v.reason.startswith("confirmed cubic->pcc")
    back = g.decide(1, "pcc", {"cubic": 2.0, "bbr": 0.0, "pcc": 1.0})
    assert back.action == "keep" and "damping: left cubic" in back.reason and back.best == "cubic"
    assert g.busy() == {1}
    restored = Guard(g.cfg, clock=c)
    restored.from_state(g.to_state())
    assert "damping" in restored.decide(1, "pcc", {"cubic": 2.0, "pcc": 1.0}).reason
    assert g.decide(1, "pcc", {"cubic": 0.0, "bbr": 2.0, "pcc": 1.0}).action == "switch"  # a third CCA: allowed
    c.t += 20.1  # 20 s after the confirmation (at t0 + 3 s)
    assert g.decide(1, "pcc", {"cubic": 2.0, "pcc": 1.0}).action == "switch"
    off, c2 = guard(consecutive=1, min_dwell_s=0)  # return_holdoff_s = 0: no damping
    off.observe(1, "cubic", 1.0)
    off.applied(1, "cubic", "pcc", "policy")
    for _ in range(3):
        c2.t += 1
        off.observe(1, "pcc", 1.0)
    assert off.decide(1, "pcc", {"cubic": 2.0, "pcc": 1.0}).action == "switch"


def test_post_switch_evaluation_confirms_when_not_worse() -> None:
    g, c = guard(consecutive=1, min_dwell_s=0)
    g.observe(1, "cubic", 1.0)
    g.applied(1, "cubic", "bbr", "policy")
    # evaluation in progress blocks further switching
    assert "evaluation" in g.decide(1, "bbr", {"bbr": 0.0, "pcc": 1.0}).reason
    v = None
    for _ in range(3):
        c.t += 1
        v = g.observe(1, "bbr", 0.95)  # worse by 0.05 < threshold 0.1
    assert v is not None and v.action == "keep" and v.reason.startswith("confirmed")


def test_pin_overrides_the_policy_and_state_survives_a_restart() -> None:
    g, c = guard(consecutive=1, min_dwell_s=0)
    g.pin(7, "pcc", "cubic")
    g.applied(7, "cubic", "pcc", "manual")
    assert g.decide(7, "pcc", {"pcc": 0.0, "cubic": 9.0}).reason.startswith("pinned")
    g.applied(8, "cubic", "bbr", "policy")
    state = json.loads(json.dumps(g.to_state()))
    g2 = Guard(g.cfg, clock=c)
    assert g2.from_state(state, alive=[7, 8]) == 2
    assert g2.decide(7, "pcc", {"pcc": 0.0, "cubic": 9.0}).reason.startswith("pinned")
    assert g2.flows[8].last_switch == c.t and g2.flows[8].evaluation is not None  # no second switch right away
    assert g2.unpin(7) and g2.decide(7, "pcc", {"pcc": 0.0, "cubic": 9.0}).action == "switch"


def test_unscored_current_cca_is_replaced() -> None:
    g, _ = guard(consecutive=1)
    v = g.decide(1, "reno", {"cubic": 0.5, "bbr": 0.2})
    assert (v.action, v.to) == ("switch", "cubic")


# ----------------------------------------------------------------- config
def test_default_config_file_matches_the_schema() -> None:
    assert (REPO / "daemon" / "ccswitch.toml").read_text() == render_default()
    cfg = load_config(REPO / "daemon" / "ccswitch.toml")
    assert cfg.get("daemon.tick_s") == 0.2 and cfg.policy["kind"] == "dqn"


def test_config_errors_name_every_bad_key(tmp_path: Path) -> None:
    f = tmp_path / "c.toml"
    f.write_text('[guard]\nmin_dwell_s = -1\nmargn = 1\n[policy]\nkind = "magic"\n[bogus]\nx = 1\n'
                 '[flows]\nports = [0]\ndst_prefixes = ["10.0.0.0/33"]\n[daemon]\ntick_s = "fast"\n')
    with pytest.raises(ConfigError) as e:
        load_config(f)
    text = "\n".join(e.value.problems)
    for key in ("guard.min_dwell_s: must be >= 0", "guard.margn: unknown key", "policy.kind: must be one of",
                "bogus: unknown section", "flows.ports:", "flows.dst_prefixes:", "daemon.tick_s: must be a number"):
        assert key in text, text
    assert len(e.value.problems) == 7
    with pytest.raises(ConfigError, match="not valid TOML"):
        f.write_text("[guard\n")
        load_config(f)
    with pytest.raises(ConfigError, match="no such file"):
        load_config(tmp_path / "missing.toml")
    assert parse_config({}).get("guard.consecutive") == 3


def test_check_config_cli(tmp_path: Path) -> None:
    """`ccswitchd --check-config`: exit 0 and a summary, or exit 1 and one line per problem."""
    good = tmp_path / "good.toml"
    good.write_text('[policy]\nkind = "heuristic"\n')
    run = [sys.executable, "-m", "ccswitch.daemon.main", "--check-config", "--config"]
    ok = subprocess.run([*run, str(good)], capture_output=True, text=True)
    assert ok.returncode == 0 and "is valid; policy: heuristic" in ok.stdout
    bad = tmp_path / "bad.toml"
    bad.write_text('[guard]\nconsecutive = 0\n[log]\nlevel = "loud"\n')
    cp = subprocess.run([*run, str(bad)], capture_output=True, text=True)
    lines = cp.stderr.strip().splitlines()
    assert cp.returncode == 1 and len(lines) == 2, cp.stderr
    assert all(ln.startswith(f"ccswitchd: error: {bad}: ") for ln in lines)
    assert "guard.consecutive" in lines[0] and "log.level" in lines[1]


def test_bad_policy_file_refuses_unless_a_fallback_is_named(tmp_path: Path) -> None:
    corrupt = tmp_path / "p.json"
    corrupt.write_text((REPO / "models" / "policy.json").read_text().replace('"relu"', '"tanh"', 1))
    cfg = parse_config({"policy": {"file": str(corrupt)}})
    with pytest.raises(PolicyError, match=r"checksum mismatch.*policy\.fallback"):
        build_decider(dict(cfg.policy))
    cfg = parse_config({"policy": {"file": str(tmp_path / "none.json"), "fallback": "heuristic"}})
    dec, warning = build_decider(dict(cfg.policy))
    assert dec.kind == "heuristic" and warning and "no such file" in warning
    cp = subprocess.run([sys.executable, "-m", "ccswitch.daemon.main", "--check-config", "--config",
                         str(_write(tmp_path / "c.toml", f'[policy]\nfile = "{corrupt}"\n'))],
                        capture_output=True, text=True)
    assert cp.returncode == 1 and cp.stderr.count("\n") == 1 and "checksum mismatch" in cp.stderr


def _write(p: Path, text: str) -> Path:
    p.write_text(text)
    return p


# --------------------------------------------------------- data functions
def _table(rows: list[dict]) -> pa.Table:
    base = {f.name: (0.0 if pa.types.is_floating(f.type) else ("" if pa.types.is_string(f.type) else 0))
            for f in FLOW_SAMPLE_SCHEMA}
    return pa.Table.from_pylist([{**base, **r} for r in rows], schema=FLOW_SAMPLE_SCHEMA)


def test_aggregate_means_over_time_and_sums_counters() -> None:
    t = _table([
        {"flow_id": 1, "interval_s": 0.2, "throughput_bps": 10e6, "sent_segs": 100, "retrans_segs": 0,
         "rtt_us": 1000.0, "jitter_us": 100.0, "rtt_samples": 11, "cca": "cubic"},
        {"flow_id": 2, "interval_s": 0.2, "throughput_bps": 1e6, "sent_segs": 10, "cca": "bbr", "jitter_us": math.nan},
        {"flow_id": 1, "interval_s": 0.6, "throughput_bps": 20e6, "sent_segs": 100, "retrans_segs": 10,
         "rtt_us": 3000.0, "jitter_us": 300.0, "rtt_samples": 31, "cca": "bbr"},
    ])
    a = {r["flow_id"]: r for r in aggregate(t).to_pylist()}
    assert a[1]["interval_s"] == pytest.approx(0.8)
    assert a[1]["throughput_bps"] == pytest.approx((10e6 * 0.2 + 20e6 * 0.6) / 0.8)
    assert a[1]["sent_segs"] == 200 and a[1]["loss_rate"] == pytest.approx(10 / 200)
    assert a[1]["rtt_us"] == 3000.0 and a[1]["cca"] == "bbr"  # newest state
    assert a[1]["jitter_us"] == pytest.approx((100 * 10 + 300 * 30) / 40)
    assert a[2]["throughput_bps"] == 1e6 and math.isnan(a[2]["jitter_us"])


def test_vectorised_reward_equals_envs_reward() -> None:
    t = _table([
        {"flow_id": 1, "dst": "10.0.0.2", "throughput_bps": 30e6, "rtt_us": 20e3, "loss_rate": 0.01,
         "sndq_bytes": 1},
        {"flow_id": 2, "dst": "10.0.0.2", "throughput_bps": 10e6, "rtt_us": 25e3, "loss_rate": 0.0, "sndq_bytes": 1},
        {"flow_id": 3, "dst": "10.0.0.9", "throughput_bps": 5e6, "rtt_us": math.nan, "loss_rate": 0.0,
         "sndq_bytes": 1},
    ])
    f = fairness(t, "dst")
    assert f.thratio[:2] == pytest.approx([1.5, 0.5]) and f.thratio[2] == 1.0
    jain = 40 ** 2 / (2 * (30 ** 2 + 10 ** 2))
    assert f.jain[:2] == pytest.approx([jain, jain]) and f.jain[2] == 1.0
    cfg = RewardConfig()
    got = rewards(cfg, t, f)
    want = [reward(cfg, throughput_mbps=30, rtt_ms=20, loss=0.01, jain=jain)[0],
            reward(cfg, throughput_mbps=10, rtt_ms=25, loss=0.0, jain=jain)[0],
            reward(cfg, throughput_mbps=5, rtt_ms=math.nan, loss=0.0, jain=1.0)[0]]
    assert got == pytest.approx(want)
    ms = RewardConfig(fairness="minshare")  # the group's smallest Thratio: 0.5 on 10.0.0.2, alone 1 on .9
    want = [reward(ms, throughput_mbps=30, rtt_ms=20, loss=0.01, min_share=0.5)[0],
            reward(ms, throughput_mbps=10, rtt_ms=25, loss=0.0, min_share=0.5)[0],
            reward(ms, throughput_mbps=5, rtt_ms=math.nan, loss=0.0, min_share=1.0)[0]]
    assert rewards(ms, t, f) == pytest.approx(want)
    assert want[0] < reward(cfg, throughput_mbps=30, rtt_ms=20, loss=0.01, jain=jain)[0]  # 2 ln 0.5 < 2 (J-1)
    assert fairness(t, "host").jain[2] < 1.0  # all three compete when grouped per host


def test_batched_eval_scores_equal_paper_function() -> None:
    rng = np.random.default_rng(3)
    thr, rtt, loss = rng.uniform(0, 50, (20, 3)), rng.uniform(1, 100, (20, 3)), rng.uniform(0, 0.05, (20, 3))
    got = eval_scores_batch(thr, rtt, loss)
    for i in range(20):
        assert got[i] == pytest.approx(eval_scores(thr[i], rtt[i], loss[i]))
    thr[0, 2] = np.nan
    assert np.isnan(eval_scores_batch(thr, rtt, loss)[0, 2])


def test_heuristic_scores_only_what_it_has_seen() -> None:
    h = HeuristicDecider(memory_s=10)
    t = _table([{"flow_id": 1, "dst": "a", "throughput_bps": 10e6, "rtt_us": 10e3, "cca": "cubic"},
                {"flow_id": 2, "dst": "a", "throughput_bps": 30e6, "rtt_us": 10e3, "cca": "bbr"}])
    s = h.scores(t, np.zeros(2, dtype=np.int64), now=0.0)
    # flow 1 sees bbr through flow 2 on the same path: bbr scores higher; pcc unknown
    assert s.values[0, 1] > s.values[0, 0] and np.isnan(s.values[0, 2])
    # later the flow's own memory of bbr wins over the path mean; stale memories are dropped
    t2 = _table([{"flow_id": 1, "dst": "a", "throughput_bps": 5e6, "rtt_us": 10e3, "cca": "bbr"}])
    s2 = h.scores(t2, np.zeros(1, dtype=np.int64), now=20.0)
    assert np.isnan(s2.values[0, 0]) and s2.values[0, 1] == pytest.approx(1.0)
    # an idle connection on the path (iperf3's control connection on pcc) is no measurement of pcc
    t3 = _table([{"flow_id": 3, "dst": "a", "throughput_bps": 20e6, "rtt_us": 10e3, "cca": "cubic"},
                 {"flow_id": 4, "dst": "a", "throughput_bps": 1e3, "sndq_bytes": 0, "cca": "pcc"}])
    assert np.isnan(h.scores(t3, np.zeros(2, dtype=np.int64), now=30.0).values[0, 2])


def test_recorder_refuses_an_existing_record_and_writes_readable_files(tmp_path: Path) -> None:
    rec = tmp_path / "r.parquet"
    with Recorder(rec, tmp_path / "d.jsonl") as r:
        r.samples(_table([{"flow_id": 1}]))
        r.samples(FLOW_SAMPLE_SCHEMA.empty_table())
        r.samples(_table([{"flow_id": 2}]))
        r.decision({"flow": 1, "q": {"cubic": math.nan}})
    t = pq.read_table(rec)
    assert t.schema.equals(FLOW_SAMPLE_SCHEMA) and t.num_rows == 2
    assert pq.ParquetFile(rec).num_row_groups == 2
    assert json.loads((tmp_path / "d.jsonl").read_text()) == {"flow": 1, "q": {"cubic": None}}
    with pytest.raises(RecordError, match="exists"):
        Recorder(rec)


# ------------------------------------------------ controller on a fake plane
class FakePlane:
    """Flows whose throughput depends on their CCA (the link as the heuristic would measure it).

    A stand-in for DataPlane in the controller's unit tests; the real counterpart (the daemon
    switching real flows) is tests/test_daemon.py and tests/test_e2e_daemon.py.
    """

    def __init__(self, ccas: dict[int, str], mbps: dict[str, float], dst: str = "10.0.0.2"):
        self.cca = dict(ccas)
        self.mbps = mbps
        self.dst = dst
        self.switches: list[tuple[int, str]] = []

    def sample(self) -> pa.Table:
        return _table([{"flow_id": f, "dst": self.dst, "cca": c, "state": 1, "interval_s": 1.0,
                        "throughput_bps": self.mbps[c] * 1e6, "rtt_us": 20e3, "sndq_bytes": 1000,
                        "sent_segs": 100, "rtt_ratio": 1.0} for f, c in self.cca.items()])

    def switch_many(self, requests: list[tuple[int, str, str]]) -> list:
        from ccswitch.bpf.switcher import SwitchResult

        out = []
        for f, c, inh in requests:
            out.append(SwitchResult(f, c, inh, ok=True, cca_before=self.cca[f], cca_after=c))
            self.switches.append((f, c))
            self.cca[f] = c
        return out


def _controller(plane: FakePlane, policy: dict, guard_cfg: dict, tmp: Path | None = None):
    from ccswitch.daemon.controller import Controller

    cfg = parse_config({"daemon": {"tick_s": 1.0}, "policy": {"decision_interval_s": 1.0, **policy},
                        "flows": {"min_age_s": 0.0}, "guard": guard_cfg})
    dec, _ = build_decider(dict(cfg.policy))
    clock = Clock()
    rec = Recorder(decisions=tmp / "d.jsonl") if tmp else None
    ctl = Controller(cfg, dec, plane, clock=clock, available=lambda: ["cubic", "bbr", "pcc", "reno"], recorder=rec)
    return ctl, clock


EXPLORE_GUARD = {"min_dwell_s": 5.0, "eval_window_s": 3.0, "consecutive": 3, "margin": 0.05,
                 "max_switches_per_min": 4, "revert_threshold": 0.1, "holdoff_s": 30.0, "jitter_s": 0.0}


def _run(ctl, clock: Clock, seconds: int) -> list[str]:
    seen = []
    for _ in range(seconds):
        ctl.tick()
        seen.append(ctl.dp.cca[1])
        clock.t += 1.0
    return seen


def test_heuristic_explores_a_lone_flow_and_keeps_the_best(tmp_path: Path) -> None:
    """A lone CUBIC flow (no other flow on its path to learn from): the heuristic tries bbr (better:
    confirmed), then pcc (worse: reverted by the post-switch evaluation, held off), then stays on
    bbr.  The tries respect the evaluation window and the dwell time (>= 5 s apart)."""
    plane = FakePlane({1: "cubic"}, {"cubic": 12.0, "bbr": 46.0, "pcc": 30.0})
    ctl, clock = _controller(plane, {"kind": "heuristic"}, EXPLORE_GUARD, tmp_path)
    seen = _run(ctl, clock, 30)
    assert seen[-1] == "bbr" and seen[0] == "bbr"  # first round starts as soon as the flow is managed
    assert [c for _, c in plane.switches] == ["bbr", "pcc", "bbr"]
    t_pcc = seen.index("pcc")
    assert t_pcc >= 5  # dwell after the first switch
    ctl.recorder.close()
    dec = [json.loads(x) for x in (tmp_path / "d.jsonl").read_text().splitlines()]
    applied = [d for d in dec if d["verdict"] == "applied"]
    assert applied[0]["reason"].startswith("explore: trying bbr") and applied[1]["reason"].startswith(
        "explore: trying pcc") and applied[2]["action"] == "revert"
    assert [h["kind"] for h in ctl.history] == ["explore", "explore", "revert"]
    assert ctl.stats.explores == 2 and ctl.stats.reverts == 1
    assert not ctl.explorer.active  # the round is over: pcc held off, bbr already best


def test_exploration_picks_the_best_after_trying_all() -> None:
    """No revert (threshold out of reach): cubic -> bbr -> pcc, then the pick goes back to the
    best-scoring bbr without waiting for the hysteresis; the next round only after explore_every_s."""
    plane = FakePlane({1: "cubic"}, {"cubic": 12.0, "bbr": 46.0, "pcc": 30.0})
    ctl, clock = _controller(plane, {"kind": "heuristic", "explore_every_s": 100.0},
                             {**EXPLORE_GUARD, "revert_threshold": 100.0})
    seen = _run(ctl, clock, 40)
    assert [c for _, c in plane.switches] == ["bbr", "pcc", "bbr"]
    assert seen[-1] == "bbr"
    pick = [h for h in ctl.history if h["to"] == "bbr"][-1]
    assert pick["reason"].startswith("explore: round done, bbr scored best") and pick["kind"] == "explore"


def test_exploration_off_switch_and_cap() -> None:
    """policy.explore = false: the heuristic never leaves the first CCA (the old behaviour).
    With a cap of 1 switch per minute, one try per minute."""
    plane = FakePlane({1: "cubic"}, {"cubic": 12.0, "bbr": 46.0, "pcc": 30.0})
    ctl, clock = _controller(plane, {"kind": "heuristic", "explore": False}, EXPLORE_GUARD)
    assert set(_run(ctl, clock, 20)) == {"cubic"} and not plane.switches
    plane = FakePlane({1: "cubic"}, {"cubic": 12.0, "bbr": 46.0, "pcc": 30.0})
    ctl, clock = _controller(plane, {"kind": "heuristic"}, {**EXPLORE_GUARD, "max_switches_per_min": 1,
                                                            "revert_threshold": 100.0})
    _run(ctl, clock, 59)
    assert len(plane.switches) == 1
    _run(ctl, clock, 2)
    assert len(plane.switches) == 2


def test_exploration_skips_pinned_and_static_never_explores() -> None:
    plane = FakePlane({1: "cubic"}, {"cubic": 12.0, "bbr": 46.0, "pcc": 30.0})
    ctl, clock = _controller(plane, {"kind": "heuristic"}, EXPLORE_GUARD)
    ctl.guard.pin(1, "cubic", "cubic")
    assert set(_run(ctl, clock, 10)) == {"cubic"}
    assert ctl.last_decision[1]["reason"].startswith("pinned")
    plane = FakePlane({1: "cubic"}, {"cubic": 12.0, "bbr": 46.0, "pcc": 30.0})
    ctl, clock = _controller(plane, {"kind": "static", "static_cca": "cubic"}, EXPLORE_GUARD)
    assert ctl.explorer is None and set(_run(ctl, clock, 10)) == {"cubic"}


def test_refused_switch_holds_off_warns_once_and_recovers(caplog: pytest.LogCaptureFixture) -> None:
    """The kernel refuses switches to bbr (unloaded): the flow keeps cubic, the daemon does not retry
    every decision, one warning names the fault; once bbr loads again the next try after the hold-off
    switches and one line says so."""
    from ccswitch.bpf.switcher import SwitchResult

    class Refusing(FakePlane):
        refuse = True
        tries = 0

        def switch_many(self, requests):
            if not self.refuse:
                return super().switch_many(requests)
            self.tries += len(requests)
            return [SwitchResult(f, c, i, ok=False, error="setsockopt(TCP_CONGESTION, bbr): No such file or "
                                 "directory") for f, c, i in requests]

    plane = Refusing({1: "cubic", 2: "cubic"}, {"cubic": 12.0, "bbr": 46.0, "pcc": 30.0})
    guard = {**EXPLORE_GUARD, "eval_window_s": 0.0, "consecutive": 1, "holdoff_s": 20.0}
    ctl, clock = _controller(plane, {"kind": "static", "static_cca": "bbr"}, guard)
    with caplog.at_level(logging.INFO, logger="ccswitchd"):
        assert set(_run(ctl, clock, 15)) == {"cubic"} and plane.cca[2] == "cubic"
        assert plane.tries == 2  # one try per flow, then held off (not one per decision)
        warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(warnings) == 1 and "refused" in warnings[0].getMessage(), [r.getMessage() for r in warnings]
        assert ctl.stats.failed == 2 and "bbr" in ctl.guard.flows[1].holdoff
        plane.refuse = False
        seen = _run(ctl, clock, 10)
    assert seen[-1] == "bbr" and plane.cca[2] == "bbr"
    assert [r.getMessage() for r in caplog.records].count("switching works again") == 1


class LossyPlane(FakePlane):
    """FakePlane whose flows also report a loss rate (retransmitted / sent) and a cwnd per flow."""

    def __init__(self, ccas: dict[int, str], loss: dict[int, float], cwnd: dict[int, float],
                 rtt_ratio: dict[int, float] | None = None):
        super().__init__(ccas, {"cubic": 2.0, "reno": 2.0, "bbr": 20.0, "pcc": 10.0})
        self.loss, self.cwnd, self.rtt_ratio = loss, cwnd, rtt_ratio or {}

    def sample(self) -> pa.Table:
        return _table([{"flow_id": f, "dst": self.dst, "cca": c, "state": 1, "interval_s": 1.0,
                        "throughput_bps": self.mbps[c] * 1e6, "rtt_us": 40e3, "sndq_bytes": 1000,
                        "sent_segs": 1000, "retrans_segs": round(1000 * self.loss[f]), "loss_rate": self.loss[f],
                        "rtt_ratio": self.rtt_ratio.get(f, 2.0),
                        "cwnd_segs": self.cwnd[f]} for f, c in self.cca.items()])


ESCAPE_GUARD = {**EXPLORE_GUARD, "eval_window_s": 0.0, "min_dwell_s": 0.0, "holdoff_s": 60.0,
                "escape_loss": 0.04, "escape_cwnd_segs": 10.0, "escape_after_s": 3.0}


def test_starvation_escape_moves_only_loss_limited_flows_and_holds() -> None:
    """Flow 1: CUBIC at 8 % loss and cwnd 6 (loss-limited) -> BBR once stuck for escape_after_s, and the
    static-CUBIC policy cannot take it back while CUBIC is held off.  Flow 2: same loss at cwnd 40
    (a big window with a lossy interval) and flow 3: cwnd 6 at 1 % loss stay.  Flow 4, pinned, stays."""
    plane = LossyPlane({1: "cubic", 2: "cubic", 3: "cubic", 4: "cubic"}, {1: 0.08, 2: 0.08, 3: 0.01, 4: 0.08},
                       {1: 6, 2: 40, 3: 6, 4: 6})
    ctl, clock = _controller(plane, {"kind": "static", "static_cca": "cubic"}, ESCAPE_GUARD)
    ctl.guard.pin(4, "cubic", "cubic")
    seen = _run(ctl, clock, 20)
    assert seen.index("bbr") == 3  # stuck at t = 0, 1, 2, 3: due on the 4th decision (>= 3 s)
    assert set(seen[3:]) == {"bbr"}  # held: static-CUBIC would switch back at once otherwise
    assert plane.switches == [(1, "bbr")] and plane.cca == {1: "bbr", 2: "cubic", 3: "cubic", 4: "cubic"}
    assert ctl.stats.escapes == 1 and ctl.stats.switches == 1
    (h,) = ctl.history
    assert h["kind"] == "escape" and h["reason"].startswith("escape: 8.0 % loss at cwnd 6"), h
    assert {"cubic", "pcc"} <= set(ctl.guard.flows[1].holdoff)
    assert ctl.last_decision[1]["to"] == "bbr"  # the policy wants cubic back; the hold-off keeps bbr


def test_starvation_escape_off_by_default_and_reset_by_a_good_interval() -> None:
    plane = LossyPlane({1: "cubic"}, {1: 0.08}, {1: 6})
    ctl, clock = _controller(plane, {"kind": "static", "static_cca": "cubic"}, {**ESCAPE_GUARD, "escape_loss": 0.0})
    assert ctl.escape is None and set(_run(ctl, clock, 10)) == {"cubic"}
    ctl, clock = _controller(plane, {"kind": "static", "static_cca": "cubic"}, ESCAPE_GUARD)
    _run(ctl, clock, 3)  # stuck for 2 s
    plane.loss[1] = 0.0
    _run(ctl, clock, 1)  # one clean interval: the count starts over
    plane.loss[1] = 0.08
    seen = _run(ctl, clock, 6)
    assert seen.index("bbr") == 3 and ctl.stats.escapes == 1


def test_starvation_escape_rtt_gate_moves_only_flows_without_a_standing_queue() -> None:
    """With escape_max_rtt_ratio 1.3: flow 1 loss-limited at RTT 1.1 x min (random loss, no queue) escapes;
    flow 2, equally loss-limited at 2.5 x min (a queue-filling competitor), stays; flow 3 at 1.1 x min on most
    decisions but 2.0 on one starts its count again from that decision."""
    plane = LossyPlane({1: "cubic", 2: "cubic", 3: "cubic"}, {1: 0.03, 2: 0.03, 3: 0.03}, {1: 8, 2: 8, 3: 8},
                       {1: 1.1, 2: 2.5, 3: 1.1})
    guard = {**ESCAPE_GUARD, "escape_loss": 0.02, "escape_cwnd_segs": 12.0, "escape_max_rtt_ratio": 1.3}
    ctl, clock = _controller(plane, {"kind": "static", "static_cca": "cubic"}, guard)
    _run(ctl, clock, 2)  # stuck at t = 0, 1
    plane.rtt_ratio[3] = 2.0
    _run(ctl, clock, 1)  # t = 2: flow 3's queue shows: not stuck
    plane.rtt_ratio[3] = 1.1
    _run(ctl, clock, 2)  # t = 3: flow 1 due (stuck since 0); flow 3 stuck again since t = 3
    assert plane.cca == {1: "bbr", 2: "cubic", 3: "cubic"}
    _run(ctl, clock, 4)  # t = 5..8: flow 3 due at t = 6
    assert plane.cca == {1: "bbr", 2: "cubic", 3: "bbr"} and ctl.stats.escapes == 2
    assert "RTT < 1.3 x min" in ctl.history[0]["reason"]


def test_a_cca_leaving_the_kernel_is_logged_once_and_not_chosen(caplog: pytest.LogCaptureFixture) -> None:
    """PCC unregistered by another tool: the policy stops choosing it and a flow on it moves to the best
    available CCA (an unregistered struct_ops CCA keeps running its sockets, but nothing vouches for it any
    more), one warning; registered again: one info line and it is chosen again."""
    plane = FakePlane({1: "cubic"}, {"cubic": 12.0, "bbr": 46.0, "pcc": 30.0})
    ctl, clock = _controller(plane, {"kind": "static", "static_cca": "pcc"},
                             {**EXPLORE_GUARD, "eval_window_s": 0.0, "consecutive": 1})
    host = ["cubic", "bbr", "reno"]
    ctl.available = lambda: list(host)
    with caplog.at_level(logging.INFO, logger="ccswitchd"):
        assert set(_run(ctl, clock, 8)) == {"cubic"}
        host.append("pcc")
        assert _run(ctl, clock, 8)[-1] == "pcc"
        host.remove("pcc")
        assert _run(ctl, clock, 8)[-1] != "pcc"
    msgs = [r.getMessage() for r in caplog.records]
    assert msgs.count("congestion control available again") == 1
    assert msgs.count("congestion control gone from the kernel") == 1


def test_vectorised_keep_paths_decide_like_the_guard() -> None:
    """The controller skips the guard for flows whose best CCA is the current one or wins by less than the
    margin (vectorised); with log.all_decisions every flow goes through Guard.decide.  Same rows, same
    seeds: the same switches, in the same order, on every tick."""
    from ccswitch.daemon.controller import Controller

    class Noisy(FakePlane):
        def __init__(self, n: int) -> None:
            super().__init__({i: ("cubic", "bbr", "pcc")[i % 3] for i in range(1, n + 1)}, {})
            self.rng = np.random.default_rng(7)

        def sample(self) -> pa.Table:
            n = len(self.cca)
            return _table([{"flow_id": f, "dst": f"10.0.0.{f % 4}", "cca": c, "state": 1, "interval_s": 1.0,
                            "throughput_bps": float(t), "rtt_us": float(r), "sndq_bytes": 1000, "sent_segs": 100,
                            "rtt_ratio": float(q), "loss_rate": float(lo)}
                           for (f, c), t, r, q, lo in zip(self.cca.items(), self.rng.uniform(1e5, 5e7, n),
                                                          self.rng.uniform(2e3, 8e4, n), self.rng.uniform(1, 4, n),
                                                          self.rng.uniform(0, 0.02, n), strict=True)])

    def run(all_decisions: bool) -> tuple[list, Counter]:
        plane = Noisy(300)
        cfg = parse_config({"daemon": {"tick_s": 1.0}, "policy": {"decision_interval_s": 1.0},
                            "flows": {"min_age_s": 0.0}, "log": {"all_decisions": all_decisions},
                            "guard": {"jitter_s": 0.0, "consecutive": 2, "min_dwell_s": 3.0}})
        dec, _ = build_decider(dict(cfg.policy))
        clock = Clock()
        ctl = Controller(cfg, dec, plane, clock=clock, available=lambda: ["cubic", "bbr", "pcc", "reno"])
        quiet = Counter()
        for _ in range(12):
            ctl.tick()
            quiet["fast"] += len(ctl._last_fast)
            quiet["margin"] += len(ctl._last_margin)
            clock.t += 1.0
        return plane.switches, quiet

    fast, quiet = run(False)
    slow, _ = run(True)
    assert fast == slow and len(fast) > 20
    assert quiet["margin"] > 0 and quiet["fast"] > 0  # both vectorised paths were taken


def test_monitor_read_once_per_decision_unless_recording(tmp_path: Path) -> None:
    """Tick 0.2 s, decisions every 1 s: without --record the monitor is read on decision ticks only
    (the read differences the kernel counters over the whole interval); with --record or
    daemon.sample_every_tick on every tick."""
    from ccswitch.daemon.controller import Controller

    class Counting(FakePlane):
        reads = 0

        def sample(self) -> pa.Table:
            self.reads += 1
            return super().sample()

    for extra, rec, want in (({}, None, 2), ({"sample_every_tick": True}, None, 10),
                             ({}, Recorder(record=tmp_path / "r.parquet"), 10)):
        plane = Counting({1: "cubic"}, {"cubic": 10.0})
        cfg = parse_config({"daemon": {"tick_s": 0.2, **extra}, "policy": {"kind": "heuristic"},
                            "flows": {"min_age_s": 0.0}})
        clock = Clock()
        ctl = Controller(cfg, build_decider(dict(cfg.policy))[0], plane, recorder=rec, clock=clock,
                         available=lambda: ["cubic"])
        for _ in range(10):
            ctl.tick()
            clock.t += 0.2
        assert plane.reads == want and ctl.stats.n == want and ctl.stats.idle == 10 - want
        assert ctl.stats.decisions == 2  # one per second either way
        if rec:
            rec.close()


# --------------------------------------------------- vectorised bookkeeping
def test_live_observations_equal_the_envs_builder() -> None:
    """The daemon's vectorised builder gives ObservationBuilder's observations exactly, over updates
    in which flows appear, pause (shorter and longer than forget_after) and vanish."""
    from ccswitch.daemon.flowindex import string_codes
    from ccswitch.daemon.observations import LiveObservations
    from ccswitch.envs.features import Normalisation, ObservationBuilder

    rng = np.random.default_rng(7)
    norm = Normalisation(tuple(rng.uniform(-1, 1, 6)), tuple(rng.uniform(0.5, 2, 6)))
    ref, live = ObservationBuilder(norm), LiveObservations(norm)
    pool = np.arange(1, 400, dtype=np.uint64) * 977
    for step in range(60):
        present = pool[rng.random(len(pool)) < (0.3 if step % 7 else 0.9)]
        present = rng.permutation(present[: 40 + step * 3])
        n = len(present)
        t = _table([{"flow_id": int(f), "throughput_bps": float(rng.uniform(0, 5e7)),
                     "rtt_us": float(rng.uniform(1e3, 1e5)), "rtt_ratio": float(rng.uniform(1, 4)),
                     "loss_rate": float(rng.uniform(0, 0.05)),
                     "jitter_us": float(rng.uniform(0, 5e3)) if i % 5 else math.nan,
                     "sending_rate_bps": float(rng.uniform(0, 5e7)), "sndq_bytes": int(i % 3),
                     "netns_cookie": int(i % 4), "cca": ("cubic", "bbr", "pcc", "reno")[i % 4]}
                    for i, f in enumerate(present)])
        ids_r, obs_r = ref.update(t)
        cols = {c: t.column(c).to_numpy(zero_copy_only=False) for c in (
            "throughput_bps", "rtt_us", "rtt_ratio", "loss_rate", "jitter_us", "sending_rate_bps", "flow_id",
            "sndq_bytes", "netns_cookie")}
        ids_l, obs_l = live.update(cols, *string_codes(t.column("cca")))
        assert n == len(ids_l) and (ids_r == ids_l).all()
        assert np.array_equal(obs_r, obs_l), step
        assert len(ref) == len(live)


def test_flow_index_and_string_codes() -> None:
    from ccswitch.daemon.flowindex import FlowIndex, string_codes

    ix = FlowIndex()
    s, new = ix.slots_for(np.array([50, 30, 2**63 + 5], dtype=np.uint64))
    assert new.all() and sorted(s.tolist()) == [0, 1, 2]
    assert ix.lookup(np.array([2**63 + 5, 7, 30], dtype=np.uint64)).tolist() == [s[2], -1, s[1]]
    freed = ix.retain(np.array([30], dtype=np.uint64))
    assert sorted(freed.tolist()) == sorted([s[0], s[2]]) and len(ix) == 1
    s2, new2 = ix.slots_for(np.array([30, 8, 9], dtype=np.uint64))
    assert new2.tolist() == [False, True, True] and s2[0] == s[1] and set(s2[1:].tolist()) == set(freed.tolist())
    assert ix.size == 3  # freed slots reused, no growth
    col = pa.chunked_array([pa.array(["cubic", "bbr"]), pa.array(["pcc", None, "fd00::1", "cubic"]).slice(0, 4)])
    codes, values = string_codes(col)
    assert [values[c] for c in codes] == ["cubic", "bbr", "pcc", "", "fd00::1", "cubic"]
    assert len(values) == 5 and string_codes(pa.array([], pa.string()))[1] == []


def test_flow_selector_ports_and_prefixes() -> None:
    from ccswitch.daemon.config import defaults
    from ccswitch.daemon.selection import FlowSelector

    cfg = {**defaults().flows, "dst_prefixes": ["10.0.0.0/24", "fd00::/8"], "ports": [5201]}
    t = _table([{"flow_id": i + 1, "dst": d, "dport": p} for i, (d, p) in enumerate(
        [("10.0.0.5", 5201), ("10.0.1.5", 5201), ("fd00::1", 5201), ("10.0.0.9", 22), ("10.0.0.5", 5201)])])
    assert FlowSelector(cfg).select(t).tolist() == [True, False, True, False, True]
    assert FlowSelector(defaults().flows).select(t).all()


def test_controller_queries_after_a_decision() -> None:
    """status, flows and explain on the fake plane: the per-row lookups behind the CLI."""
    plane = FakePlane({1: "cubic", 2: "bbr"}, {"cubic": 12.0, "bbr": 46.0, "pcc": 30.0})
    ctl, clock = _controller(plane, {"kind": "heuristic", "explore": False}, EXPLORE_GUARD)
    _run(ctl, clock, 3)
    st = ctl.status()
    assert st["flows"] == 2 and st["managed"] == 2 and st["flows_per_cca"] == {"cubic": 1, "bbr": 1}
    rows = {r["flow_id"]: r for r in ctl.flows()}
    assert rows[1]["managed"] and set(rows[1]["q"]) == {"cubic", "bbr", "pcc"} and rows[1]["thratio"] < 1
    ex = ctl.explain_flow(2)
    assert ex["cca"] == "bbr" and ex["q"]["bbr"] == pytest.approx(1.0) and ex["guard"]["action"] == "keep"
    with pytest.raises(ValueError, match="not found"):
        ctl.explain_flow(99)


def test_daemon_install_places_unit_and_config_idempotently(tmp_path: Path) -> None:
    """`ccswitch daemon install --root`: unit with this installation's ccswitchd, default config;
    a second run changes nothing; an administrator's config is never overwritten.  An installation
    under /tmp (hidden by the unit's PrivateTmp=yes, seen as a CI failure under real systemd) gets a
    drop-in that binds it back read-only, removed again once the installation is elsewhere."""
    from ccswitch.daemon.install import CONFIG_DST, TMP_DROPIN_DST, UNIT_DST, install, unit_text

    first = install(tmp_path, install_paths=[Path("/opt/ccswitch/.venv/bin/ccswitchd")])
    assert (tmp_path / UNIT_DST).read_text() == unit_text() and "@CCSWITCHD@" not in unit_text()
    assert "PrivateTmp=yes" in unit_text()
    assert any("installed (defaults)" in line for line in first)
    assert not (tmp_path / TMP_DROPIN_DST).exists()
    again = install(tmp_path, install_paths=[Path("/opt/ccswitch/.venv/bin/ccswitchd")])
    assert any("unit" in line and "up to date" in line for line in again)
    (tmp_path / CONFIG_DST).write_text("[daemon]\ntick_s = 0.5\n")
    assert any("modified by the administrator" in line for line in install(tmp_path, install_paths=[]))
    assert (tmp_path / CONFIG_DST).read_text() == "[daemon]\ntick_s = 0.5\n"

    in_tmp = [Path("/tmp/ci-clone/.venv/bin/ccswitchd"), Path("/tmp/ci-clone"), Path("/var/tmp/py/bin/python")]
    lines = install(tmp_path, install_paths=in_tmp)
    dropin = (tmp_path / TMP_DROPIN_DST).read_text()
    assert "BindReadOnlyPaths=/tmp/ci-clone\n" in dropin and "BindReadOnlyPaths=/var/tmp/py\n" in dropin
    assert dropin.count("BindReadOnlyPaths=") == 2 and "[Service]" in dropin
    assert any("PrivateTmp" in line for line in lines)
    assert not any("drop-in" in line for line in install(tmp_path, install_paths=in_tmp))  # idempotent
    assert any("removed" in line for line in install(tmp_path, install_paths=[Path("/opt/x/bin/ccswitchd")]))
    assert not (tmp_path / TMP_DROPIN_DST).exists()
