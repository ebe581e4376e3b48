"""Unit tests of the daemon's guard on a fake clock: hysteresis, margins, dwell, switch cap, post-switch
evaluation, desync, flap damping, pins.

The guard's real counterpart (a real flow switched by a running daemon) is
tests/test_daemon.py::test_daemon_switches_a_real_flow_and_respects_a_manual_pin.
"""

from __future__ import annotations

import json

from ccswitch.daemon.guard import Guard, GuardConfig

from daemon_fakes import Clock


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
