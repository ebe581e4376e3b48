"""Paper 000's Table 2 reproduction: the numbers of each finished run folder under ``OUT/runs/`` and the machine
load over the batch (``OUT/loadavg.csv``), for :mod:`.table2_verdicts` and :mod:`.table2_report`.

A run's numbers come from its summary.json (linkemu's uplink counters), the iperf3 client and server JSONs
(goodput series, srtt, retransmissions; a flow whose SYNs the AQM dropped starts late and is placed at its
actual start), ``seed-S.t2.json`` (what ``table2.py run`` post-processed from linkemu's packets: queue-delay
percentiles, standing queue, bytes out in 0-90 s, SYN drops, load) and the sockets' ECN modes
(samples.parquet).
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ccswitch.testbed.l4s.table2_config import CONFIGS, DURATION_S, FLOW_S, LATE_S, Config, t2_path


def _iperf_intervals(path: Path, key: str) -> list[tuple[float, dict[str, Any]]]:
    """(interval end, interval) of an iperf3 JSON; *key* "streams" (client: rtt, cwnd) or "sum" (server)."""
    try:
        d = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    out = []
    for iv in d.get("intervals", []):
        x = iv["streams"][0] if key == "streams" else iv["sum"]
        out.append((float(x["end"]), x))
    return out


def load_run(run_dir: Path, c: Config) -> dict[str, Any] | None:
    """The metrics of one finished run (None if it is not finished)."""
    from ccswitch.metrics import jain_index
    from ccswitch.testbed.runs.matrix import finished

    if not finished(run_dir):
        return None
    s = json.loads((run_dir / "summary.json").read_text())
    extra_path = t2_path(run_dir)
    extra = json.loads(extra_path.read_text()) if extra_path.is_file() else {}
    bin_path = run_dir.with_name(f"{run_dir.name}.linkemu.json")
    linkemu = json.loads(bin_path.read_text()) if bin_path.is_file() else {}
    up = s["emulator"]["uplink"]
    flows = {f["name"]: f for f in s["meta"]["flows"]}
    goodput_b, retrans, rtts, per_flow_rtt, series, rtt_series = 0.0, 0, [], {}, {}, {}
    mean_all_four = {}
    late: dict[str, float] = {}
    t0 = float(s["meta"]["t0_epoch"])
    for name, f in flows.items():
        cli = _iperf_intervals(run_dir / "iperf" / f"{name}.json", "streams")
        srv = _iperf_intervals(run_dir / "iperf" / f"{name}.server.json", "sum")
        st = float(f["start_s"])
        with contextlib.suppress(OSError, ValueError, KeyError):  # iperf3's test start, 1 s resolution
            began = json.loads((run_dir / "iperf" / f"{name}.json").read_text())["start"]["timestamp"]["timesecs"]
            if began + 0.5 - t0 - st > LATE_S:
                late[name] = began + 0.5 - t0 - st
                st = began + 0.5 - t0
        series[name] = [(st + e, x["bytes"] * 8 / x["seconds"] / 1e6) for e, x in srv if x["seconds"] > 0.2]
        rtt_series[name] = [(st + e, x["rtt"] / 1e3) for e, x in cli if x.get("rtt")]
        r = [v for _, v in rtt_series[name]]
        rtts += r
        per_flow_rtt[name] = statistics.fmean(r) if r else math.nan
        try:
            end = json.loads((run_dir / "iperf" / f"{name}.json").read_text())["end"]
            goodput_b += end["sum_received"]["bytes"]
            retrans += int(end["sum_sent"].get("retransmits") or 0)
        except (OSError, ValueError, KeyError):
            pass
    begins = {n: float(f["start_s"]) + late.get(n, 0.0) for n, f in flows.items()}
    lo_t, hi_t = max(begins.values()), min(b + FLOW_S for b in begins.values())  # all four run (30-60 s if on time)
    for name in flows:
        win = [v for t, v in series[name] if lo_t < t <= hi_t]
        mean_all_four[name] = statistics.fmean(win) if win else 0.0
    jain = jain_index(list(mean_all_four.values())) if hi_t - lo_t >= 10.0 else math.nan
    span_s = max(DURATION_S, *(b + FLOW_S for b in begins.values()))
    if "bytes_out_0_90" in extra:  # what left the bottleneck during the scenario's 90 s
        util = extra["bytes_out_0_90"] / (c.rate * 1e6 / 8 * DURATION_S)
    else:  # everything that left, over the span the flows ran
        util = up["bytes_out"] / (c.rate * 1e6 / 8 * span_s)
    q = extra.get("qdelay_all") or {}
    cls = (up.get("classes") or {}).get("classic") or {}
    qs = up.get("qdisc_stats") or {}
    flow_ecn = _ecn_modes(run_dir)
    ecn_modes = sorted({m for ms in flow_ecn.values() for m in ms})
    return {
        "config": c, "seed": int(run_dir.name.removeprefix("seed-")), "run_dir": run_dir,
        "total_in_mb": up["bytes_in"] / 1e6, "out_mb": up["bytes_out"] / 1e6, "goodput_mb": goodput_b / 1e6,
        "util": util, "retransmits": retrans,
        "out_0_90_mb": extra.get("bytes_out_0_90", up["bytes_out"]) / 1e6,
        "drops": up["drops_total"], "drops_aqm": up["drops"].get("aqm", 0), "drops_queue": up["drops"].get("queue", 0),
        "marks": up["ecn_marks"],
        "qdelay_mean_ms": q.get("mean_ms", up["sojourn_us"]["mean"] / 1e3),
        "qdelay_p95_ms": q.get("p95_ms", math.nan), "qdelay_p99_ms": q.get("p99_ms", up["sojourn_us"]["p99"] / 1e3),
        "qdelay_all_four_mean_ms": (extra.get("qdelay_all_four") or {}).get("mean_ms", math.nan),
        "standing_ms": (extra.get("standing_ms") or {}).get("mean_ms") or math.nan,
        "classic_sojourn_ms": cls.get("sojourn_us", {}).get("mean", math.nan) / 1e3 if cls else math.nan,
        "srtt_ms": statistics.fmean(rtts) if rtts else math.nan, "srtt_flow_ms": per_flow_rtt,
        "jain": jain, "all_four_mbit": mean_all_four, "all_four_s": (lo_t, hi_t),
        "shared_queues": qs.get("shared_queues"), "ecn_modes": ecn_modes, "late_s": late, "span_s": span_s,
        "ecn_flows": sum(1 for ms in flow_ecn.values() if 1 in ms), "no_ecn_flows": sorted(
            n for n, ms in flow_ecn.items() if ms == {0}),
        "syn_drops": extra.get("syn_drops"),
        "tcp_ecn": s["meta"].get("tcp_ecn"), "series": series, "rtt_series": rtt_series,
        "start_utc": extra.get("start_utc"), "end_utc": extra.get("end_utc"),
        "linkemu_sha256": linkemu.get("sha256"), "linkemu_mtime": linkemu.get("mtime_utc"),
        "late_p99_us": s["emulator"]["io"]["tx_lateness_us"]["p99"], "late_max_us": s["emulator"]["io"][
            "tx_lateness_us"]["max"],
        "load_before": extra.get("load_before"), "load_after": extra.get("load_after"), "jobs": extra.get("jobs"),
    }


def _ecn_modes(run_dir: Path) -> dict[str, set[int]]:
    """Per flow, the ECN feedback modes its socket showed (FlowSample ecn_mode: 0 none, 1 RFC 3168)."""
    out: dict[str, set[int]] = {}
    with contextlib.suppress(Exception):
        import pyarrow.parquet as pq

        names = {r["flow_id"]: r["flow"] for r in pq.read_table(run_dir / "flows.parquet").to_pylist()}
        t = pq.read_table(run_dir / "samples.parquet", columns=["flow_id", "ecn_mode"])
        for fid, m in zip(t["flow_id"].to_pylist(), t["ecn_mode"].to_pylist(), strict=True):
            if m is not None and fid in names:
                out.setdefault(names[fid], set()).add(int(m))
    return out


def load_summary(out: Path, runs: Sequence[dict[str, Any]]) -> str:
    """The machine load while the batch ran (OUT/loadavg.csv), as one sentence."""
    path = out / "loadavg.csv"
    if not path.is_file():
        return "not sampled"
    vals = []
    with path.open() as fh:
        for row in csv.DictReader(fh):
            with contextlib.suppress(ValueError):
                vals.append(float(row["load1"]))
    if not vals:
        return "not sampled"
    vals.sort()
    return (f"1-min load average over {len(vals)} samples (every 5 s while the driver ran): median "
            f"{statistics.median(vals):.2f}, 90th percentile {vals[int(0.9 * (len(vals) - 1))]:.2f}, max "
            f"{vals[-1]:.2f} on 2 cores")


def load_runs(out: Path) -> dict[Config, list[dict[str, Any]]]:
    """Every finished run under ``OUT/runs/<configuration>/seed-S``, per configuration (all of them present)."""
    runs: dict[Config, list[dict[str, Any]]] = {c: [] for c in CONFIGS}
    folder = out / "runs"
    for c in CONFIGS:
        d = folder / c.name
        if not d.is_dir():
            continue
        for rd in sorted(d.glob("seed-*")):
            if rd.is_dir() and rd.name.removeprefix("seed-").isdigit():
                r = load_run(rd, c)
                if r is not None:
                    runs[c].append(r)
    return runs
