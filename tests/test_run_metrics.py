"""Run metrics and report helpers (ccswitch.metrics, testbed/reports): rebinning daemon ticks,
the last-half targets, starvation episodes; synthetic inputs, no kernel needed."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ccswitch.metrics import starvation, thratio, utilisation


def test_rebin_daemon_ticks_onto_the_grid() -> None:
    """200 ms FlowSample rows -> one row per 1 s interval: rates time-weighted, counts summed, last state."""
    from ccswitch.schema import FLOW_SAMPLE_SCHEMA
    from ccswitch.testbed.reports.run_folder import rebin_samples

    t0 = 1000.0
    proto = {f.name: (0 if str(f.type).startswith("uint") else "x" if str(f.type) == "string" else 0.0)
             for f in FLOW_SAMPLE_SCHEMA}
    rows = []
    for k in range(1, 11):  # ticks ending at t0 + 0.2 k (s), flow 7, goodput 10 Mbit/s then 20 Mbit/s
        rows.append({**proto, "ts_s": t0 + 0.2 * k + 0.01, "interval_s": 0.2, "flow_id": 7,
                     "cca": "bbr" if k < 4 else "cubic", "goodput_bps": 10e6 if k <= 5 else 20e6,
                     "throughput_bps": 11e6, "sent_segs": 10, "retrans_segs": 1 if k == 2 else 0,
                     "rtt_us": 1000.0 * k, "jitter_us": 100.0, "rtt_samples": 5})
    table = pa.Table.from_pylist(rows, schema=FLOW_SAMPLE_SCHEMA)
    out = rebin_samples(table, t0, 1.0).to_pylist()
    assert len(out) == 2
    first, second = out
    assert first["interval_s"] == pytest.approx(1.0) and first["goodput_bps"] == pytest.approx(10e6)
    assert second["goodput_bps"] == pytest.approx(20e6)
    assert first["sent_segs"] == 50 and first["retrans_segs"] == 1 and first["loss_rate"] == pytest.approx(0.02)
    assert first["cca"] == "cubic" and first["rtt_us"] == 5000.0  # the state at the end of the interval
    assert first["ts_s"] == pytest.approx(t0 + 1.01)


def test_last_half_targets(tmp_path: Path) -> None:
    """Share of fair share, Jain and the targets over the last half, from a synthetic run folder."""
    from ccswitch.schema import FLOW_SAMPLE_SCHEMA
    from ccswitch.testbed.reports.run_folder import load_run
    from ccswitch.testbed.reports.run_metrics import last_half

    t0 = 5000.0
    proto = {f.name: (0 if str(f.type).startswith("uint") else "cubic" if str(f.type) == "string" else 0.0)
             for f in FLOW_SAMPLE_SCHEMA}
    rows = []
    for k in range(1, 21):
        for fid, mbps in ((1, 60.0 if k <= 10 else 47.0), (2, 30.0 if k <= 10 else 40.0)):
            rows.append({**proto, "ts_s": t0 + k, "interval_s": 1.0, "flow_id": fid, "goodput_bps": mbps * 1e6,
                         "throughput_bps": mbps * 1.04e6, "rtt_us": 1000.0 * k + 500.0 * (fid - 1),
                         "cca": "bbr" if fid == 2 and k > 5 else "cubic"})
    pq.write_table(pa.Table.from_pylist(rows, schema=FLOW_SAMPLE_SCHEMA), tmp_path / "samples.parquet")
    pq.write_table(pa.Table.from_pylist([{"flow_id": 1, "flow": "C1"}, {"flow_id": 2, "flow": "C2"}]),
                   tmp_path / "flows.parquet")
    meta = {"t0_epoch": t0, "sample_interval_s": 1.0, "duration_s": 20.0, "uplink_rate_mbit": 100.0,
            "phase_bounds_s": [0.0, 20.0], "flows": [{"name": "C1", "client": 1, "cca": "cubic"},
                                                     {"name": "C2", "client": 2, "cca": "cubic"}]}
    (tmp_path / "summary.json").write_text(json.dumps({"meta": meta}))
    lh = last_half(load_run(tmp_path))
    assert lh["throughput_mbps"] == {"C1": pytest.approx(47.0), "C2": pytest.approx(40.0)}
    assert lh["min_share_flow"] == "C2" and lh["min_share"] == pytest.approx(40.0 / 43.5)
    assert lh["jain"] == pytest.approx(87.0**2 / (2 * (47.0**2 + 40.0**2)))
    assert lh["utilisation"] == pytest.approx(87.0 * 1.04 / 100.0)  # no linkemu stats: the flows' wire rate
    assert lh["targets"] == {"min_share": True, "jain": True, "utilisation": True} and lh["targets_met"]
    assert lh["rtt_p95_ms"] == pytest.approx(20.025)  # 11, 11.5, ..., 20.5 ms: pos 18.05 of 0..19
    assert lh["cca_changes"]["C2"] == [{"t_s": 6.0, "from": "cubic", "to": "bbr"}]


def _run_folder(path: Path, flows: dict[str, list[tuple[float, float, float]]], duration_s: float = 20.0,
                lifetimes: dict[str, tuple[float, float]] | None = None) -> Path:
    """A run folder with samples (end time since t0, interval, Mbit/s) per flow, 1 s grid, 100 Mbit/s."""
    from ccswitch.schema import FLOW_SAMPLE_SCHEMA

    t0 = 5000.0
    proto = {f.name: (0 if str(f.type).startswith("uint") else "cubic" if str(f.type) == "string" else 0.0)
             for f in FLOW_SAMPLE_SCHEMA}
    rows = [{**proto, "ts_s": t0 + t, "interval_s": dt, "flow_id": fid, "goodput_bps": mbps * 1e6,
             "throughput_bps": mbps * 1.04e6, "rtt_us": 10_000.0}
            for fid, samples in enumerate(flows.values(), 1) for t, dt, mbps in samples]
    pq.write_table(pa.Table.from_pylist(rows, schema=FLOW_SAMPLE_SCHEMA), path / "samples.parquet")
    pq.write_table(pa.Table.from_pylist([{"flow_id": i, "flow": n} for i, n in enumerate(flows, 1)]),
                   path / "flows.parquet")
    life = lifetimes or {}
    meta = {"t0_epoch": t0, "sample_interval_s": 1.0, "duration_s": duration_s, "uplink_rate_mbit": 100.0,
            "phase_bounds_s": [0.0, duration_s],
            "flows": [{"name": n, "client": i, "cca": "cubic", "start_s": life.get(n, (0.0, duration_s))[0],
                       "duration_s": life.get(n, (0.0, duration_s))[1]} for i, n in enumerate(flows, 1)]}
    (path / "summary.json").write_text(json.dumps({"meta": meta}))
    return path


def test_monitor_check_leaves_out_runs_whose_monitor_fell_behind(tmp_path: Path) -> None:
    """A run is scored only when every judged flow has a sample at least every 3 intervals over the last
    half: a late sample (one row spanning missed ticks) or a flow unsampled while alive is a harness fault."""
    from ccswitch.testbed.reports.run_folder import load_run
    from ccswitch.testbed.reports.run_metrics import MONITOR_MAX_GAP_INTERVALS, last_half, monitor_check

    steady = [(float(k), 1.0, 45.0) for k in range(1, 21)]
    ok = monitor_check(load_run(_run_folder(tmp_path, {"C1": steady, "C2": steady})))
    assert ok == {"max_gap_s": pytest.approx(1.0), "limit_s": MONITOR_MAX_GAP_INTERVALS, "scored": True}
    # C2's monitor slept from 11 s to 17 s: one row carries the 6 s (its mean is right, its weight is not)
    late = [(t, 6.0, m) if t == 17 else (t, dt, m) for t, dt, m in steady if not 11 < t < 17]
    (tmp_path / "late").mkdir()
    lh = last_half(load_run(_run_folder(tmp_path / "late", {"C1": steady, "C2": late})))
    assert lh["monitor"]["max_gap_s"] == pytest.approx(6.0) and not lh["monitor"]["scored"]
    # two missed ticks are ordinary jitter of a loaded host: still scored
    (tmp_path / "two").mkdir()
    two = [(t, 3.0, m) if t == 15 else (t, dt, m) for t, dt, m in steady if t not in (13, 14)]
    assert monitor_check(load_run(_run_folder(tmp_path / "two", {"C1": steady, "C2": two})))["scored"]
    # an early stopper that closed during the gap: no row in the window although alive 4 s of it
    (tmp_path / "stopper").mkdir()
    gone = [s for s in steady if s[0] <= 10]
    lh = last_half(load_run(_run_folder(tmp_path / "stopper", {"C1": steady, "C2": gone},
                                        lifetimes={"C2": (0.0, 14.0)})))
    assert lh["share_of_fair"]["C2"] == 0.0  # what the run would have scored
    assert lh["monitor"]["max_gap_s"] == pytest.approx(4.0) and not lh["monitor"]["scored"]


def test_nine_scenario_report_says_when_a_run_is_not_scored(tmp_path: Path) -> None:
    """The nine-scenario report (testbed/reports/experiments.py) marks a run whose monitor fell behind
    instead of reporting its 'no (min_share)' as a result."""
    from ccswitch.testbed.reports.experiments import report

    steady = [(float(k), 1.0, 45.0) for k in range(1, 21)]
    gone = [s for s in steady if s[0] <= 10]
    for arm, c2 in (("static", steady), ("dqn", gone)):
        d = tmp_path / "res" / "fair-x" / arm / "run-01-seed-1"
        d.mkdir(parents=True)
        _run_folder(d, {"C1": steady, "C2": c2})
    text = report(tmp_path / "res", tmp_path / "doc.md")
    rows = {line.split(" | ")[1]: line for line in text.splitlines() if line.startswith("| fair-x |")}
    assert rows["static"].endswith("| yes |")
    assert rows["dqn"].endswith("| not scored: monitor fell behind (10.0 s without a sample) |")


def test_last_half_skips_a_flow_alive_for_no_whole_interval_of_it(tmp_path: Path) -> None:
    """A flow that ends half an interval into the last half has no sample there: it is not judged,
    where it used to count as starved (share 0)."""
    from ccswitch.testbed.reports.run_folder import load_run
    from ccswitch.testbed.reports.run_metrics import last_half

    steady = [(float(k), 1.0, 45.0) for k in range(1, 21)]
    brief = [(float(k), 1.0, 45.0) for k in range(1, 11)]
    lh = last_half(load_run(_run_folder(tmp_path, {"C1": steady, "C2": steady, "C3": brief},
                                        lifetimes={"C3": (0.0, 10.5)})))
    assert set(lh["share_of_fair"]) == {"C1", "C2"} and lh["min_share"] == pytest.approx(1.0)
    assert lh["monitor"]["scored"]


def test_starvation_episodes() -> None:
    times = [float(t) for t in range(1, 21)]
    a = [50.0] * 20
    b = [1.0] * 8 + [45.0] * 4 + [2.0] * 3 + [40.0] * 5  # starving 0-8 s (8 s), then 12-15 s (3 s: too short)
    eps = starvation(times, {"A": a, "B": b}, 1.0)
    assert [(e.flow, e.start_s, e.end_s) for e in eps] == [("B", 0.0, 8.0)]
    # still starving at the end counts up to the last interval; NaN = not running
    c = [math.nan] * 10 + [0.5] * 10
    eps = starvation(times, {"A": a, "C": c}, 1.0)
    assert [(e.flow, e.start_s, e.end_s) for e in eps] == [("C", 10.0, 20.0)]
    assert starvation(times, {"A": a}, 1.0) == []


def test_thratio_and_utilisation() -> None:
    assert thratio(40.0, 20.0) == 2.0 and math.isnan(thratio(1.0, 0.0))
    assert utilisation([45e6, 45e6], 100e6) == pytest.approx(0.9)
    assert math.isnan(utilisation([1.0], None))
