"""Paper 000's Table 2 reproduction: what the runs say against the paper and the AQMs' targets: the ECN/no-ECN
ratios and their direction, the srtt claim (L4S + ECN below FQ-PIE + ECN), the queue-delay target verdicts and
the summary lines at the top of docs/l4s/table2.md.  Input: :func:`.table2_runs.load_runs`."""

from __future__ import annotations

import math
import statistics
from typing import Any

from ccswitch.testbed.l4s.table2_config import (
    AQMS,
    CONFIGS,
    LABEL,
    LATE_S,
    PAPER_MB,
    RATES,
    SAME_BAND,
    TARGET_MS,
    TOLERANCE_MS,
    UTIL_TARGET,
    Config,
    mean_of,
)


def ratio_verdict(ours: float, ours_lo: float, ours_hi: float, paper: float) -> tuple[str, str, str]:
    """(our direction, paper's direction, agree/differ).

    A ratio is "higher" above 1 + SAME_BAND, "lower" below 1 - SAME_BAND, otherwise "same"; ours is
    "same" also when its seeds' range (lo..hi) straddles the band (the seeds disagree on the sign).
    """
    def direction(r: float, lo: float, hi: float) -> str:
        if r != r:
            return "-"
        if lo > 1 + SAME_BAND:
            return "higher"
        if hi < 1 - SAME_BAND:
            return "lower"
        return "same"

    mine, theirs = direction(ours, ours_lo, ours_hi), direction(paper, paper, paper)
    if mine == "-":
        return mine, theirs, "-"
    return mine, theirs, "agree" if mine == theirs else "differ"


def target_verdict(aqm: str, mean_ms: float) -> str:
    tol = TOLERANCE_MS[aqm]
    if mean_ms != mean_ms:
        return "-"
    if tol is None:
        return f"{mean_ms - TARGET_MS[aqm]:+.1f} ms"
    return "yes" if abs(mean_ms - TARGET_MS[aqm]) <= tol else "no"


def ecn_ratios(runs: dict[Config, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per AQM and rate: the ECN/no-ECN ratio of the total data, ours (mean, per-seed range) and the paper's."""
    out = []
    for aqm in AQMS:
        for rate in RATES:
            p_off, p_on = PAPER_MB[(aqm, rate)]
            off = {r["seed"]: r["total_in_mb"] for r in runs[Config(aqm, rate, False)]}
            on = {r["seed"]: r["total_in_mb"] for r in runs[Config(aqm, rate, True)]}
            pairs = [on[s] / off[s] for s in sorted(set(on) & set(off))]
            ours = mean_of(list(on.values())) / mean_of(list(off.values())) if on and off else math.nan
            lo, hi = (min(pairs), max(pairs)) if pairs else (ours, ours)
            mine, theirs, verdict = ratio_verdict(ours, lo, hi, p_on / p_off)
            d_off = [r["out_0_90_mb"] for r in runs[Config(aqm, rate, False)]]
            d_on = [r["out_0_90_mb"] for r in runs[Config(aqm, rate, True)]]
            late = any(r["late_s"] for e in (False, True) for r in runs[Config(aqm, rate, e)])
            out.append({"aqm": aqm, "rate": rate, "paper": p_on / p_off, "ours": ours, "lo": lo, "hi": hi,
                        "n": len(pairs), "ours_dir": mine, "theirs_dir": theirs, "verdict": verdict,
                        "delivered": mean_of(d_on) / mean_of(d_off) if d_on and d_off else math.nan, "late": late})
    return out


def srtt_claim(runs: dict[Config, list[dict[str, Any]]]) -> tuple[list[tuple[Any, ...]], list[str]]:
    """Rows (rate, seed, L4S srtt, FQ-PIE srtt, their queue delays), both with ECN; one verdict line per rate."""
    rows, verdicts = [], []
    for rate in RATES:
        l4 = {r["seed"]: r for r in runs[Config("l4s", rate, True)]}
        fq = {r["seed"]: r for r in runs[Config("fq_pie", rate, True)]}
        common = sorted(set(l4) & set(fq))
        rows += [(rate, s, l4[s]["srtt_ms"], fq[s]["srtt_ms"], l4[s]["qdelay_mean_ms"], fq[s]["qdelay_mean_ms"])
                 for s in common]
        fp = {s: r["srtt_ms"] for s, r in fq.items()}
        l4 = {s: r["srtt_ms"] for s, r in l4.items()}
        if common:
            diffs = [l4[s] - fp[s] for s in common]
            if all(d < -1.0 for d in diffs):
                v = "holds (L4S lower in every seed, by more than 1 ms)"
            elif all(d > 1.0 for d in diffs):
                v = "does not hold: L4S higher in every seed"
            else:
                v = "does not hold: within 1 ms or the seeds disagree"
            verdicts.append(f"{rate} Mbit/s: {v} (mean difference {statistics.fmean(diffs):+.1f} ms, "
                            f"{len(common)} seed(s))")
    return rows, verdicts


def summary_lines(runs: dict[Config, list[dict[str, Any]]]) -> list[str]:
    """The headline: utilisation, delay targets, ECN ratios, the srtt claim, late starts (only what was run)."""
    have = [c for c in CONFIGS if runs[c]]
    out = []
    if not have:
        return ["no finished run"]
    ok = [c for c in have if all(r["util"] >= UTIL_TARGET for r in runs[c])]
    worst = min((r for c in have for r in runs[c]), key=lambda r: r["util"])
    out.append(f"Utilisation >= 90 % in every seed: {len(ok)} of {len(have)} configurations run (lowest: "
               f"{100 * worst['util']:.1f} %, {worst['config'].title}, seed {worst['seed']}).")
    for rate in RATES:
        parts = []
        for aqm in AQMS:
            rs = [r for e in (False, True) for r in runs[Config(aqm, rate, e)]]
            if rs:
                m = [r["qdelay_mean_ms"] for r in rs]
                parts.append(f"{LABEL[aqm]} {min(m):.1f}-{max(m):.1f}")
        if parts:
            out.append(f"Mean queue delay at {rate} Mbit/s (ms, range over ECN on/off and seeds; targets CoDel and "
                       f"FQ-CoDel 5, PIE, FQ-PIE, DualPI2 15 ± 3): " + ", ".join(parts) + ".")
    for aqm in ("codel", "fq_codel"):
        parts = []
        for rate in RATES:
            v = [r["standing_ms"] for e in (False, True) for r in runs[Config(aqm, rate, e)]]
            v = [x for x in v if x == x]
            if v:
                parts.append(f"{min(v):.1f}-{max(v):.1f} ms at {rate} Mbit/s")
        if parts:
            out.append(f"{LABEL[aqm]} standing queue (smallest sojourn per 100 ms, averaged; what CoDel's 5 ms target "
                       f"bounds{', over all flow queues together' if aqm == 'fq_codel' else ''}): "
                       + ", ".join(parts) + " (a 1500-byte packet takes 1.2 ms at 10 Mbit/s, 12 ms at 1 Mbit/s).")
    pie_like = [c for c in have if TOLERANCE_MS[c.aqm] is not None]
    on_t = [c for c in pie_like if target_verdict(c.aqm, mean_of([r["qdelay_mean_ms"] for r in runs[c]])) == "yes"]
    if pie_like:
        outside = [c.title for c in pie_like if c not in on_t]
        out.append(f"PIE-family (PIE, FQ-PIE, DualPI2 Classic) mean queue delay within 15 ± 3 ms: {len(on_t)} of "
                   f"{len(pie_like)} configurations" + (f" (outside: {', '.join(outside)})." if outside else "."))
    ratios = [x for x in ecn_ratios(runs) if x["verdict"] != "-"]
    if ratios:
        out.append(f"ECN/no-ECN ratio of the total data: ours {min(x['ours'] for x in ratios):.3f}-"
                   f"{max(x['ours'] for x in ratios):.3f} (paper {min(x['paper'] for x in ratios):.3f}-"
                   f"{max(x['paper'] for x in ratios):.3f}); direction agrees with the paper for "
                   f"{sum(x['verdict'] == 'agree' for x in ratios)} of {len(ratios)} AQM/rate pairs.")
    _, verdicts = srtt_claim(runs)
    if verdicts:
        out.append("L4S + ECN srtt lower than FQ-PIE + ECN (the paper's claim): " + "; ".join(verdicts) + ".")
    parts = []
    for rate in RATES:
        off = [r["srtt_ms"] for r in runs[Config("l4s", rate, False)]]
        on = [r["srtt_ms"] for r in runs[Config("l4s", rate, True)]]
        if off and on:
            parts.append(f"{rate} Mbit/s {mean_of(off):.1f} ms off, {mean_of(on):.1f} ms on")
    if parts:
        out.append("L4S (DualPI2) srtt without / with ECN (the paper reports a reduction with ECN): "
                   + "; ".join(parts) + ".")
    lates = [(c, r) for c in have for r in runs[c] if r["late_s"]]
    if lates:
        out.append(f"{len(lates)} run(s) had a flow start more than {LATE_S:g} s late because the AQM dropped its "
                   "SYNs (below, \"Late starts\").")
    return out


