"""Unit tests of the daemon's controller on a fake data plane and a fake clock: exploration, refused switches,
the starvation escape, CCAs leaving the kernel, the vectorised keep paths, monitor reads, the CLI's queries.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from ccswitch.daemon.config import parse_config
from ccswitch.daemon.policies import build_decider
from ccswitch.daemon.recorder import Recorder

from daemon_fakes import Clock, flow_table


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
        return flow_table([{"flow_id": f, "dst": self.dst, "cca": c, "state": 1, "interval_s": 1.0,
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
        return flow_table([{"flow_id": f, "dst": self.dst, "cca": c, "state": 1, "interval_s": 1.0,
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
            return flow_table([{"flow_id": f, "dst": f"10.0.0.{f % 4}", "cca": c, "state": 1, "interval_s": 1.0,
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
