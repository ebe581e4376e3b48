"""A run folder read back (see runs/runner.py for its layout): per-flow series on the run's time grid.

:func:`load_run` reads ``summary.json``, ``samples.parquet`` and ``flows.parquet``
into one :class:`Series` per flow, a row in the grid interval holding its
midpoint (:func:`grid_bin`; several rows of one interval merged by time);
:func:`rebin_samples` applies the same rule to a samples table before it is
written.  Also here: the phases between scripted switches, finding the run
folders under a path (:func:`run_dirs`) and joining the folders of several
hosts that ran parts of one scenario (:func:`merge_runs`).
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["Phase", "RunData", "Series", "grid_bin", "in_phase", "json_default", "load_run", "merge_runs",
           "rebin_samples", "run_dirs"]


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


def in_phase(s: Series, p: Phase) -> list[int]:
    """Indices of *s*'s intervals whose midpoint lies in phase *p*."""
    return [i for i, (t, dt) in enumerate(zip(s.t_s, s.interval_s, strict=True)) if p.holds(t - dt / 2)]


def run_dirs(path: Path) -> list[Path]:
    """*path* itself if it is a run folder, else its run folders (sorted)."""
    if (path / "summary.json").is_file() and (path / "samples.parquet").is_file():
        return [path]
    return sorted(p for p in path.iterdir() if p.is_dir() and (p / "summary.json").is_file()
                  and (p / "samples.parquet").is_file())


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
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=json_default) + "\n")
    return out


def json_default(v: Any) -> Any:
    """What json cannot encode (a Path in the summary) as its str."""
    return str(v)
