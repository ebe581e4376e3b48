"""The metrics of one run: per flow and phase, fairness per phase, and issue 5's last-half targets.

Per flow and per phase (the stretches between scripted switches: "before" and
"after" for one switch) in the layout of paper 002's Table 5
(:func:`flow_phase_rows`):

* throughput -- mean of the per-interval goodput (payload acked, what iperf3
  reports), Mbit/s;
* RTT        -- mean of the kernel's smoothed RTT at the end of each interval, ms;
* jitter     -- mean of the per-interval jitter (mean |difference| of
  successive per-ACK RTT samples), ms;
* loss       -- retransmitted / sent data segments over the phase, %.

Per phase, over the flows (:func:`fairness_rows`): Jain's index and Thratio
(flow A / flow B, paper 002 Table 2) of the mean goodputs, utilisation (sum of
the flows' throughput including TCP/IP headers over the uplink rate) and
starvation (a flow under 10 % of its fair share for 5 s or more).

Over the last half of the run (issue 5's targets for the switching daemon,
:func:`last_half`): each flow's share of the fair share (its mean goodput
over the mean of all flows' mean goodputs; target >= 0.8 for every flow),
Jain's index (>= 0.95), utilisation (>= 90 %) and the 95th percentile of the
per-interval smoothed RTT of all flows, plus the switches the daemon made,
and whether the run can be scored at all: the flow monitor sampled every
judged flow at least every MONITOR_MAX_GAP_INTERVALS intervals
(:func:`monitor_gap_s`; the matrix report leaves other runs out).
"""

from __future__ import annotations

import csv
import json
import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ccswitch.metrics import jain_index, nanmean, starvation, thratio, throughput_ratios

from .run_folder import Phase, RunData, in_phase, load_run

__all__ = ["METRICS", "MONITOR_MAX_GAP_INTERVALS", "TARGET_JAIN", "TARGET_MIN_SHARE", "TARGET_UTILISATION",
           "cca_changes", "emulator_phase_stats", "fairness_rows", "flow_phase_rows", "last_half", "monitor_check",
           "monitor_gap_s", "percentile", "run_monitor", "trace_capacity_mbit"]

STARVATION_SHARE = 0.1
STARVATION_MIN_S = 5.0
TARGET_MIN_SHARE = 0.8
"""Issue 5: with the daemon every flow gets at least 80 % of its fair share over the last half."""
TARGET_JAIN = 0.95
TARGET_UTILISATION = 0.9
RTT_PERCENTILE = 95.0
MONITOR_MAX_GAP_INTERVALS = 3.0
"""A run is scored only when every judged flow has a sample at least every this many sample intervals
over the last half.  The counters are cumulative, so one late sample still carries the right mean, but
it is weighted as one interval, and a flow that closes during a gap loses its last stretch (a flow
with no sample in the window at all scores 0).  Of 711 runs of the earlier matrices (dev, test,
nine scenarios; one to four runs at once) 697 had no longer gap (609 none over 2 s), 8 had 3.1-4.6 s
and 6 had 7.7-27 s: the monitor starved of CPU (docs/matrix/monitor-under-load.md)."""
METRICS = (  # key, label, unit, column of the per-interval series
    ("throughput", "Throughput", "Mbit/s", "goodput_mbps"),
    ("rtt", "RTT", "ms", "rtt_ms"),
    ("jitter", "Jitter", "ms", "jitter_ms"),
    ("loss", "Loss", "%", "loss_pct"),
)


def flow_phase_rows(run: RunData) -> list[dict[str, Any]]:
    """Table 5 rows: one per phase and flow (+ linkemu's per-client bottleneck figures)."""
    emu = emulator_phase_stats(run, run.phases) or {}
    out = []
    for p in run.phases:
        for f in run.flows:
            s = run.series[f["name"]]
            idx = in_phase(s, p)
            if not idx:
                continue
            sent = sum(s.sent[i] for i in idx)
            cca = Counter(s.cca[i] for i in idx).most_common(1)[0][0]
            out.append({
                "phase": p.label, "flow": f["name"], "client": f["client"], "cca": cca, "intervals": len(idx),
                "throughput_mbps": nanmean(s.goodput_mbps[i] for i in idx),
                "rtt_ms": nanmean(s.rtt_ms[i] for i in idx),
                "jitter_ms": nanmean(s.jitter_ms[i] for i in idx),
                "loss_pct": 100.0 * sum(s.retrans[i] for i in idx) / sent if sent else math.nan,
                "wire_throughput_mbps": nanmean(s.throughput_mbps[i] for i in idx),
                "bottleneck_drop_pct": emu.get((p.label, f["client"] - 1), {}).get("drop_pct", math.nan),
                "queue_delay_ms": emu.get((p.label, f["client"] - 1), {}).get("sojourn_ms", math.nan),
            })
    return out


def _grid(run: RunData) -> tuple[list[float], dict[str, list[float]], dict[str, list[float]]]:
    """Common time grid; per flow goodput and wire throughput (NaN where not running)."""
    dt = run.meta["sample_interval_s"]
    times = sorted({t for s in run.series.values() for t in s.t_s})
    good: dict[str, list[float]] = {}
    wire: dict[str, list[float]] = {}
    for name, s in run.series.items():
        g = dict(zip(s.t_s, s.goodput_mbps, strict=True))
        w = dict(zip(s.t_s, s.throughput_mbps, strict=True))
        good[name] = [g.get(t, math.nan) for t in times]
        wire[name] = [w.get(t, math.nan) for t in times]
    del dt
    return times, good, wire


def emulator_phase_stats(run: RunData, phases: Sequence[Phase]) -> dict[tuple[str, int], dict[str, float]] | None:
    """Uplink statistics of linkemu per (phase label, client; -1 = all clients).

    From ``emulator/intervals.csv``: drops at the bottleneck (all causes) as a
    share of the packets offered, mean queueing delay (sojourn) and rate.
    None when the run had no linkemu statistics.
    """
    path = run.run_dir / "emulator" / "intervals.csv"
    emu = run.summary.get("emulator") or {}
    if not path.is_file() or "run" not in emu:
        return None
    offset = float(emu["run"]["start_unix_s"]) - float(run.meta["t0_epoch"])
    step = float(emu.get("config", {}).get("stats", {}).get("interval_ms", 1000.0)) / 1000.0
    acc: dict[tuple[str, int], list[float]] = {}  # packets_out, drops, sojourn*pkts, rate sum, n
    with path.open() as fh:
        for r in csv.DictReader(fh):
            if r["direction"] != "uplink":
                continue
            mid = float(r["t_s"]) - step / 2 + offset
            client = int(r["client"])
            for p in phases:
                if p.holds(mid):
                    a = acc.setdefault((p.label, client), [0.0, 0.0, 0.0, 0.0, 0.0])
                    pk = float(r["packets_out"])
                    a[0] += pk
                    a[1] += float(r["drops"])
                    a[2] += float(r["sojourn_mean_us"]) * pk
                    a[3] += float(r["rate_mbit"])
                    a[4] += 1
    out = {}
    for key, (pk, drops, soj, rate, n) in acc.items():
        out[key] = {"drop_pct": 100.0 * drops / (pk + drops) if pk + drops else math.nan,
                    "sojourn_ms": soj / pk / 1e3 if pk else math.nan,
                    "rate_mbit": rate / n if n else math.nan}
    return out


def fairness_rows(run: RunData, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per phase (and the whole run): Jain, Thratio, utilisation, starvation."""
    dt = run.meta["sample_interval_s"]
    times, good, wire = _grid(run)
    starving = starvation(times, good, dt, threshold=STARVATION_SHARE, min_duration_s=STARVATION_MIN_S)
    rate = run.meta.get("uplink_rate_mbit")
    whole = Phase(f"whole run (0-{run.meta['duration_s']:g} s)", 0.0, run.meta["duration_s"] + dt)
    phases = run.phases if len(run.phases) > 1 else []
    emu_stats = emulator_phase_stats(run, [*phases, whole])
    out = []
    for p in [*phases, whole]:
        per_flow = {r["flow"]: r["throughput_mbps"] for r in rows if r["phase"] == p.label}
        if p is whole:
            per_flow = {n: nanmean(v for t, v in zip(times, good[n], strict=True) if p.holds(t - dt / 2))
                        for n in good}
            per_flow = {n: v for n, v in per_flow.items() if not math.isnan(v)}
        names = [f["name"] for f in run.flows if f["name"] in per_flow]
        vals = [per_flow[n] for n in names]
        totals = [sum(wire[n][k] for n in wire if not math.isnan(wire[n][k]))
                  for k, t in enumerate(times) if p.holds(t - dt / 2)
                  and any(not math.isnan(wire[n][k]) for n in wire)]
        util = nanmean(totals) / rate if rate and totals else math.nan
        emu = emu_stats.get((p.label, -1)) if emu_stats else None
        if emu is not None and rate:
            util = emu["rate_mbit"] / rate  # measured at the bottleneck itself
        episodes = [e for e in starving if e.start_s < p.end_s and e.end_s > p.start_s]
        out.append({
            "phase": p.label,
            "flows": len(vals),
            "jain": jain_index(vals) if vals else math.nan,
            "thratio": thratio(vals[0], vals[1]) if len(vals) >= 2 else math.nan,
            "thratio_pair": f"{names[0]}/{names[1]}" if len(vals) >= 2 else "",
            "thratio_max_min": (max(vals) / min(vals) if min(vals) > 0 else math.inf) if len(vals) >= 2 else math.nan,
            "share_of_fair": dict(zip(names, throughput_ratios(vals), strict=True)),
            "utilisation": util,
            "utilisation_source": "linkemu" if emu_stats else "samples",
            "aggregate_mbps": sum(vals),
            "starvation": [{"flow": e.flow, "start_s": e.start_s, "end_s": e.end_s} for e in episodes],
        })
    return out


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile *q* (0-100) of the non-NaN *values* (NaN when none)."""
    vals = sorted(v for v in values if not math.isnan(v))
    if not vals:
        return math.nan
    pos = (len(vals) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(vals) - 1)
    return vals[lo] + (vals[hi] - vals[lo]) * (pos - lo)


def cca_changes(run: RunData) -> dict[str, list[tuple[float, str, str]]]:
    """Per flow, the CCA changes seen in the samples: (end of interval, from, to)."""
    out: dict[str, list[tuple[float, str, str]]] = {}
    for name, s in run.series.items():
        out[name] = [(t, a, b) for t, a, b in zip(s.t_s[1:], s.cca, s.cca[1:], strict=False) if a != b]
    return out


def trace_capacity_mbit(run: RunData, start_s: float, end_s: float) -> float | None:
    """Mean uplink capacity (Mbit/s) of a trace-driven run over [start_s, end_s] of the scenario clock.

    From the Mahimahi trace in emulator/config.json (opportunities x bytes per
    opportunity, looped as linkemu loops it), shifted by linkemu's start
    relative to the scenario clock.  None when the uplink has no trace.
    """
    emu = run.summary.get("emulator") or {}
    cfg_path = run.run_dir / "emulator" / "config.json"
    if not cfg_path.is_file() or "run" not in emu:
        return None
    up = json.loads(cfg_path.read_text()).get("uplink", {})
    trace = up.get("trace")
    if not trace or not Path(trace).is_file():
        return None
    ms = [int(x) for x in Path(trace).read_text().split()]
    if not ms:
        return None
    period = max(ms[-1], 1)
    per_opp = float(up.get("trace_bytes_per_opportunity") or 1500)
    offset_s = float(emu["run"]["start_unix_s"]) - float(run.meta["t0_epoch"])  # scenario t = emu t + offset
    a_ms, b_ms = (start_s - offset_s) * 1000.0, (end_s - offset_s) * 1000.0

    def count_until(t_ms: float) -> float:  # opportunities in [0, t_ms) of the looped trace
        loops, rest = divmod(max(t_ms, 0.0), period)
        return loops * len(ms) + sum(1 for m in ms if m < rest)

    n = count_until(b_ms) - count_until(a_ms)
    return n * per_opp * 8 / (end_s - start_s) / 1e6 if end_s > start_s else None


def _bulk(run: RunData) -> list[dict[str, Any]]:
    """The flows the fairness targets judge: all but short web-like ones (scenario kind "web"),
    with their lifetime (older run folders lack it: the whole run)."""
    dur = float(run.meta["duration_s"])
    return [{"start_s": 0.0, "duration_s": dur, **f} for f in run.flows if f.get("kind", "bulk") != "web"]


def monitor_gap_s(run: RunData, flows: Sequence[dict[str, Any]], window: Phase) -> float:
    """The longest stretch of *window* in which some flow of *flows* was alive but unsampled, s.

    Per flow, over the part of the window it was alive: the longest sample
    interval there (a late sample spans the ticks it missed), the time before
    its first sample's interval began and the time after its last sample.
    """
    dt, dur = run.meta["sample_interval_s"], run.meta["duration_s"]
    worst = 0.0
    for f in flows:
        start = max(window.start_s, float(f["start_s"]))
        end = min(float(dur), float(f["start_s"]) + float(f["duration_s"]))
        if end <= start:
            continue
        s = run.series.get(f["name"])
        rows = [k for k, t in enumerate(s.t_s) if window.holds(t - dt / 2)] if s else []
        if not rows:
            worst = max(worst, end - start)
            continue
        first, last = rows[0], rows[-1]
        worst = max(worst, *(s.interval_s[k] for k in rows),
                    s.t_s[first] - s.interval_s[first] - start, end - s.t_s[last])
    return worst


def _alive(f: dict[str, Any], t_end: float, dt: float) -> bool:
    """The flow ran for the whole grid interval [t_end - dt, t_end]."""
    return float(f["start_s"]) <= t_end - dt + 1e-6 and t_end <= float(f["start_s"]) + float(f["duration_s"]) + 1e-6


def _shares_by_interval(run: RunData, flows: Sequence[dict[str, Any]], half: Phase) -> dict[str, float]:
    """Share of fair share when flows come and go: per interval, goodput over the mean of the
    flows alive in that interval; a flow's share is its mean over the intervals it was alive."""
    dt = run.meta["sample_interval_s"]
    times, good, _ = _grid(run)
    acc: dict[str, list[float]] = {f["name"]: [] for f in flows}
    for k, t in enumerate(times):
        if not half.holds(t - dt / 2):
            continue
        alive = [f["name"] for f in flows if _alive(f, t, dt)]
        vals = {n: (0.0 if math.isnan(good[n][k]) else good[n][k]) for n in alive if n in good}
        fair = sum(vals.values()) / len(vals) if vals else 0.0
        if fair <= 0:
            continue
        for n, v in vals.items():
            acc[n].append(v / fair)
    return {n: sum(v) / len(v) for n, v in acc.items() if v}


def last_half(run: RunData) -> dict[str, Any]:
    """Issue 5's target metrics over the last half of the run [duration/2, duration].

    share_of_fair[flow] = mean goodput / mean over the flows of their mean
    goodput (1 = exactly its fair share of what the flows got together).  When
    some bulk flow does not run through the whole window (a late joiner or an
    early stopper), the share is computed per interval over the flows alive in
    it and averaged over the intervals the flow was alive.  Web-like flows
    (kind "web") load the path but are not judged.  utilisation = linkemu's
    uplink delivery rate over the uplink's capacity (the constant rate, or the
    trace's capacity over the same window) when the run has linkemu
    statistics, else the flows' wire throughput over it; rtt_p95_ms = 95th
    percentile of the per-interval smoothed RTT of the bulk flows; monitor =
    :func:`monitor_check` (a run with ``scored`` False is a harness fault, not a result).
    """
    dt, dur = run.meta["sample_interval_s"], run.meta["duration_s"]
    half, bulk = _last_half_window(run)
    times, _, wire = _grid(run)
    per_flow = {}
    rtts: list[float] = []
    for f in bulk:
        s = run.series[f["name"]]
        idx = in_phase(s, half)
        per_flow[f["name"]] = nanmean(s.goodput_mbps[i] for i in idx)
        rtts += [s.rtt_ms[i] for i in idx]
    whole = all(float(f["start_s"]) <= half.start_s and float(f["start_s"]) + float(f["duration_s"]) >= dur - 1e-6
                for f in bulk)
    if whole:
        names = [n for n, v in per_flow.items() if not math.isnan(v)]
        vals = [per_flow[n] for n in names]
        shares = dict(zip(names, throughput_ratios(vals), strict=True)) if vals else {}
        share_method = "means"
    else:
        shares = _shares_by_interval(run, bulk, half)
        vals = list(shares.values())
        share_method = "per-interval (flows come and go)"
    missing = [n for n in per_flow if n not in shares]
    for n in missing:  # a flow with no sample in the last half got nothing
        shares[n] = 0.0
    rate = run.meta.get("uplink_rate_mbit")
    capacity_src = "rate"
    if not rate:
        rate = trace_capacity_mbit(run, half.start_s, dur)
        capacity_src = "trace"
    emu = emulator_phase_stats(run, [half])
    if emu and (half.label, -1) in emu and rate:
        util, util_src = emu[(half.label, -1)]["rate_mbit"] / rate, "linkemu"
    else:
        totals = [sum(wire[n][k] for n in wire if not math.isnan(wire[n][k]))
                  for k, t in enumerate(times) if half.holds(t - dt / 2)]
        util = nanmean(totals) / rate if rate and totals else math.nan
        util_src = "samples"
    min_flow = min(shares, key=lambda n: shares[n]) if shares else ""
    jain = jain_index([*vals, *[0.0] * len(missing)]) if vals else math.nan
    out = {
        "window": half.label, "start_s": half.start_s, "end_s": dur,
        "throughput_mbps": per_flow, "share_of_fair": shares, "share_method": share_method,
        "min_share": shares[min_flow] if shares else math.nan, "min_share_flow": min_flow,
        "jain": jain, "utilisation": util, "utilisation_source": util_src,
        "capacity_mbit": rate if rate else math.nan, "capacity_source": capacity_src,
        "rtt_p95_ms": percentile(rtts, RTT_PERCENTILE),
        "cca_changes": {n: [{"t_s": t, "from": a, "to": b} for t, a, b in ch] for n, ch in cca_changes(run).items()},
    }
    out["targets"] = {
        "min_share": bool(out["min_share"] >= TARGET_MIN_SHARE),
        "jain": bool(jain >= TARGET_JAIN),
        "utilisation": bool(util >= TARGET_UTILISATION),
    }
    out["targets_met"] = all(out["targets"].values())
    out["monitor"] = monitor_check(run)
    return out


def _last_half_window(run: RunData) -> tuple[Phase, list[dict[str, Any]]]:
    """The last half of the run and the bulk flows it judges: those alive for at least one whole
    sample interval of it (a flow that ends half an interval into the window has no sample there
    to judge, and would otherwise count as starved)."""
    dt, dur = run.meta["sample_interval_s"], run.meta["duration_s"]
    half = Phase(f"last half ({dur / 2:g}-{dur:g} s)", dur / 2, dur + dt)
    ends = [k * dt for k in range(math.ceil(half.start_s / dt - 1e-9) + 1, math.floor(dur / dt + 1e-9) + 1)]
    return half, [f for f in _bulk(run) if any(_alive(f, t, dt) for t in ends)]


def monitor_check(run: RunData) -> dict[str, Any]:
    """Whether the run can be scored: every judged flow sampled at least every
    MONITOR_MAX_GAP_INTERVALS intervals over the last half (``scored``), and the longest gap."""
    half, bulk = _last_half_window(run)
    gap, limit = monitor_gap_s(run, bulk, half), MONITOR_MAX_GAP_INTERVALS * run.meta["sample_interval_s"]
    return {"max_gap_s": round(gap, 3), "limit_s": limit, "scored": bool(gap <= limit + 1e-6)}


def run_monitor(run_dir: Path, last_half_metrics: dict[str, Any]) -> dict[str, Any]:
    """The run's monitor_check: as reported, or computed now for a run reported before the check
    existed (scored when its samples cannot be read: no evidence of a fault)."""
    if "monitor" in last_half_metrics:
        return last_half_metrics["monitor"]
    try:
        return monitor_check(load_run(run_dir))
    except (OSError, KeyError, ValueError):
        return {"max_gap_s": math.nan, "limit_s": math.nan, "scored": True}
