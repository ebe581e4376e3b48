"""Reading an L4S run folder (layout in testbed/runs/runner.py) for the report: its flows, their goodput series,
the bottleneck's per-queue statistics and ccswitchd's switches.

* flows: ``summary.json``'s flows at their *actual* lifetimes (iperf3's start stamp and last interval; a
  loaded VM starts flows late), classed L4S / Classic, with their RTT group (the client's base RTT plus the
  scenario's per-client extra delay) and, behind VDQ-CSAQM, their packet-value policy (the qdisc's
  ``policies`` rules matched against the client's address);
* goodput: the payload each iperf3 *server* received per 1 s interval (``iperf/NAME.server.json``) on the
  run's 1 s grid (the monitor's FlowSample rows skip ticks when the 2-core VM is loaded; iperf3's own
  intervals do not);
* queues: linkemu's per-class intervals (``emulator/intervals.csv``, the ``l_*`` / ``c_*`` columns DualPI2
  fills for its L and C queues and vdq_csaqm for its L4S and Classic FIFOs) on the scenario clock;
* daemon: the applied switches and reverts of every ``daemon/*/decisions.jsonl``.
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ccswitch.testbed.l4s.make_scenarios import client_ip
from ccswitch.testbed.l4s.report_model import L4S_CCAS, FlowInfo

# linkemu intervals.csv columns of DualPI2's per-queue statistics (one row per
# interval and direction, client = -1); see docs/l4s.md "## DualPI2 in linkemu".
QUEUE_COLUMNS = {
    "mean": "{q}_sojourn_mean_us",
    "p90": "{q}_sojourn_p90_us",
    "max": "{q}_sojourn_max_us",
    "bytes": "{q}_bytes_out",
    "marks": "{q}_marks",
    "drops": "{q}_drops",
}
RAW_KEYS = ("bytes", "marks", "drops")
"""Counts, not delays (kept as they are; the delays are converted from us to ms)."""
SERVER_ADDR = "10.99.0.1"
"""testbed/runs/topology.py: the server's address (for vdq_csaqm's policy rules; clients: make_scenarios.client_ip)."""
VDQ_CODE_MAX = 65535
GOLD_R_MIN_BPS, GOLD_DECADES = 1e3, 8.0
"""linkemu src/qdisc/pv_marker.rs: Gold's TVF, coded v = 65535 (1 - log10(r / 1 kbit/s) / 8)."""


def uplink_qdisc(sc: dict[str, Any]) -> dict[str, Any]:
    """The scenario's bottleneck queue table ({} for linkemu's default)."""
    q = sc.get("link", {}).get("uplink", {}).get("qdisc")
    return q if isinstance(q, dict) else {}


def vdq_policy(qdisc: dict[str, Any], client: int, proto: int = 6) -> str | None:
    """The packet-value policy vdq_csaqm's marker gives the data packets of *client*'s TCP flows to the server.

    Rules are tried in order (first match wins, as in linkemu); a rule that names ports
    cannot be decided per client here, so a client it might match gets None (unknown).
    Not a vdq_csaqm table: None."""
    if qdisc.get("kind") != "vdq_csaqm":
        return None
    ip = client_ip(client)
    for rule in qdisc.get("policies") or []:
        if (rule.get("src", ip) != ip or rule.get("dst", SERVER_ADDR) != SERVER_ADDR
                or rule.get("proto", proto) != proto):
            continue
        if "sport" in rule or "dport" in rule:
            return None
        return str(rule["policy"])
    return str(qdisc.get("default_policy", "gold"))


def gold_mbit(code: float) -> float:
    """The rate (Mbit/s) at which Gold's TVF crosses the coded value *code* (what a CTV entitles a Gold flow to)."""
    if code != code or code <= 0:
        return math.inf
    return GOLD_R_MIN_BPS * 10 ** (GOLD_DECADES * (1 - code / VDQ_CODE_MAX)) / 1e6


def scenario_table(run_dir: Path) -> dict[str, Any]:
    """The run's scenario file, as TOML data."""
    import tomllib

    return tomllib.loads((run_dir / "scenario.toml").read_text())


def flow_infos(run_dir: Path, meta: dict[str, Any]) -> list[FlowInfo]:
    sc = scenario_table(run_dir)
    qdisc = uplink_qdisc(sc)
    link = sc.get("link", {})
    base = float(link.get("uplink", {}).get("delay_ms", 0.0)) + float(link.get("downlink", {}).get("delay_ms", 0.0))
    extra = link.get("client_delay_ms") or []
    t0 = float(meta.get("t0_epoch") or 0.0)
    out = []
    for f in meta["flows"]:
        c = int(f["client"])
        rtt = base + (float(extra[c - 1]) if c - 1 < len(extra) else 0.0)
        start, end = actual_lifetime(run_dir / "iperf" / f"{f['name']}.server.json", t0,
                                     float(f["start_s"]), float(f["duration_s"]))
        out.append(FlowInfo(f["name"], c, f["cca"], start, end, "L4S" if f["cca"] in L4S_CCAS else "Classic", rtt,
                            vdq_policy(qdisc, c)))
    return out


def actual_lifetime(server_json: Path, t0_epoch: float, start_s: float, duration_s: float) -> tuple[float, float]:
    """When a flow really ran, s after t0: iperf3's start stamp (whole seconds, so +0.5 s) and the end of its
    last interval; the scheduled times if the report is missing.  A loaded VM can start a flow seconds late
    (the runner's thread stalls; SYN retries), and the phases must follow what happened."""
    try:
        d = json.loads(server_json.read_text())
        stamp = float(d["start"]["timestamp"]["timesecs"]) + 0.5 - t0_epoch
        last = float(d["intervals"][-1]["sum"]["end"])
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return start_s, start_s + duration_s
    if not t0_epoch or abs(stamp - start_s) > 60:
        stamp = start_s
    start = max(start_s, stamp)
    return start, start + last


def iperf_series(run_dir: Path, flows: Sequence[FlowInfo],
                 duration_s: float) -> tuple[list[float], dict[str, list[float]]]:
    """Per-flow receiver goodput (Mbit/s) on a 1 s grid from the iperf3 servers' interval reports."""
    n = math.ceil(duration_s)
    t_s = [float(k + 1) for k in range(n)]
    out: dict[str, list[float]] = {}
    for f in flows:
        path = run_dir / "iperf" / f"{f.name}.server.json"
        byte_bins = [0.0] * n
        seen = [0.0] * n
        try:
            intervals = json.loads(path.read_text()).get("intervals", [])
        except (OSError, ValueError):
            intervals = []
        for iv in intervals:
            sm = iv.get("sum", {})
            a, b = f.start_s + float(sm.get("start", 0.0)), f.start_s + float(sm.get("end", 0.0))  # actual start
            k = int((a + b) / 2)
            if 0 <= k < n and b > a:
                byte_bins[k] += float(sm.get("bytes", 0))
                seen[k] += b - a
        out[f.name] = [8 * byte_bins[k] / seen[k] / 1e6 if seen[k] > 0.5 else math.nan for k in range(n)]
    return t_s, out


def queue_series(run_dir: Path, t0_epoch: float) -> tuple[list[float], dict[str, dict[str, list[float]]]]:
    """Per-interval L/C sojourn statistics (ms) of the uplink bottleneck from intervals.csv, on the
    scenario clock (linkemu counts from its own start, before t0)."""
    path = run_dir / "emulator" / "intervals.csv"
    offset = 0.0
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        emu_start = float(json.loads((run_dir / "emulator" / "summary.json").read_text())["run"]["start_unix_s"])
        offset = t0_epoch - emu_start if t0_epoch else 0.0
    t: list[float] = []
    out: dict[str, dict[str, list[float]]] = {q: {k: [] for k in QUEUE_COLUMNS} for q in ("l", "c")}
    if not path.is_file():
        return t, out
    with path.open() as f:
        rows = [r for r in csv.DictReader(f) if r.get("direction") == "uplink" and r.get("client") == "-1"]
    if not rows or QUEUE_COLUMNS["mean"].format(q="l") not in rows[0]:
        return [], out
    for r in rows:
        t.append(float(r["t_s"]) - offset)
        for q in ("l", "c"):
            for key, col in QUEUE_COLUMNS.items():
                v = r.get(col.format(q=q), "")
                x = float(v) if v not in ("", None) else math.nan
                out[q][key].append(x if key in RAW_KEYS else x / 1000.0)
    for q in ("l", "c"):  # no packet left the queue: its delay is undefined, not 0
        for key in ("mean", "p90", "max"):
            out[q][key] = [v if b > 0 else math.nan for v, b in zip(out[q][key], out[q]["bytes"], strict=True)]
    return t, out


def daemon_events(run_dir: Path, t0_epoch: float) -> list[dict[str, Any]]:
    """Applied switches/reverts from every ccswitchd decisions.jsonl of the run, on the scenario clock."""
    names: dict[int, str] = {}
    with contextlib.suppress(Exception):
        import pyarrow.parquet as pq

        names = {int(r["flow_id"]): r["flow"] for r in pq.read_table(run_dir / "flows.parquet").to_pylist()}
    out = []
    for path in sorted((run_dir / "daemon").glob("*/decisions.jsonl")):
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError, KeyError, TypeError):
                r = json.loads(line)
                if r["action"] in ("switch", "revert") and r.get("verdict") == "applied":
                    out.append({"t_s": float(r["ts"]) - t0_epoch, "flow": names.get(int(r["flow"]), str(r["flow"])),
                                "from": r["from"], "to": r["to"], "action": r["action"]})
    return sorted(out, key=lambda e: e["t_s"])


def emulator_uplink(run_dir: Path) -> dict[str, Any]:
    """linkemu's whole-run uplink summary (classes, qdisc_stats); {} without one."""
    with contextlib.suppress(OSError, ValueError, KeyError):
        return json.loads((run_dir / "emulator" / "summary.json").read_text())["uplink"]
    return {}


def scripted_switches(run_dir: Path) -> list[dict[str, Any]]:
    """The scenario's scripted switches (``switches.json``), [] without."""
    path = run_dir / "switches.json"
    return json.loads(path.read_text()) if path.is_file() else []
