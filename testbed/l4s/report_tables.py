"""The L4S report's Markdown: the whole-run table of linkemu's per-class statistics (DualPI2, VDQ-CSAQM) and,
per run, the per-phase table with its per-group, per-policy, per-CCA and ccswitchd lines.

Reads :class:`~.report_model.RunResult` s (:func:`.report_phases.analyse`); numbers are written with
:func:`ccswitch.tables.num` ("-" for NaN).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from ccswitch.tables import num
from ccswitch.testbed.l4s.report_model import CLASSES, PhaseResult, RunResult


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
    return " / ".join(num(s[k] / 1000, 2 if k != "max" else 1) for k in ("mean", "p90", "p99", "max"))


def _pct(n: float, d: float) -> str:
    return num(100 * n / d, 1) + " %" if d else "-"


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
            return f"{num(c.get('ctv_mean', math.nan), 0)} / {num(float(c.get('ctv_max', math.nan)), 0)}"

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
                     f"{num(q.get('p_prime_mean', math.nan), 3)} / {num(q.get('p_prime_max', math.nan), 3)} | "
                     f"{q.get('overload_updates', '-')} | {q.get('l4s_native_marks', '-')} / "
                     f"{q.get('l4s_coupled_marks', '-')} |")
    return lines if len(lines) > 2 else []


def max_cca_share(p: PhaseResult) -> float:
    """The largest per-flow goodput of a CCA over the phase's fair share."""
    top = max((v for v in p.cca_per_flow_mbps.values() if v == v), default=math.nan)
    return top / p.fair_mbps if p.fair_mbps else math.nan


def group_table(phases: Sequence[PhaseResult], attr: str, what: str, tail_heads: Sequence[str],
                tail: Callable[[PhaseResult], Sequence[str]]) -> list[str]:
    """Per phase, the per-flow mean goodput of every group of the phases' *attr* (a dict of PhaseResult),
    then the *tail_heads* columns (*tail* of each phase)."""
    groups = sorted({g for p in phases for g in getattr(p, attr)})
    lines = ["", f"Per-flow mean goodput (Mbit/s) by {what}:", "",
             "| phase (s) | " + " | ".join([*groups, *tail_heads]) + " |",
             "|---|" + "---|" * (len(groups) + len(tail_heads))]
    for p in phases:
        lines.append(f"| {p.start_s:.0f}-{p.end_s:.0f} | "
                     + " | ".join([*(num(getattr(p, attr).get(g, math.nan), 1) for g in groups), *tail(p)]) + " |")
    return lines


def phase_table(phases: Sequence[PhaseResult]) -> list[str]:
    """One run's phases: per-class goodput, L:C, Jain, min share, utilisation, per-queue delay, marks, drops."""
    lines = ["| phase (s) | L-C flows | L4S per flow | Classic per flow | L:C | Jain | min share | util. "
             "| L delay mean / p90 / max (ms) | C delay mean / p90 / max (ms) | L marks | C marks / drops |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in phases:
        dl, dc = p.delay_ms.get("L4S", {}), p.delay_ms.get("Classic", {})
        lines.append(
            f"| {p.start_s:.0f}-{p.end_s:.0f} | {p.label} | {num(p.per_flow_mbps['L4S'], 1)} | "
            f"{num(p.per_flow_mbps['Classic'], 1)} | {ratio_text(p.lc_ratio)} | {num(p.jain, 2)} | "
            f"{min_share_text(p)} | "
            f"{num(100 * p.utilisation, 0)} % | {num(dl.get('mean', math.nan), 2)} / "
            f"{num(dl.get('p90', math.nan), 2)} / {num(dl.get('max', math.nan), 1)} | "
            f"{num(dc.get('mean', math.nan), 2)} / {num(dc.get('p90', math.nan), 2)} / "
            f"{num(dc.get('max', math.nan), 1)} | {num(p.marks_pct.get('L4S', math.nan), 1)} % | "
            f"{num(p.marks_pct.get('Classic', math.nan), 1)} / {num(p.drops_pct.get('Classic', math.nan), 1)} % |")
    return lines


def daemon_line(r: RunResult) -> str:
    """ccswitchd's switches and reverts in a run, and the classic flows' time per CCA."""
    sw = [e for e in r.daemon_events if e["action"] == "switch"]
    rv = [e for e in r.daemon_events if e["action"] == "revert"]
    total = sum(r.cca_seconds.values()) or 1.0
    by_time = sorted(r.cca_seconds.items(), key=lambda x: -x[1])
    share = ", ".join(f"{c} {100 * v / total:.0f} %" for c, v in by_time)
    return (f"ccswitchd on the classic client: {len(sw)} switches, {len(rv)} reverts; classic flow-time "
            f"by CCA: {share}.  Timeline: "
            + ", ".join(f"{e['t_s']:.0f} s {e['flow']} {e['from']}→{e['to']}"
                        + (" (revert)" if e["action"] == "revert" else "") for e in r.daemon_events))


def markdown(results: Sequence[RunResult]) -> str:
    lines = ["#### Whole runs (linkemu's per-class statistics)", ""]
    if dp := whole_run_table(results):
        lines += [*dp, ""]
    if vdq := vdq_whole_run_table(results):
        lines += ["VDQ-CSAQM (L = its L4S FIFO, C = its Classic FIFO; p', overload updates and native/coupled "
                  "marks are DualPI2's and do not exist here; CTVs coded 0..65535, higher = more is cut):", "",
                  *vdq, ""]
    for r in results:
        lines += [f"#### {r.scenario}", "", *phase_table(r.phases)]
        if any(len(p.group_per_flow_mbps) > 2 for p in r.phases):
            lines += group_table(r.phases, "group_per_flow_mbps", "class and RTT", ["fair share"],
                                 lambda p: [num(p.fair_mbps, 1)])
        if any(len(p.policy_per_flow_mbps) > len([c for c in CLASSES if p.counts[c]]) for p in r.phases):
            lines += group_table(r.phases, "policy_per_flow_mbps", "class and packet-value policy (vdq_csaqm)",
                                 ["Gold:Silver"], lambda p: [num(gold_silver(p), 2)])
        if any(len(p.cca_per_flow_mbps) > 2 for p in r.phases):
            lines += group_table(r.phases, "cca_per_flow_mbps", "CCA, and the largest per-flow / fair share",
                                 ["fair share", "max CCA / fair"],
                                 lambda p: [num(p.fair_mbps, 1), num(max_cca_share(p), 2)])
        if r.daemon:
            lines += ["", daemon_line(r)]
        lines.append("")
    return "\n".join(lines)
