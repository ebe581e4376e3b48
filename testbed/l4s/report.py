"""L4S-vs-Classic results of testbed runs through DualPI2: tables and paper-004-style plots.

Input: run folders of the ``l4s-*`` scenarios (``ccswitch testbed run``; layout
in testbed/runs/runner.py).  A flow is **L4S** when it runs ``prague`` (it sits in
DualPI2's L queue: DSCP 40), otherwise **Classic** (C queue).  Its RTT group
is its client's base RTT plus the scenario's per-client extra delay.

Phases are the stretches between flow starts and stops (paper 004's 20 s
phases).  Per phase, over its last ``PHASE_S - SETTLE_S`` seconds (the first
``SETTLE_S`` = 5 s after flows join or leave are a transient and left out):

* per flow: mean goodput, Mbit/s: the payload the iperf3 *server* received per
  1 s interval (``iperf/NAME.server.json``), placed on the run's 1 s grid at the
  flow's start_s (the monitor's FlowSample rows skip ticks when the 2-core VM
  is loaded; iperf3's own intervals do not); its share of the fair share =
  goodput / (sum of all active flows' goodput / number of active flows);
* per class: aggregate goodput, per-flow mean, and **L:C** = L4S per-flow mean
  / Classic per-flow mean (paper 004 quotes it per class for one flow each:
  1:6 with DCTCP, 9:1 with BBRv2 as L4S, for DualPI2);
* Jain's index over the flows' mean goodputs, and the smallest share of the
  fair share any flow got ("min share", with the flow's name); utilisation = sum of goodputs
  (+ 52 bytes of TCP/IP headers per 1448-byte segment) / link rate;
* per queue (L, C): sojourn time in DualPI2 from linkemu's per-class
  intervals: mean weighted by packets, p90 = mean of the per-interval p90s,
  max = max of the per-interval maxima, ms.

**VDQ-CSAQM** (linkemu ``vdq_csaqm``, paper 004) runs are read the same way:
linkemu fills the per-class statistics (``classes``, intervals.csv's
``l_*``/``c_*`` columns) for the L4S and Classic FIFOs of its virtual dual
queue as it does for DualPI2's L and C queues.  DualPI2's p', overload
updates and native/coupled L marks do not exist there; the whole-run table of
VDQ runs has its congestion threshold values (CTV_0 of VQ_0, CTV_1 of VQ_1,
coded 0..65535, mean and max over the 10 ms updates) and arrival drops (FIFO
or VQ full) instead.  Each flow's packet-value policy (Gold/Silver/Voice)
comes from the qdisc's ``policies`` rules matched against its client's
address; per phase the report gives the per-flow goodput of every
class+policy group (Gold:Silver) and of every CCA.

Plots (``<out>/<scenario>.png``), the layout of paper 004 figures 3-4: top,
total / L4S / Classic throughput with each class's fair share (dashed);
middle, every flow's throughput with the per-flow fair share; bottom, L and
C queue delay mean (solid), p90 (dashed), max (dotted), log scale.

    .venv/bin/python testbed/l4s/report.py results/l4s-dyn-cubic/run-01-seed-1 ... \\
        --out docs/l4s --md docs/l4s/results.md
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import itertools
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ccswitch.metrics import jain_index

L4S_CCAS = ("prague",)
SETTLE_S = 5.0
"""Seconds after each phase boundary left out of the phase's means."""
MIN_PHASE_S = 4.0
"""Shorter stretches between flow starts/stops are transitions, not phases (they are not reported)."""
HEADER_FACTOR = 1500 / 1448
"""IP bytes per goodput byte (1448-byte payload with timestamps, 52 bytes of headers)."""
CLASSES = ("L4S", "Classic")
QUEUE_OF = {"L4S": "l", "Classic": "c"}
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
CLIENT_SUBNET, CLIENT_HOST0, SERVER_ADDR = "10.99.0", 10, "10.99.0.1"
"""testbed/runs/topology.py: client i is SUBNET.(10 + i), the server .1 (for vdq_csaqm's policy rules)."""
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
    ip = f"{CLIENT_SUBNET}.{CLIENT_HOST0 + client}"
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
"""Counts, not delays (kept as they are; the delays are converted from us to ms)."""


@dataclass
class FlowInfo:
    name: str
    client: int
    cca: str
    start_s: float
    end_s: float
    klass: str
    rtt_ms: float
    policy: str | None = None
    """vdq_csaqm's packet-value policy of the flow (None for other queues)."""


@dataclass
class PhaseResult:
    start_s: float
    end_s: float
    counts: dict[str, int]
    flow_mbps: dict[str, float]
    fair_mbps: float
    class_mbps: dict[str, float]
    per_flow_mbps: dict[str, float]
    lc_ratio: float
    jain: float
    utilisation: float
    delay_ms: dict[str, dict[str, float]] = field(default_factory=dict)
    group_per_flow_mbps: dict[str, float] = field(default_factory=dict)
    marks_pct: dict[str, float] = field(default_factory=dict)
    """CE marks per packet that left the class's queue, % (packets ~ bytes_out / 1500)."""
    drops_pct: dict[str, float] = field(default_factory=dict)
    cca_per_flow_mbps: dict[str, float] = field(default_factory=dict)
    """Per-flow mean goodput of each CCA's active flows (the classes of a mixed-CCA run)."""
    policy_per_flow_mbps: dict[str, float] = field(default_factory=dict)
    """vdq_csaqm: per-flow mean goodput per "<class> <policy>" (e.g. "Classic silver"); {} otherwise."""
    gold_silver: float = math.nan
    """vdq_csaqm: Gold flows' per-flow mean goodput / Silver flows' (all classes); NaN without both policies."""

    @property
    def label(self) -> str:
        return f"{self.counts['L4S']}-{self.counts['Classic']}"


@dataclass
class RunResult:
    scenario: str
    run_dir: Path
    rate_mbit: float
    daemon: bool
    flows: list[FlowInfo]
    phases: list[PhaseResult]
    t_s: list[float]
    series: dict[str, list[float]]
    queue: dict[str, dict[str, list[float]]]
    queue_t_s: list[float]
    switches: list[dict[str, Any]]
    emulator: dict[str, Any] = field(default_factory=dict)
    """linkemu's uplink summary (classes, qdisc_stats) for the whole run."""
    daemon_events: list[dict[str, Any]] = field(default_factory=list)
    """ccswitchd's applied switches and reverts: t_s (since t0), flow, from, to, action."""
    cca_seconds: dict[str, float] = field(default_factory=dict)
    """Seconds the classic flows spent on each CCA (with the daemon's switches)."""
    queue_kind: str = "dualpi2"
    """The bottleneck's qdisc kind (the scenario's uplink)."""


def _scenario_text(run_dir: Path) -> dict[str, Any]:
    import tomllib

    return tomllib.loads((run_dir / "scenario.toml").read_text())


def flow_infos(run_dir: Path, meta: dict[str, Any]) -> list[FlowInfo]:
    sc = _scenario_text(run_dir)
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


def _mean(xs: Sequence[float]) -> float:
    xs = [x for x in xs if not math.isnan(x)]
    return sum(xs) / len(xs) if xs else math.nan


def _ratio(a: float, b: float) -> float:
    return a / b if a == a and b == b and b > 0 else math.nan


def analyse(run_dir: Path) -> RunResult:
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
        flow_mbps = {f.name: _mean([series.get(f.name, [math.nan] * len(t_s))[i] for i in idx]) for f in active}
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
        ph = PhaseResult(
            start_s=a, end_s=b, counts=counts, flow_mbps=flow_mbps, fair_mbps=total / len(active),
            class_mbps=class_mbps, per_flow_mbps=per_flow,
            lc_ratio=per_flow["L4S"] / per_flow["Classic"] if counts["L4S"] and counts["Classic"]
            and per_flow["Classic"] > 0 else math.nan,
            jain=jain_index([v for v in flow_mbps.values() if not math.isnan(v)]),
            utilisation=total * HEADER_FACTOR / rate if rate == rate and rate > 0 else math.nan,
            group_per_flow_mbps={g: _mean(v) for g, v in sorted(groups.items())},
            cca_per_flow_mbps={c: _mean(v) for c, v in sorted(by_cca.items())},
            policy_per_flow_mbps={g: _mean(v) for g, v in sorted(by_policy.items())},
            gold_silver=_ratio(_mean([flow_mbps[f.name] for f in active if f.policy == "gold"]),
                               _mean([flow_mbps[f.name] for f in active if f.policy == "silver"])),
        )
        if qt:
            qi_all = [i for i, t in enumerate(qt) if lo < t - 0.5 < b]
            for k in CLASSES:
                if not counts[k]:  # no flow of the class in the phase: a boundary interval's packets are not its delay
                    continue
                q = queue[QUEUE_OF[k]]
                qi = [i for i in qi_all if q["bytes"][i] > 0]  # intervals in which the queue sent something
                pk = [q["bytes"][i] for i in qi]  # weights: the mean is over packets ~ bytes
                means = [q["mean"][i] for i in qi]
                wsum = sum(p for p, m in zip(pk, means, strict=True) if p == p and m == m and p > 0)
                wmean = (sum(p * m for p, m in zip(pk, means, strict=True) if p == p and m == m and p > 0) / wsum
                         if wsum else math.nan)
                maxes = [q["max"][i] for i in qi if q["max"][i] == q["max"][i]]
                ph.delay_ms[k] = {"mean": wmean, "p90": _mean([q["p90"][i] for i in qi]),
                                  "max": max(maxes) if maxes else math.nan}
                sent = sum(x for x in pk if x == x)
                marks = sum(q["marks"][i] for i in qi if q["marks"][i] == q["marks"][i])
                drops = sum(q["drops"][i] for i in qi if q["drops"][i] == q["drops"][i])
                pkts = sent / 1500.0
                ph.marks_pct[k] = 100.0 * marks / pkts if pkts else math.nan
                ph.drops_pct[k] = 100.0 * drops / (pkts + drops) if pkts + drops else math.nan
        phases.append(ph)
    switches = []
    sw_path = run_dir / "switches.json"
    if sw_path.is_file():
        switches = json.loads(sw_path.read_text())
    daemon_dir = run_dir / "daemon"
    events = daemon_events(run_dir, float(meta.get("t0_epoch") or 0.0)) if daemon_dir.is_dir() else []
    emu: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError, KeyError):
        emu = json.loads((run_dir / "emulator" / "summary.json").read_text())["uplink"]
    kind = str(uplink_qdisc(_scenario_text(run_dir)).get("kind", "pfifo"))
    return RunResult(meta["scenario"], run_dir, rate, daemon_dir.is_dir(), flows, phases, t_s, series, queue, qt,
                     switches, emu, events, cca_seconds(flows, events), kind)


# ------------------------------------------------------------------ output ---


def _f(x: float, nd: int = 1) -> str:
    return "-" if x != x else f"{x:.{nd}f}"


def min_share_text(p: PhaseResult) -> str:
    """The flow furthest below its fair share: its goodput / fair share, and its name."""
    vals = [(v / p.fair_mbps, n) for n, v in p.flow_mbps.items() if v == v and p.fair_mbps > 0]
    if not vals:
        return "-"
    share, name = min(vals)
    return f"{share:.2f} ({name})"


def gold_silver(p: PhaseResult) -> float:
    """Gold:Silver of a phase: the Gold flows' per-flow mean goodput over the Silver flows' (both classes together),
    NaN without both policies."""
    return p.gold_silver


def ratio_text(r: float) -> str:
    """L:C as the paper writes it: 1:6 (Classic larger) or 4:1 (L4S larger)."""
    if r != r or r <= 0:
        return "-"
    return f"1:{1 / r:.1f}" if r < 1 else f"{r:.1f}:1"


def _soj(c: dict[str, Any]) -> str:
    s = c["sojourn_us"]
    return " / ".join(_f(s[k] / 1000, 2 if k != "max" else 1) for k in ("mean", "p90", "p99", "max"))


def _pct(n: float, d: float) -> str:
    return _f(100 * n / d, 1) + " %" if d else "-"


def vdq_whole_run_table(results: Sequence[RunResult]) -> list[str]:
    """VDQ-CSAQM runs: per-class sojourn as for DualPI2, then its own state: the CTVs and arrival drops.

    DualPI2's p', overload updates and native/coupled L marks do not exist for vdq_csaqm."""
    lines = ["| run | L sojourn mean / p90 / p99 / max (ms) | C sojourn mean / p90 / p99 / max (ms) "
             "| L marked / dropped | C marked / dropped | CTV_0 (L4S VQ) mean / max | CTV_1 (shared VQ) mean / max "
             "| arrival drops L / C (FIFO / VQ full) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        cl = (r.emulator or {}).get("classes") or {}
        q = (r.emulator or {}).get("qdisc_stats") or {}
        if not cl or q.get("kind") != "vdq_csaqm":
            continue
        lq, cq = cl["l4s"], cl["classic"]
        vl, vc = q.get("classes", {}).get("l4s", {}), q.get("classes", {}).get("classic", {})

        def ctv(c: dict[str, Any]) -> str:
            return f"{_f(c.get('ctv_mean', math.nan), 0)} / {_f(float(c.get('ctv_max', math.nan)), 0)}"

        lines.append(f"| {r.scenario} | {_soj(lq)} | {_soj(cq)} | {_pct(lq['ecn_marks'], lq['packets_out'])} / "
                     f"{_pct(lq['drops_total'], lq['packets_out'] + lq['drops_total'])} | "
                     f"{_pct(cq['ecn_marks'], cq['packets_out'])} / "
                     f"{_pct(cq['drops_total'], cq['packets_out'] + cq['drops_total'])} | {ctv(vl)} | {ctv(vc)} | "
                     f"{vl.get('queue_drops', '-')} / {vl.get('vq_drops', '-')}, "
                     f"{vc.get('queue_drops', '-')} / {vc.get('vq_drops', '-')} |")
    return lines if len(lines) > 2 else []


def whole_run_table(results: Sequence[RunResult]) -> list[str]:
    """Per run: linkemu's exact per-class sojourn percentiles (0.1 ms resolution), marks, drops, p' (DualPI2)."""
    lines = ["| run | L sojourn mean / p90 / p99 / max (ms) | C sojourn mean / p90 / p99 / max (ms) "
             "| L marked / dropped | C dropped | p' mean / max | overload updates | L marks native / coupled |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        cl = (r.emulator or {}).get("classes") or {}
        q = (r.emulator or {}).get("qdisc_stats") or {}
        if not cl or q.get("kind") == "vdq_csaqm":
            continue
        lq, cq = cl["l4s"], cl["classic"]
        lines.append(f"| {r.scenario} | {_soj(lq)} | {_soj(cq)} | {_pct(lq['ecn_marks'], lq['packets_out'])} / "
                     f"{_pct(lq['drops_total'], lq['packets_out'] + lq['drops_total'])} | "
                     f"{_pct(cq['drops_total'], cq['packets_out'] + cq['drops_total'])} | "
                     f"{_f(q.get('p_prime_mean', math.nan), 3)} / {_f(q.get('p_prime_max', math.nan), 3)} | "
                     f"{q.get('overload_updates', '-')} | {q.get('l4s_native_marks', '-')} / "
                     f"{q.get('l4s_coupled_marks', '-')} |")
    return lines if len(lines) > 2 else []


def markdown(results: Sequence[RunResult]) -> str:
    lines = ["#### Whole runs (linkemu's per-class statistics)", ""]
    if dp := whole_run_table(results):
        lines += [*dp, ""]
    if vdq := vdq_whole_run_table(results):
        lines += ["VDQ-CSAQM (L = its L4S FIFO, C = its Classic FIFO; p', overload updates and native/coupled "
                  "marks are DualPI2's and do not exist here; CTVs coded 0..65535, higher = more is cut):", "",
                  *vdq, ""]
    for r in results:
        lines += [f"#### {r.scenario}", "",
                  "| phase (s) | L-C flows | L4S per flow | Classic per flow | L:C | Jain | min share | util. "
                  "| L delay mean / p90 / max (ms) | C delay mean / p90 / max (ms) | L marks | C marks / drops |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for p in r.phases:
            dl, dc = p.delay_ms.get("L4S", {}), p.delay_ms.get("Classic", {})
            lines.append(
                f"| {p.start_s:.0f}-{p.end_s:.0f} | {p.label} | {_f(p.per_flow_mbps['L4S'])} | "
                f"{_f(p.per_flow_mbps['Classic'])} | {ratio_text(p.lc_ratio)} | {_f(p.jain, 2)} | "
                f"{min_share_text(p)} | "
                f"{_f(100 * p.utilisation, 0)} % | {_f(dl.get('mean', math.nan), 2)} / "
                f"{_f(dl.get('p90', math.nan), 2)} / {_f(dl.get('max', math.nan), 1)} | "
                f"{_f(dc.get('mean', math.nan), 2)} / {_f(dc.get('p90', math.nan), 2)} / "
                f"{_f(dc.get('max', math.nan), 1)} | {_f(p.marks_pct.get('L4S', math.nan))} % | "
                f"{_f(p.marks_pct.get('Classic', math.nan))} / {_f(p.drops_pct.get('Classic', math.nan))} % |")
        if any(len(p.group_per_flow_mbps) > 2 for p in r.phases):
            groups = sorted({g for p in r.phases for g in p.group_per_flow_mbps})
            lines += ["", "Per-flow mean goodput (Mbit/s) by class and RTT:", "",
                      "| phase (s) | " + " | ".join(groups) + " | fair share |",
                      "|---|" + "---|" * (len(groups) + 1)]
            for p in r.phases:
                lines.append(f"| {p.start_s:.0f}-{p.end_s:.0f} | "
                             + " | ".join(_f(p.group_per_flow_mbps.get(g, math.nan)) for g in groups)
                             + f" | {_f(p.fair_mbps)} |")
        if any(len(p.policy_per_flow_mbps) > len([c for c in CLASSES if p.counts[c]]) for p in r.phases):
            pols = sorted({g for p in r.phases for g in p.policy_per_flow_mbps})
            lines += ["", "Per-flow mean goodput (Mbit/s) by class and packet-value policy (vdq_csaqm):", "",
                      "| phase (s) | " + " | ".join(pols) + " | Gold:Silver |", "|---|" + "---|" * (len(pols) + 1)]
            for p in r.phases:
                lines.append(f"| {p.start_s:.0f}-{p.end_s:.0f} | "
                             + " | ".join(_f(p.policy_per_flow_mbps.get(g, math.nan)) for g in pols)
                             + f" | {_f(gold_silver(p), 2)} |")
        if any(len(p.cca_per_flow_mbps) > 2 for p in r.phases):
            ccas = sorted({c for p in r.phases for c in p.cca_per_flow_mbps})
            lines += ["", "Per-flow mean goodput (Mbit/s) by CCA, and the largest per-flow / fair share:", "",
                      "| phase (s) | " + " | ".join(ccas) + " | fair share | max CCA / fair |",
                      "|---|" + "---|" * (len(ccas) + 2)]
            for p in r.phases:
                top = max((v for v in p.cca_per_flow_mbps.values() if v == v), default=math.nan)
                lines.append(f"| {p.start_s:.0f}-{p.end_s:.0f} | "
                             + " | ".join(_f(p.cca_per_flow_mbps.get(c, math.nan)) for c in ccas)
                             + f" | {_f(p.fair_mbps)} | {_f(top / p.fair_mbps if p.fair_mbps else math.nan, 2)} |")
        if r.daemon:
            sw = [e for e in r.daemon_events if e["action"] == "switch"]
            rv = [e for e in r.daemon_events if e["action"] == "revert"]
            total = sum(r.cca_seconds.values()) or 1.0
            by_time = sorted(r.cca_seconds.items(), key=lambda x: -x[1])
            share = ", ".join(f"{c} {100 * v / total:.0f} %" for c, v in by_time)
            lines += ["", f"ccswitchd on the classic client: {len(sw)} switches, {len(rv)} reverts; classic flow-time "
                      f"by CCA: {share}.  Timeline: "
                      + ", ".join(f"{e['t_s']:.0f} s {e['flow']} {e['from']}→{e['to']}"
                                  + (" (revert)" if e["action"] == "revert" else "") for e in r.daemon_events)]
        lines.append("")
    return "\n".join(lines)


def plot(r: RunResult, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 1, figsize=(10, 9), sharex=True, gridspec_kw={"height_ratios": [1, 1.3, 1]})
    t = r.t_s
    x = [ti - 0.5 for ti in t]
    tot = [0.0] * len(t)
    cls = {k: [0.0] * len(t) for k in CLASSES}
    for f in r.flows:
        s = r.series.get(f.name, [])
        for i, v in enumerate(s):
            if v == v:
                tot[i] += v
                cls[f.klass][i] += v
    cap = r.rate_mbit / HEADER_FACTOR
    ax = axes[0]
    ax.plot(x, tot, "k--", lw=1.2, label="total")
    colours = {"L4S": "tab:red", "Classic": "tab:green"}
    for k in CLASSES:
        ax.plot(x, cls[k], color=colours[k], lw=1.5, label=f"{k} (aggregate)")
        xs, ys = [], []
        for p in r.phases:
            n = p.counts["L4S"] + p.counts["Classic"]
            xs += [p.start_s, p.end_s]
            ys += [cap * p.counts[k] / n] * 2
        ax.plot(xs, ys, color="grey", ls="--" if k == "L4S" else ":", lw=1, label=f"{k} fair share")
    ax.set_ylabel("Mbit/s")
    ax.legend(fontsize=7, ncol=3, loc="upper right")
    queue = {"dualpi2": "DualPI2", "vdq_csaqm": "VDQ-CSAQM"}.get(r.queue_kind, r.queue_kind)
    ax.set_title(f"{r.scenario} ({queue}" + ("; ccswitchd on the classic senders)" if r.daemon else ")"), fontsize=10)
    ax = axes[1]
    palette = {"L4S": plt.cm.Reds, "Classic": plt.cm.Greens}
    for k in CLASSES:
        mine = [f for f in r.flows if f.klass == k]
        for j, f in enumerate(mine):
            s = r.series.get(f.name, [])
            shade = 0.45 + 0.5 * (j / max(1, len(mine) - 1)) if len(mine) > 1 else 0.8
            pol = f" {f.policy}" if f.policy not in (None, "gold") or any(g.policy not in (None, "gold")
                                                                        for g in r.flows) else ""
            ax.plot(x[:len(s)], s, color=palette[k](shade), lw=1, ls="--" if f.policy == "silver" else "-",
                    label=f"{f.name} {f.cca} {f.rtt_ms:g} ms{pol}")
    xs, ys = [], []
    for p in r.phases:
        xs += [p.start_s, p.end_s]
        ys += [cap / (p.counts["L4S"] + p.counts["Classic"])] * 2
    ax.plot(xs, ys, color="grey", lw=1.5, label="fair share")
    for e in r.daemon_events:
        ax.axvline(e["t_s"], color="tab:blue", ls="--" if e["action"] == "switch" else ":", lw=0.8, alpha=0.7)
        ax.text(e["t_s"], ax.get_ylim()[1] * 0.97, f"{e['flow']}→{e['to']}", rotation=90, fontsize=6,
                va="top", ha="right", color="tab:blue")
    ax.set_ylabel("Mbit/s per flow")
    ax.legend(fontsize=6, ncol=4, loc="upper right")
    ax = axes[2]
    if r.queue_t_s:
        qx = [ti - 0.5 for ti in r.queue_t_s]
        for k in CLASSES:
            q = r.queue[QUEUE_OF[k]]
            c = colours[k]
            ax.plot(qx, [max(v, 0.01) for v in q["mean"]], color=c, ls="-", lw=1.2, label=f"{k} mean")
            ax.plot(qx, [max(v, 0.01) for v in q["p90"]], color=c, ls="--", lw=1, label=f"{k} p90")
            ax.plot(qx, [max(v, 0.01) for v in q["max"]], color=c, ls=":", lw=1, label=f"{k} max")
        ax.set_yscale("log")
        ax.legend(fontsize=7, ncol=3, loc="upper right")
    else:
        ax.text(0.5, 0.5, "no per-queue statistics in emulator/intervals.csv", ha="center", transform=ax.transAxes)
    ax.set_ylabel("queue delay (ms)")
    ax.set_xlabel("time (s)")
    for a in axes:
        for p in r.phases[1:]:
            a.axvline(p.start_s, color="0.85", lw=0.8, zorder=0)
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{r.scenario}.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def main(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run folders (…/run-01-seed-1)")
    ap.add_argument("--out", type=Path, default=Path("docs/l4s"), help="folder for the PNG plots")
    ap.add_argument("--md", type=Path, help="also write the tables to this markdown file")
    ap.add_argument("--json", type=Path, help="also write the phase results as JSON")
    a = ap.parse_args(argv)
    results = []
    for run in a.runs:
        if not (run / "summary.json").is_file():
            print(f"report.py: {run}: no summary.json (not a finished run folder)", file=sys.stderr)
            return 2
        r = analyse(run)
        results.append(r)
        print(plot(r, a.out), file=sys.stderr)
    text = markdown(results)
    print(text)
    if a.md:
        a.md.parent.mkdir(parents=True, exist_ok=True)
        a.md.write_text(text)
    if a.json:
        a.json.write_text(json.dumps([{"scenario": r.scenario, "run": str(r.run_dir), "phases": [
            {"start_s": p.start_s, "end_s": p.end_s, "counts": p.counts, "per_flow_mbps": p.per_flow_mbps,
             "class_mbps": p.class_mbps, "lc_ratio": p.lc_ratio, "jain": p.jain, "utilisation": p.utilisation,
             "delay_ms": p.delay_ms, "marks_pct": p.marks_pct, "drops_pct": p.drops_pct,
             "group_per_flow_mbps": p.group_per_flow_mbps, "flow_mbps": p.flow_mbps,
             "cca_per_flow_mbps": p.cca_per_flow_mbps, "policy_per_flow_mbps": p.policy_per_flow_mbps,
             "gold_silver": p.gold_silver}
            for p in r.phases], "queue": r.queue_kind} for r in results], indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
