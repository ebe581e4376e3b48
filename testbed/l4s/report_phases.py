"""An L4S run folder's per-phase metrics: :func:`analyse` turns what :mod:`.report_read` reads into a
:class:`~.report_model.RunResult`.

Phases are the stretches between flow starts and stops (paper 004's 20 s phases; stretches shorter than
:data:`MIN_PHASE_S` are transitions).  Per phase, over its last ``PHASE_S - SETTLE_S`` seconds (the first
:data:`SETTLE_S` = 5 s after flows join or leave are a transient and left out):

* per flow: mean goodput, Mbit/s; its share of the fair share = goodput / (sum of all active flows'
  goodput / number of active flows);
* per class: aggregate goodput, per-flow mean, and **L:C** = L4S per-flow mean / Classic per-flow mean;
  per-flow means also per class + RTT group, per CCA and (vdq_csaqm) per class + packet-value policy,
  and Gold:Silver;
* Jain's index over the flows' mean goodputs; utilisation = sum of goodputs (+ 52 bytes of TCP/IP headers
  per 1448-byte segment) / link rate;
* per queue (L, C) of a class with flows in the phase: sojourn mean weighted by packets, p90 = mean of the
  per-interval p90s, max = max of the per-interval maxima (ms); CE marks and drops per packet, %; over
  linkemu's intervals that lie wholly inside the phase's window, which ends :data:`START_UNCERTAINTY_S`
  before the next boundary (:func:`intervals_within`; before 28 Nov an
  interval counted where its middle fell, so one straddling a boundary gave the phase before it the
  next phase's first slow-start peak).
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ccswitch.metrics import jain_index, nanmean
from ccswitch.testbed.l4s.report_model import CLASSES, HEADER_FACTOR, QUEUE_OF, FlowInfo, PhaseResult, RunResult
from ccswitch.testbed.l4s.report_read import (
    daemon_events,
    emulator_uplink,
    flow_infos,
    iperf_series,
    queue_series,
    scenario_table,
    scripted_switches,
    uplink_qdisc,
)

SETTLE_S = 5.0
"""Seconds after each phase boundary left out of the phase's means."""
MIN_PHASE_S = 4.0
"""Shorter stretches between flow starts/stops are transitions, not phases (they are not reported)."""
START_UNCERTAINTY_S = 0.5
"""A flow's start is known to +-0.5 s (iperf3 stamps it in whole seconds: report_read.actual_lifetime), so a
phase's queue statistics stop this long before the next boundary: the next flows' slow start is not its own."""


def cca_seconds(flows: Sequence[FlowInfo], events: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Seconds each CCA ran, summed over the classic flows, following the daemon's switches."""
    out: dict[str, float] = {}
    for f in flows:
        if f.klass != "Classic":
            continue
        t, cca = f.start_s, f.cca
        for e in (e for e in events if e["flow"] == f.name and f.start_s <= e["t_s"] <= f.end_s):
            out[cca] = out.get(cca, 0.0) + e["t_s"] - t
            t, cca = e["t_s"], e["to"]
        out[cca] = out.get(cca, 0.0) + f.end_s - t
    return out


def _ratio(a: float, b: float) -> float:
    return a / b if a == a and b == b and b > 0 else math.nan


def _goodput_phase(a: float, b: float, active: Sequence[FlowInfo], flow_mbps: dict[str, float],
                   rate: float) -> PhaseResult:
    """The goodput side of the phase [a, b) with the *active* flows' mean goodputs."""
    total = sum(v for v in flow_mbps.values() if not math.isnan(v))
    counts = {k: sum(1 for f in active if f.klass == k) for k in CLASSES}
    class_mbps = {k: sum(flow_mbps[f.name] for f in active if f.klass == k and not math.isnan(flow_mbps[f.name]))
                  for k in CLASSES}
    per_flow = {k: class_mbps[k] / counts[k] if counts[k] else math.nan for k in CLASSES}
    groups: dict[str, list[float]] = {}
    by_cca: dict[str, list[float]] = {}
    by_policy: dict[str, list[float]] = {}
    for f in active:
        groups.setdefault(f"{f.klass} {f.rtt_ms:g} ms", []).append(flow_mbps[f.name])
        by_cca.setdefault(f.cca, []).append(flow_mbps[f.name])
        if f.policy is not None:
            by_policy.setdefault(f"{f.klass} {f.policy}", []).append(flow_mbps[f.name])
    return PhaseResult(
        start_s=a, end_s=b, counts=counts, flow_mbps=flow_mbps, fair_mbps=total / len(active),
        class_mbps=class_mbps, per_flow_mbps=per_flow,
        lc_ratio=per_flow["L4S"] / per_flow["Classic"] if counts["L4S"] and counts["Classic"]
        and per_flow["Classic"] > 0 else math.nan,
        jain=jain_index([v for v in flow_mbps.values() if not math.isnan(v)]),
        utilisation=total * HEADER_FACTOR / rate if rate == rate and rate > 0 else math.nan,
        group_per_flow_mbps={g: nanmean(v) for g, v in sorted(groups.items())},
        cca_per_flow_mbps={c: nanmean(v) for c, v in sorted(by_cca.items())},
        policy_per_flow_mbps={g: nanmean(v) for g, v in sorted(by_policy.items())},
        gold_silver=_ratio(nanmean([flow_mbps[f.name] for f in active if f.policy == "gold"]),
                           nanmean([flow_mbps[f.name] for f in active if f.policy == "silver"])),
    )


def intervals_within(t_end: Sequence[float], lo: float, hi: float) -> list[int]:
    """The queue intervals (linkemu's, given by their end times, of equal length) that lie wholly in [lo, hi].

    An interval that straddles a phase boundary holds both phases: a flow that joins 0.2 s before an
    interval ends puts its slow start into it, and that queue peak belongs to the new phase (whose first
    SETTLE_S are left out), not to the steady state of the one before."""
    if not t_end:
        return []
    steps = sorted(b - a for a, b in itertools.pairwise(t_end) if b > a)
    step = steps[len(steps) // 2] if steps else 1.0
    eps = 1e-6
    return [i for i, t in enumerate(t_end) if t - step >= lo - eps and t <= hi + eps]


def _add_queue_stats(ph: PhaseResult, qi_all: Sequence[int], queue: dict[str, dict[str, list[float]]]) -> None:
    """Per class with flows in *ph*: its queue's delay, marks and drops over the intervals *qi_all*."""
    for k in CLASSES:
        if not ph.counts[k]:  # no flow of the class in the phase: a boundary interval's packets are not its delay
            continue
        q = queue[QUEUE_OF[k]]
        qi = [i for i in qi_all if q["bytes"][i] > 0]  # intervals in which the queue sent something
        pk = [q["bytes"][i] for i in qi]  # weights: the mean is over packets ~ bytes
        means = [q["mean"][i] for i in qi]
        wsum = sum(p for p, m in zip(pk, means, strict=True) if p == p and m == m and p > 0)
        wmean = (sum(p * m for p, m in zip(pk, means, strict=True) if p == p and m == m and p > 0) / wsum
                 if wsum else math.nan)
        maxes = [q["max"][i] for i in qi if q["max"][i] == q["max"][i]]
        ph.delay_ms[k] = {"mean": wmean, "p90": nanmean([q["p90"][i] for i in qi]),
                          "max": max(maxes) if maxes else math.nan}
        sent = sum(x for x in pk if x == x)
        marks = sum(q["marks"][i] for i in qi if q["marks"][i] == q["marks"][i])
        drops = sum(q["drops"][i] for i in qi if q["drops"][i] == q["drops"][i])
        pkts = sent / 1500.0
        ph.marks_pct[k] = 100.0 * marks / pkts if pkts else math.nan
        ph.drops_pct[k] = 100.0 * drops / (pkts + drops) if pkts + drops else math.nan


def analyse(run_dir: Path) -> RunResult:
    """One finished run folder: its flows, series and per-phase results."""
    meta = json.loads((run_dir / "summary.json").read_text())["meta"]
    flows = flow_infos(run_dir, meta)
    rate = float(meta.get("uplink_rate_mbit") or math.nan)
    dur = max(float(meta["duration_s"]), *(f.end_s for f in flows))
    t_s, series = iperf_series(run_dir, flows, dur)
    qt, queue = queue_series(run_dir, float(meta.get("t0_epoch") or 0.0))
    bounds = sorted({0.0, dur, *(f.start_s for f in flows), *(min(f.end_s, dur) for f in flows)})
    phases = []
    for a, b in itertools.pairwise(bounds):
        if b - a < MIN_PHASE_S:  # flows of one template step starting a second apart: not a phase
            continue
        active = [f for f in flows if f.start_s <= a + 1e-6 and f.end_s >= b - 1e-6]
        if not active:
            continue
        lo = a + min(SETTLE_S, (b - a) / 2)
        idx = [i for i, t in enumerate(t_s) if lo < t - 0.5 < b]
        flow_mbps = {f.name: nanmean([series.get(f.name, [math.nan] * len(t_s))[i] for i in idx]) for f in active}
        ph = _goodput_phase(a, b, active, flow_mbps, rate)
        if qt:
            _add_queue_stats(ph, intervals_within(qt, lo, b - START_UNCERTAINTY_S), queue)
        phases.append(ph)
    daemon_dir = run_dir / "daemon"
    events = daemon_events(run_dir, float(meta.get("t0_epoch") or 0.0)) if daemon_dir.is_dir() else []
    kind = str(uplink_qdisc(scenario_table(run_dir)).get("kind", "pfifo"))
    return RunResult(meta["scenario"], run_dir, rate, daemon_dir.is_dir(), flows, phases, t_s, series, queue, qt,
                     scripted_switches(run_dir), emulator_uplink(run_dir), events, cca_seconds(flows, events), kind)
