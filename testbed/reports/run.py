"""Tables and plots of a run folder (see runner.py for its layout).

Per flow and per phase (the stretches between scripted switches: "before" and
"after" for one switch) in the layout of paper 002's Table 5:

* throughput -- mean of the per-interval goodput (payload acked, what iperf3
  reports), Mbit/s;
* RTT        -- mean of the kernel's smoothed RTT at the end of each interval, ms;
* jitter     -- mean of the per-interval jitter (mean |difference| of
  successive per-ACK RTT samples), ms;
* loss       -- retransmitted / sent data segments over the phase, %.

Per phase, over the flows: Jain's index and Thratio (flow A / flow B, paper
002 Table 2) of the mean goodputs, utilisation (sum of the flows' throughput
including TCP/IP headers over the uplink rate) and starvation (a flow under
10 % of its fair share for 5 s or more).

Over the last half of the run (issue 5's targets for the switching daemon,
:func:`last_half`): each flow's share of the fair share (its mean goodput
over the mean of all flows' mean goodputs; target >= 0.8 for every flow),
Jain's index (>= 0.95), utilisation (>= 90 %) and the 95th percentile of the
per-interval smoothed RTT of all flows, plus the switches the daemon made.

Outputs: ``table.md`` (the tables), ``table.csv`` (per flow and phase),
``fairness.csv`` (per phase), ``plots/{throughput,rtt,jitter,loss}.png`` (over
time with switch markers, and before/after box plots, like paper 002 figures
5-16); the metrics also go into ``summary.json`` under ``"metrics"``.
"""

from __future__ import annotations

import csv
import itertools
import json
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ccswitch.metrics import jain_index, nanmean, starvation, thratio, throughput_ratios

__all__ = ["METRICS", "Phase", "RunData", "load_run", "merge_runs", "report_dir", "report_run"]

STARVATION_SHARE = 0.1
STARVATION_MIN_S = 5.0
TARGET_MIN_SHARE = 0.8
"""Issue 5: with the daemon every flow gets at least 80 % of its fair share over the last half."""
TARGET_JAIN = 0.95
TARGET_UTILISATION = 0.9
RTT_PERCENTILE = 95.0
METRICS = (  # key, label, unit, column of the per-interval series
    ("throughput", "Throughput", "Mbit/s", "goodput_mbps"),
    ("rtt", "RTT", "ms", "rtt_ms"),
    ("jitter", "Jitter", "ms", "jitter_ms"),
    ("loss", "Loss", "%", "loss_pct"),
)


@dataclass(frozen=True)
class Phase:
    label: str
    start_s: float
    end_s: float

    def holds(self, t_mid: float) -> bool:
        return self.start_s <= t_mid < self.end_s


@dataclass
class Series:
    """One flow's per-interval values on the run's time grid (NaN: no sample)."""

    name: str
    t_s: list[float] = field(default_factory=list)  # end of interval, s since t0
    interval_s: list[float] = field(default_factory=list)
    cca: list[str] = field(default_factory=list)
    goodput_mbps: list[float] = field(default_factory=list)
    throughput_mbps: list[float] = field(default_factory=list)
    rtt_ms: list[float] = field(default_factory=list)
    jitter_ms: list[float] = field(default_factory=list)
    loss_pct: list[float] = field(default_factory=list)
    retrans: list[int] = field(default_factory=list)
    sent: list[int] = field(default_factory=list)


@dataclass
class RunData:
    run_dir: Path
    summary: dict[str, Any]
    flows: list[dict[str, Any]]
    """Scenario order: name, client, cca, start_s, duration_s (from summary meta)."""
    series: dict[str, Series]
    phases: list[Phase]

    @property
    def meta(self) -> dict[str, Any]:
        return self.summary["meta"]


def _phases(bounds: Sequence[float]) -> list[Phase]:
    pairs = list(itertools.pairwise(bounds))
    if len(pairs) == 1:
        names = ["whole run"]
    elif len(pairs) == 2:
        names = ["before", "after"]
    else:
        names = [f"phase {i}" for i in range(1, len(pairs) + 1)]
    return [Phase(f"{n} ({a:g}-{b:g} s)", a, b) for n, (a, b) in zip(names, pairs, strict=True)]


def load_run(run_dir: Path) -> RunData:
    """Read summary.json, samples.parquet and flows.parquet of a run folder."""
    summary = json.loads((run_dir / "summary.json").read_text())
    meta = summary["meta"]
    t0, dt, dur = meta["t0_epoch"], meta["sample_interval_s"], meta["duration_s"]
    ids = {r["flow_id"]: r["flow"] for r in pq.read_table(run_dir / "flows.parquet").to_pylist()}
    rows = pq.read_table(run_dir / "samples.parquet").to_pylist()
    by_flow: dict[str, dict[int, list[dict[str, Any]]]] = {f["name"]: {} for f in meta["flows"]}
    for r in rows:
        name = ids.get(r["flow_id"])
        if name is None:
            continue
        k = grid_bin(r["ts_s"], r["interval_s"], t0, dt)
        if k < 1 or (k - 1) * dt >= dur:
            continue
        by_flow[name].setdefault(k, []).append(r)
    series = {}
    for name, bins in by_flow.items():
        s = Series(name)
        for k in sorted(bins):
            r = _merge(bins[k])
            if r["interval_s"] < dt / 4:
                continue  # a sliver (e.g. the last sample after the flow ended)
            s.t_s.append(round(k * dt, 6))
            s.interval_s.append(r["interval_s"])
            s.cca.append(r["cca"])
            s.goodput_mbps.append(r["goodput_bps"] / 1e6)
            s.throughput_mbps.append(r["throughput_bps"] / 1e6)
            s.rtt_ms.append(r["rtt_us"] / 1e3 if r["rtt_us"] > 0 else math.nan)
            s.jitter_ms.append(r["jitter_us"] / 1e3)
            s.loss_pct.append(r["loss_rate"] * 100.0)
            s.retrans.append(r["retrans_segs"])
            s.sent.append(r["sent_segs"])
        series[name] = s
    return RunData(run_dir, summary, meta["flows"], series, _phases(meta["phase_bounds_s"]))


def grid_bin(ts_s: float, interval_s: float, t0_epoch: float, dt: float) -> int:
    """Grid interval k (covering [(k-1) dt, k dt] after t0) that holds a row's midpoint."""
    return math.floor((ts_s - t0_epoch - interval_s / 2) / dt) + 1


def rebin_samples(table: pa.Table, t0_epoch: float, dt: float) -> pa.Table:
    """FlowSample rows of any tick (the daemon's 200 ms) -> one row per flow and grid interval.

    The same rule the report applies when it reads a run (:func:`load_run`):
    a row belongs to the grid interval holding its midpoint, and the rows of
    one interval are merged by :func:`_merge` (rates weighted by time, counts
    summed, state at the end).  So a run sampled by the daemon's ticks and a
    run sampled by the in-process monitor at the scenario's interval give
    per-interval metrics computed the same way.
    """
    if table.num_rows == 0:
        return table
    bins: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for r in table.to_pylist():
        bins.setdefault((r["flow_id"], grid_bin(r["ts_s"], r["interval_s"], t0_epoch, dt)), []).append(r)
    rows = [_merge(bins[key]) for key in sorted(bins, key=lambda k: (k[1], k[0]))]
    return pa.Table.from_pylist(rows, schema=table.schema)


def _merge(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Several samples in one grid interval (an extra look after a flow start) -> one."""
    if len(rows) == 1:
        return rows[0]
    rows = sorted(rows, key=lambda r: r["ts_s"])
    total = sum(r["interval_s"] for r in rows)
    out = dict(rows[-1])  # state at the end: cca, rtt, cwnd ...
    out["interval_s"] = total
    for key in ("goodput_bps", "throughput_bps"):
        out[key] = sum(r[key] * r["interval_s"] for r in rows) / total if total else 0.0
    for key in ("retrans_segs", "sent_segs"):
        out[key] = sum(r[key] for r in rows)
    jit = [(r["jitter_us"], r["rtt_samples"]) for r in rows if not math.isnan(r["jitter_us"]) and r["rtt_samples"]]
    n = sum(w for _, w in jit)
    out["jitter_us"] = sum(j * w for j, w in jit) / n if n else math.nan
    sent = out["sent_segs"]
    out["loss_rate"] = out["retrans_segs"] / sent if sent else 0.0
    return out


# ---------------------------------------------------------------- metrics ---


def _in_phase(s: Series, p: Phase) -> list[int]:
    return [i for i, (t, dt) in enumerate(zip(s.t_s, s.interval_s, strict=True)) if p.holds(t - dt / 2)]


def flow_phase_rows(run: RunData) -> list[dict[str, Any]]:
    """Table 5 rows: one per phase and flow (+ linkemu's per-client bottleneck figures)."""
    emu = emulator_phase_stats(run, run.phases) or {}
    out = []
    for p in run.phases:
        for f in run.flows:
            s = run.series[f["name"]]
            idx = _in_phase(s, p)
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
    percentile of the per-interval smoothed RTT of the bulk flows.
    """
    dt, dur = run.meta["sample_interval_s"], run.meta["duration_s"]
    half = Phase(f"last half ({dur / 2:g}-{dur:g} s)", dur / 2, dur + dt)
    times, _, wire = _grid(run)
    bulk = [f for f in _bulk(run) if float(f["start_s"]) + float(f["duration_s"]) > half.start_s]
    per_flow = {}
    rtts: list[float] = []
    for f in bulk:
        s = run.series[f["name"]]
        idx = _in_phase(s, half)
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
    return out


# ----------------------------------------------------------------- tables ---


def _f(v: Any, nd: int = 2) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, float) and math.isinf(v):
        return "inf"
    return f"{v:.{nd}f}" if isinstance(v, float) else str(v)


def _starv_text(eps: Sequence[dict[str, Any]]) -> str:
    return ", ".join(f"{e['flow']} {e['start_s']:g}-{e['end_s']:g} s" for e in eps) or "none"


def _yes(ok: bool) -> str:
    return "yes" if ok else "**no**"


def targets_markdown(run: RunData, lh: dict[str, Any]) -> list[str]:
    """The result table of issue 5: last-half metrics against the targets."""
    d = run.meta.get("daemon")
    who = (f"ccswitchd ({d['policy']}) on client(s) {', '.join(str(c) for c in d['clients'])}" if d
           else "no daemon (static CCAs and scripted switches)")
    lines = [f"## Result over the {lh['window']}: {who}", "",
             "| Flow | CCA (start -> end) | Throughput (Mbit/s) | Share of fair share | Switches |",
             "|---|---|---:|---:|---:|"]
    for f in run.flows:
        s = run.series[f["name"]]
        ccas = f"{s.cca[0]} -> {s.cca[-1]}" if s.cca else f["cca"]
        lines.append(f"| {f['name']} | {ccas} | {_f(lh['throughput_mbps'].get(f['name']))} | "
                     f"{_f(lh['share_of_fair'].get(f['name']))} | {len(lh['cca_changes'].get(f['name'], []))} |")
    t = lh["targets"]
    util = "-" if math.isnan(lh["utilisation"]) else f"{lh['utilisation'] * 100:.1f} %"
    lines += ["", "| Metric | Value | Target | Met |", "|---|---:|---:|---|",
              f"| minimum share of fair share | {_f(lh['min_share'])} ({lh['min_share_flow']}) | >= "
              f"{TARGET_MIN_SHARE:g} | {_yes(t['min_share'])} |",
              f"| Jain's index | {_f(lh['jain'], 3)} | >= {TARGET_JAIN:g} | {_yes(t['jain'])} |",
              f"| utilisation ({lh['utilisation_source']}) | {util} | >= {TARGET_UTILISATION * 100:g} % | "
              f"{_yes(t['utilisation'])} |",
              f"| p95 RTT | {_f(lh['rtt_p95_ms'])} ms | - | - |", ""]
    return lines


def table_markdown(run: RunData, rows: Sequence[dict[str, Any]], fair: Sequence[dict[str, Any]],
                   lh: dict[str, Any] | None = None) -> str:
    m = run.meta
    lines = [f"# {m['scenario']} / {m['run']}", ""]
    if m.get("description"):
        lines += [m["description"], ""]
    link = f"emulator {m['emulator']}" if m.get("emulator") else "external network"
    lines += [f"{len(run.flows)} flows, {m['duration_s']:g} s, sample interval {m['sample_interval_s']:g} s, "
              f"{link}, uplink {_f(m.get('uplink_rate_mbit'), 0)} Mbit/s, seed {m['seed']}.", ""]
    if lh is not None:
        lines += targets_markdown(run, lh)
    lines += ["## Per client and phase (layout of paper 002, Table 5)", "",
              "| Phase | Client (CCA) | Throughput (Mbit/s) | RTT (ms) | Jitter (ms) | Loss (%) |",
              "|---|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['phase']} | {r['cca'].upper()} ({r['flow']}) | {_f(r['throughput_mbps'])} | "
                     f"{_f(r['rtt_ms'])} | {_f(r['jitter_ms'])} | {_f(r['loss_pct'])} |")
    if any(not math.isnan(r["bottleneck_drop_pct"]) for r in rows):
        lines += ["", "At the emulated bottleneck (linkemu, uplink, per client): packets dropped there (queue "
                  "overflow, WiFi retries, random loss) and their mean queueing delay.", "",
                  "| Phase | Client (CCA) | Drops at the bottleneck (%) | Queueing delay (ms) |", "|---|---|---:|---:|"]
        for r in rows:
            lines.append(f"| {r['phase']} | {r['cca'].upper()} ({r['flow']}) | {_f(r['bottleneck_drop_pct'])} | "
                         f"{_f(r['queue_delay_ms'])} |")
    lines += ["", "## Fairness per phase", "",
              "| Phase | Jain's index | Thratio | max/min | Utilisation | Starvation (< 10 % of fair share >= 5 s) |",
              "|---|---:|---:|---:|---:|---|"]
    for r in fair:
        th = f"{_f(r['thratio'])} ({r['thratio_pair']})" if r["thratio_pair"] else "-"
        util = "-" if math.isnan(r["utilisation"]) else f"{r['utilisation'] * 100:.1f} %"
        lines.append(f"| {r['phase']} | {_f(r['jain'], 3)} | {th} | {_f(r['thratio_max_min'])} | {util} | "
                     f"{_starv_text(r['starvation'])} |")
    sw = run.summary.get("switches") or []
    if sw:
        lines += ["", "## Scripted switches", ""]
        for e in sw:
            state = "ok" if e.get("ok") else f"FAILED: {e.get('error')}"
            lines.append(f"- {e['at_s']:g} s (done at {e.get('t_done_s', math.nan):.3f} s): {e['flow']} "
                         f"{e.get('cca_before', '?')} -> {e['cca']} ({e['inherit']}): {state}")
    ip = run.summary.get("iperf3") or {}
    if ip:
        lines += ["", "## iperf3 totals", "", "| Flow | Sender (Mbit/s) | Receiver (Mbit/s) | Retransmits |",
                  "|---|---:|---:|---:|"]
        for name, r in ip.items():
            lines.append(f"| {name} | {_f(r['sender_mbps'])} | {_f(r['receiver_mbps'])} | {r['retransmits']} |")
    io = ((run.summary.get("emulator") or {}).get("io") or {}).get("tx_lateness_us")
    if io:
        lines += ["", f"Emulator timing (how late linkemu sent packets; CPU contention shows here): "
                      f"p50 {io['p50'] / 1e3:.2f} ms, p99 {io['p99'] / 1e3:.2f} ms, max {io['max'] / 1e3:.1f} ms."]
    lines += ["", "Plots: " + ", ".join(f"[{k}](plots/{k}.png)" for k, *_ in METRICS), ""]
    return "\n".join(lines)


def _write_csv(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    if not rows:
        path.write_text("")
        return
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        for r in rows:
            w.writerow({k: json.dumps(v) if isinstance(v, dict | list) else v for k, v in r.items()})


# ------------------------------------------------------------------ plots ---


def plot_run(run: RunData, out_dir: Path) -> list[Path]:
    """plots/<metric>.png: (a) over time with switch markers, (b) box plots per phase."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    switches = run.summary.get("switches") or run.meta.get("switches") or []
    changes = _daemon_changes(run, switches)
    paths = []
    for key, label, unit, col in METRICS:
        fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 4.2), gridspec_kw={"width_ratios": [2.2, 1]})
        for i, f in enumerate(run.flows):
            s = run.series[f["name"]]
            ax.plot(s.t_s, getattr(s, col), color=colors[i % len(colors)], lw=1.3,
                    label=f"{f['name']} ({_cca_path(run, f, changes)}; {_lifetime(f, run)})")
        for sw in switches:
            ax.axvline(sw["at_s"], color="0.35", ls="--", lw=1)
            ax.annotate(f"{sw['flow']} -> {sw['cca']}", (sw["at_s"], 1.0), xycoords=("data", "axes fraction"),
                        xytext=(3, -12), textcoords="offset points", fontsize=8, color="0.25")
        _mark_daemon_switches(ax, run, changes, colors)
        ax.set_xlabel("time (s)")
        ax.set_ylabel(f"{label} ({unit})")
        ax.set_xlim(0, run.meta["duration_s"])
        ax.set_title(f"(a) {label} over time")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="best")
        data, labels, cols = [], [], []
        for i, f in enumerate(run.flows):
            s = run.series[f["name"]]
            for p in run.phases:
                vals = [getattr(s, col)[j] for j in _in_phase(s, p)]
                vals = [v for v in vals if not math.isnan(v)]
                if vals:
                    data.append(vals)
                    labels.append(f"{f['name']}\n{p.label.split(' (')[0]}")
                    cols.append(colors[i % len(colors)])
        if data:
            bp = bx.boxplot(data, patch_artist=True, widths=0.6)
            for patch, c in zip(bp["boxes"], cols, strict=True):
                patch.set_facecolor(c)
                patch.set_alpha(0.45)
            bx.set_xticks(range(1, len(labels) + 1), labels, fontsize=8)
        bx.set_ylabel(f"{label} ({unit})")
        bx.set_title("(b) per phase")
        bx.grid(alpha=0.3, axis="y")
        fig.suptitle(f"{run.meta['scenario']}: {label}", fontsize=11)
        fig.tight_layout()
        path = out_dir / f"{key}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def _daemon_changes(run: RunData, scripted: Sequence[dict[str, Any]]) -> dict[str, list[tuple[float, str, str]]]:
    """CCA changes seen in the samples that no scripted switch explains: the daemons' own."""
    out = {}
    for name, ch in cca_changes(run).items():
        mine = [sw for sw in scripted if sw["flow"] == name]
        out[name] = [c for c in ch if not any(abs(c[0] - sw["at_s"]) <= 2.0 and c[2] == sw["cca"] for sw in mine)]
    return out


def _mark_daemon_switches(ax: Any, run: RunData, changes: dict[str, list[tuple[float, str, str]]],
                          colors: Sequence[str]) -> None:
    """A dotted line in the flow's colour at each switch a daemon made, labelled with the new CCA.

    The time is the end of the sample interval that first shows the new CCA
    (within one interval of the switch).  Labels of different flows are
    staggered down the top of the axes so they do not print over each other.
    """
    for i, f in enumerate(run.flows):
        c = colors[i % len(colors)]
        for t, _, to in changes.get(f["name"], []):
            ax.axvline(t, color=c, ls=":", lw=1.1, alpha=0.9)
            ax.annotate(to, (t, 1.0), xycoords=("data", "axes fraction"), xytext=(2, -10 - 9 * (i % 4)),
                        textcoords="offset points", fontsize=7, color=c)


def _lifetime(f: dict[str, Any], run: RunData) -> str:
    start = float(f.get("start_s", 0.0))
    end = start + float(f.get("duration_s", run.meta["duration_s"] - start))
    return f"{start:g}-{min(end, run.meta['duration_s']):g} s"


def _cca_path(run: RunData, f: dict[str, Any], changes: dict[str, list[tuple[float, str, str]]] | None = None) -> str:
    """The flow's CCAs in order: its start, scripted switches and the daemons' switches (in time order)."""
    steps = [(sw["at_s"], sw["cca"]) for sw in run.meta.get("switches", []) if sw["flow"] == f["name"]]
    steps += [(t, to) for t, _, to in (changes or {}).get(f["name"], [])]
    ccas = [f["cca"]] + [c for _, c in sorted(steps)]
    if len(ccas) > 5:  # a long path does not fit a legend: first, count, last
        return f"{ccas[0]}->... {len(ccas) - 2} more ...->{ccas[-1]}"
    return "->".join(ccas)


# ---------------------------------------------------------------- entries ---


def report_run(run_dir: Path, *, plots: bool = True) -> dict[str, Any]:
    """Compute the metrics of one run folder and write its tables (and plots)."""
    run = load_run(run_dir)
    rows = flow_phase_rows(run)
    fair = fairness_rows(run, rows)
    lh = last_half(run)
    (run_dir / "table.md").write_text(table_markdown(run, rows, fair, lh))
    _write_csv(run_dir / "table.csv", rows)
    _write_csv(run_dir / "fairness.csv", fair)
    if plots:
        plot_run(run, run_dir / "plots")
    metrics = {"per_flow_phase": rows, "fairness": fair, "last_half": lh}
    summary = dict(run.summary)
    summary["metrics"] = metrics
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=_json_default) + "\n")
    return metrics


def _json_default(v: Any) -> Any:
    return str(v)


def run_dirs(path: Path) -> list[Path]:
    """*path* itself if it is a run folder, else its run folders (sorted)."""
    if (path / "summary.json").is_file() and (path / "samples.parquet").is_file():
        return [path]
    return sorted(p for p in path.iterdir() if p.is_dir() and (p / "summary.json").is_file()
                  and (p / "samples.parquet").is_file())


def report_dir(path: Path, *, plots: bool = True) -> list[Path]:
    """Report every run under *path*; with several, also an aggregate ``path/table.md``."""
    runs = run_dirs(path)
    if not runs:
        raise FileNotFoundError(f"{path}: no run folder (summary.json + samples.parquet) here or below")
    all_rows = []
    for r in runs:
        report_run(r, plots=plots)
        all_rows.append((r.name, json.loads((r / "summary.json").read_text())["metrics"]))
    if len(runs) > 1:
        (path / "table.md").write_text(_aggregate_markdown(path, all_rows))
    return runs


def merge_runs(out: Path, parts: Sequence[Path]) -> Path:
    """One run folder from the folders of several hosts running parts of a scenario.

    External mode on real hardware runs each client's flows on its own host
    (``--client N``), all starting at the same ``--start-at``; this joins
    their samples, flows, iperf3 outputs and switches so that ``out`` reports
    like a single run.  Samples keep their wall-clock timestamps, so the hosts'
    clocks must agree (NTP) to well under the sample interval.
    """
    import shutil

    if len(parts) < 2:
        raise ValueError("give at least two run folders to merge")
    summaries = [json.loads((p / "summary.json").read_text()) for p in parts]
    names = {s["meta"]["scenario"] for s in summaries}
    if len(names) != 1:
        raise ValueError(f"the run folders are from different scenarios: {', '.join(sorted(names))}")
    out.mkdir(parents=True, exist_ok=True)
    (out / "iperf").mkdir(exist_ok=True)
    meta = dict(summaries[0]["meta"])
    meta["t0_epoch"] = min(s["meta"]["t0_epoch"] for s in summaries)
    meta["flows"] = sorted((f for s in summaries for f in s["meta"]["flows"]), key=lambda f: f["port"])
    meta["switches"] = sorted((w for s in summaries for w in s["meta"]["switches"]), key=lambda w: w["at_s"])
    meta["merged_from"] = [str(p) for p in parts]
    meta["t0_spread_s"] = max(s["meta"]["t0_epoch"] for s in summaries) - meta["t0_epoch"]
    summary = {"meta": meta,
               "iperf3": {k: v for s in summaries for k, v in (s.get("iperf3") or {}).items()},
               "switches": sorted((w for s in summaries for w in s.get("switches") or []), key=lambda w: w["at_s"]),
               "emulator": None}
    for name in ("samples.parquet", "flows.parquet"):
        pq.write_table(pa.concat_tables([pq.read_table(p / name) for p in parts]), out / name)
    for p in parts:
        for f in (p / "iperf").glob("*.json"):
            shutil.copy2(f, out / "iperf" / f.name)
    shutil.copy2(parts[0] / "scenario.toml", out / "scenario.toml")
    (out / "switches.json").write_text(json.dumps(summary["switches"], indent=2) + "\n")
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=_json_default) + "\n")
    return out


def _mean_sd(vals: Sequence[float]) -> str:
    vals = [v for v in vals if v is not None and not math.isnan(v)]
    if not vals:
        return "-"
    mu = sum(vals) / len(vals)
    sd = math.sqrt(sum((v - mu) ** 2 for v in vals) / (len(vals) - 1)) if len(vals) > 1 else 0.0
    return f"{mu:.2f} ± {sd:.2f}"


def _aggregate_markdown(path: Path, runs: Sequence[tuple[str, dict[str, Any]]]) -> str:
    keys: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for _, m in runs:
        for r in m["per_flow_phase"]:
            keys.setdefault((r["phase"], r["flow"]), []).append(r)
    lines = [f"# {path.name}: {len(runs)} runs (mean ± sd)", "",
             "| Phase | Client (CCA) | Throughput (Mbit/s) | RTT (ms) | Jitter (ms) | Loss (%) |",
             "|---|---|---:|---:|---:|---:|"]
    for (phase, flow), rs in keys.items():
        cca = Counter(r["cca"] for r in rs).most_common(1)[0][0]
        lines.append(f"| {phase} | {cca.upper()} ({flow}) | "
                     + " | ".join(_mean_sd([r[k] for r in rs]) for k in
                                  ("throughput_mbps", "rtt_ms", "jitter_ms", "loss_pct")) + " |")
    fair: dict[str, list[dict[str, Any]]] = {}
    for _, m in runs:
        for r in m["fairness"]:
            fair.setdefault(r["phase"], []).append(r)
    lines += ["", "| Phase | Jain's index | Thratio | Utilisation (%) | Runs with starvation |",
              "|---|---:|---:|---:|---:|"]
    for phase, rs in fair.items():
        lines.append(f"| {phase} | {_mean_sd([r['jain'] for r in rs])} | {_mean_sd([r['thratio'] for r in rs])} | "
                     f"{_mean_sd([r['utilisation'] * 100 for r in rs])} | "
                     f"{sum(1 for r in rs if r['starvation'])}/{len(rs)} |")
    lines += ["", "Runs: " + ", ".join(f"[{n}]({n}/table.md)" for n, _ in runs), ""]
    return "\n".join(lines)
