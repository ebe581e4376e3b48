"""Paper 004 side by side: issue 13's targets for VDQ-CSAQM, evaluated on the cells of :mod:`.p004_cells`,
with DualPI2's value beside each (the list is in :mod:`.p004`'s docstring)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ccswitch.testbed.l4s.make_scenarios import QUEUES
from ccswitch.testbed.l4s.p004_cells import Cell, c_mean, cells_of, l_max, l_mean, max_class_share
from ccswitch.testbed.l4s.report_tables import ratio_text

L_MEAN_MS, L_MAX_MS, MANY_FLOWS = 1.0, 2.0, 8
SOLO_UTIL = 0.80
LC_BAND = (0.25, 4.0)
JAIN_MARGIN = 0.1
GOLD_SILVER, GOLD_SILVER_TOL = 4.0, 0.25
FAIR_MAX = 2.0


@dataclass
class Target:
    name: str
    paper: str
    dualpi2: str
    vdq: str
    met: bool | None
    """None: not measured (no runs)."""


def _range(xs: Sequence[float], nd: int = 2, unit: str = "") -> str:
    xs = [x for x in xs if x == x]
    if not xs:
        return "not run"
    lo, hi = min(xs), max(xs)
    return f"{lo:.{nd}f}{unit}" if abs(hi - lo) < 10 ** -nd else f"{lo:.{nd}f}-{hi:.{nd}f}{unit}"


def has_l(c: Cell) -> bool:
    return c.phases[0].counts["L4S"] > 0


def many(c: Cell) -> bool:
    return has_l(c) and c.flows >= MANY_FLOWS


def one_one(c: Cell) -> bool:
    return c.label == "1-1"


def pair_only(c: Cell) -> bool:
    return c.flows == 2


def dyn(t: str) -> bool:
    return t.startswith("l4s-dyn-")


def targets(cells: dict[tuple[str, str], list[Cell]]) -> list[Target]:
    out: list[Target] = []

    def per_seed(queue: str, pick: Callable[[str], bool], cond: Callable[[Cell], bool],
                 get: Callable[[Any], float]) -> list[float]:
        return [get(p) for c in cells_of(cells, queue, pick) if cond(c) for p in c.phases]

    # 1. L-queue mean < 1 ms in every phase
    vals = {q: per_seed(q, lambda t: True, has_l, l_mean) for q in QUEUES}
    out.append(Target("L-queue mean < 1 ms in every phase", "VDQ: \"sub-millisecond\" mean (fig. 3); DualPI2 "
                      "slightly lower", _range(vals["dualpi2"], 2, " ms"), _range(vals["vdq_csaqm"], 2, " ms"),
                      max(vals["vdq_csaqm"]) < L_MEAN_MS if vals["vdq_csaqm"] else None))
    # 2. L-queue max <= 2 ms with >= 8 flows
    vals = {q: per_seed(q, lambda t: True, many, l_max) for q in QUEUES}
    out.append(Target(f"L-queue max <= 2 ms in phases with >= {MANY_FLOWS} flows",
                      "VDQ: max \"below 1-2 ms\" as flows increase", _range(vals["dualpi2"], 1, " ms"),
                      _range(vals["vdq_csaqm"], 1, " ms"),
                      max(vals["vdq_csaqm"]) <= L_MAX_MS if vals["vdq_csaqm"] else None))
    # 3. C-queue mean no higher than DualPI2's (per template and phase, seed means)
    pairs = []
    for (t, q), cs in cells.items():
        if q != "vdq_csaqm" or (t, "dualpi2") not in cells:
            continue
        dp = {c.slot: c for c in cells[(t, "dualpi2")]}
        for c in cs:
            if c.phases[0].counts["Classic"] and c.slot in dp:
                pairs.append((c.stat(c_mean).mean, dp[c.slot].stat(c_mean).mean))
    ok = sum(1 for v, d in pairs if v <= d)
    out.append(Target("C-queue mean no higher than DualPI2's (per template and phase)",
                      "DualPI2 ~15 ms (its target); VDQ lower, falling as flows increase",
                      _range([d for _, d in pairs], 1, " ms"),
                      _range([v for v, _ in pairs], 1, " ms") + (f"; not higher in {ok} of {len(pairs)}"
                                                                   if pairs else ""),
                      ok == len(pairs) if pairs else None))
    # 4. one L4S flow alone >= 80 % utilisation
    solo = {q: per_seed(q, lambda t: t == "l4s-solo-prague", lambda c: True, lambda p: 100 * p.utilisation)
            for q in QUEUES}
    out.append(Target("one L4S flow alone >= 80 % utilisation", "VDQ 80 % (0.8 of 1 Gbit/s, DCTCP); DualPI2 ~30 %",
                      _range(solo["dualpi2"], 0, " %"), _range(solo["vdq_csaqm"], 0, " %"),
                      min(solo["vdq_csaqm"]) >= 100 * SOLO_UTIL if solo["vdq_csaqm"] else None))
    # 5. 1-1 L:C within [1:4, 4:1]
    lc = {q: per_seed(q, dyn, one_one, lambda p: p.lc_ratio) for q in QUEUES}

    def lc_range(xs: list[float]) -> str:
        xs = [x for x in xs if x == x]
        return f"{ratio_text(min(xs))} to {ratio_text(max(xs))}" if xs else "not run"

    out.append(Target("1-1 L:C within [1:4, 4:1] (dyn, cubic/bbr/pcc)",
                      "VDQ 4:1 (DCTCP), 7:3 (BBRv2 as L4S); DualPI2 1:6, 9:1", lc_range(lc["dualpi2"]),
                      lc_range(lc["vdq_csaqm"]),
                      all(LC_BAND[0] <= x <= LC_BAND[1] for x in lc["vdq_csaqm"]) if lc["vdq_csaqm"] else None))
    # 6. RTT mix Jain >= DualPI2's + 0.1 in every phase
    diffs, jv, jd = [], [], []
    for (t, q), cs in cells.items():
        if q != "vdq_csaqm" or not t.startswith("l4s-rttmix-") or (t, "dualpi2") not in cells:
            continue
        dp = {c.slot: c for c in cells[(t, "dualpi2")]}
        for c in cs:
            if c.slot in dp:
                v, d = c.stat(lambda p: p.jain).mean, dp[c.slot].stat(lambda p: p.jain).mean
                diffs.append(v - d)
                jv.append(v)
                jd.append(d)
    ok = sum(1 for x in diffs if x >= JAIN_MARGIN - 1e-9)
    out.append(Target("RTT mix Jain >= DualPI2's + 0.1 in every phase", "VDQ \"better but not perfect\" fairness; "
                      "DualPI2 \"cannot handle\" the RTT mix (figures only)", _range(jd),
                      _range(jv) + (f"; +{min(diffs):.2f} to +{max(diffs):.2f}".replace("+-", "-") if diffs else "")
                      + (f"; met in {ok} of {len(diffs)}" if diffs else ""), ok == len(diffs) if diffs else None))
    # 7. Gold:Silver 1:4 within 25 %
    gs = per_seed("vdq_csaqm", lambda t: t == "l4s-goldsilver-cubic-prague", pair_only, lambda p: p.gold_silver)
    lo, hi = GOLD_SILVER * (1 - GOLD_SILVER_TOL), GOLD_SILVER * (1 + GOLD_SILVER_TOL)
    out.append(Target("Gold:Silver 1:4 within 25 % (one Gold + one Silver flow)", "\"realized well\", larger "
                      "deviation with few flows (figs. 5-6)", "n/a (no policies)",
                      (f"{_range(gs, 2)}:1 (Gold:Silver)" if gs else "not run"),
                      all(lo <= x <= hi for x in gs) if gs else None))
    # 8. no class above 2x its fair share with mixed CCAs
    mixed: dict[str, list[float]] = {}
    for q in QUEUES:
        mixed[q] = (per_seed(q, lambda t: t == "l4s-ccmix-vs-prague", lambda c: True,
                             lambda p: max_class_share(p, True))
                    + per_seed(q, dyn, lambda c: c.phases[0].counts["L4S"] and c.phases[0].counts["Classic"],
                               lambda p: max_class_share(p, False)))
    out.append(Target("no class above 2x its fair share with mixed CCAs (ccmix per CCA, dyn L4S/Classic)",
                      "VDQ \"reasonable fairness\"; DualPI2 L4S BBR up to 10x (figs. 7-8)",
                      "max " + _range([max(mixed['dualpi2'])] if mixed['dualpi2'] else [], 2, "x"),
                      "max " + _range([max(mixed['vdq_csaqm'])] if mixed['vdq_csaqm'] else [], 2, "x"),
                      max(mixed["vdq_csaqm"]) <= FAIR_MAX if mixed["vdq_csaqm"] else None))
    return out
