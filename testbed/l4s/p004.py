"""Paper 004 side by side: VDQ-CSAQM beside DualPI2 on the L4S templates, seeds aggregated, the issue's targets.

Input: the seed folders ``run_experiments.py --seeds`` writes (``RESULTS/<scenario>/seed-<s>/run-*``) for
each template in :data:`TEMPLATES`, once with DualPI2 (``<name>``) and once with VDQ-CSAQM (``<name>-vdq``;
make_scenarios.py).  Each run is read by report.py (per-phase goodput, L:C, Jain, per-class queue delay from
linkemu's per-class statistics, which vdq_csaqm fills for its L4S and Classic FIFOs as DualPI2 does).

Phases are matched across seeds by their nominal 20 s slot (a loaded VM starts flows late; report.py places
every flow at its actual start, and a phase's slot is where its middle falls).  Per phase and queue: the mean
over seeds, with the seeds' min-max.

Targets (issue 13), each for VDQ-CSAQM, DualPI2's value beside it:

* L-queue mean < 1 ms in every phase (every seed);
* L-queue max <= 2 ms in phases with >= 8 flows (every seed; the max of linkemu's per-interval maxima);
* C-queue mean no higher than DualPI2's (per template and phase, means over seeds);
* one L4S flow alone >= 80 % utilisation (``l4s-solo-prague``, every seed);
* 1-1 L:C within [1:4, 4:1] (the ``dyn`` templates' 1-1 phase, every seed);
* RTT mix Jain >= DualPI2's + 0.1 in every phase (means over seeds);
* Gold:Silver 1:4 within 25 % (``goldsilver``'s phases with one Gold and one Silver flow, every seed);
* no class above 2x its fair share with mixed CCAs (per-CCA per-flow goodput / fair share in ``ccmix``
  and the L4S / Classic classes of ``dyn``; every seed).

    .venv/bin/python testbed/l4s/p004.py --results results/p004 --md docs/l4s/p004.md --plots docs/l4s
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PHASE_S = 20.0
QUEUES = ("dualpi2", "vdq_csaqm")
QUEUE_SUFFIX = {"dualpi2": "", "vdq_csaqm": "-vdq"}
QUEUE_LABEL = {"dualpi2": "DualPI2", "vdq_csaqm": "VDQ-CSAQM"}
TEMPLATES = (
    "l4s-dyn-cubic-vs-prague", "l4s-dyn-bbr-vs-prague", "l4s-dyn-pcc-vs-prague",
    "l4s-rttmix-cubic-vs-prague", "l4s-rttmix-bbr-vs-prague", "l4s-rttmix-pcc-vs-prague",
    "l4s-ccmix-vs-prague", "l4s-solo-prague", "l4s-goldsilver-cubic-prague",
)
VDQ_ONLY = ("l4s-goldsilver-cubic-prague",)
L_MEAN_MS, L_MAX_MS, MANY_FLOWS = 1.0, 2.0, 8
SOLO_UTIL = 0.80
LC_BAND = (0.25, 4.0)
JAIN_MARGIN = 0.1
GOLD_SILVER, GOLD_SILVER_TOL = 4.0, 0.25
FAIR_MAX = 2.0


def _report_module():
    name = "l4s_report"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, HERE / "report.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def scenario_name(template: str, queue: str) -> str:
    return template + QUEUE_SUFFIX[queue]


def seed_runs(results: Path, scenario: str) -> list[tuple[int, Path]]:
    """(seed, finished run folder) under RESULTS/<scenario>/seed-<s>/, by seed."""
    out = []
    for d in sorted((results / scenario).glob("seed-*")):
        run = next((r for r in sorted(d.glob("run-*")) if (r / "summary.json").is_file()), None)
        if run is not None:
            out.append((int(d.name.split("-", 1)[1]), run))
    return sorted(out)


def phase_slot(p: Any) -> int:
    """The nominal 20 s phase a measured phase belongs to (where its middle falls)."""
    return int(((p.start_s + p.end_s) / 2) // PHASE_S)


def slots(run: Any) -> dict[int, Any]:
    """A run's phases by nominal slot (the longest one if a late flow split a slot)."""
    out: dict[int, Any] = {}
    for p in run.phases:
        k = phase_slot(p)
        if k not in out or p.end_s - p.start_s > out[k].end_s - out[k].start_s:
            out[k] = p
    return out


@dataclass
class Stat:
    mean: float
    lo: float
    hi: float
    n: int

    @classmethod
    def of(cls, xs: Sequence[float]) -> Stat:
        xs = [x for x in xs if x == x]
        if not xs:
            return cls(math.nan, math.nan, math.nan, 0)
        return cls(sum(xs) / len(xs), min(xs), max(xs), len(xs))


@dataclass
class Cell:
    """One template, queue and nominal phase: the per-seed phase results."""

    template: str
    queue: str
    slot: int
    label: str
    phases: list[Any]

    def stat(self, get: Callable[[Any], float]) -> Stat:
        return Stat.of([get(p) for p in self.phases])

    @property
    def flows(self) -> int:
        p = self.phases[0]
        return p.counts["L4S"] + p.counts["Classic"]


def l_mean(p: Any) -> float:
    return p.delay_ms.get("L4S", {}).get("mean", math.nan)


def l_max(p: Any) -> float:
    return p.delay_ms.get("L4S", {}).get("max", math.nan)


def c_mean(p: Any) -> float:
    return p.delay_ms.get("Classic", {}).get("mean", math.nan)


def max_class_share(p: Any, by_cca: bool) -> float:
    """The largest per-flow goodput of a class (a CCA, or L4S / Classic) over the phase's fair share."""
    vals = p.cca_per_flow_mbps.values() if by_cca else [p.per_flow_mbps[k] for k in ("L4S", "Classic")
                                                         if p.counts[k]]
    vals = [v for v in vals if v == v]
    return max(vals) / p.fair_mbps if vals and p.fair_mbps > 0 else math.nan


def collect(results: Path) -> tuple[dict[tuple[str, str], list[Cell]], dict[str, list[dict[str, Any]]]]:
    """Cells per (template, queue), ordered by slot; and each scenario's run.json records."""
    rep = _report_module()
    cells: dict[tuple[str, str], list[Cell]] = {}
    meta: dict[str, list[dict[str, Any]]] = {}
    for t in TEMPLATES:
        for q in QUEUES:
            if q == "dualpi2" and t in VDQ_ONLY:
                continue
            name = scenario_name(t, q)
            runs = seed_runs(results, name)
            if not runs:
                continue
            by_slot: dict[int, list[Any]] = {}
            for seed, run_dir in runs:
                r = rep.analyse(run_dir)
                for k, p in slots(r).items():
                    by_slot.setdefault(k, []).append(p)
                info = run_dir.parent / "run.json"
                rec: dict[str, Any] = {"seed": seed, "run": str(run_dir)}
                if info.is_file():
                    rec |= json.loads(info.read_text())
                meta.setdefault(name, []).append(rec)
            cells[(t, q)] = [Cell(t, q, k, ps[0].label, ps) for k, ps in sorted(by_slot.items())]
    return cells, meta


@dataclass
class Target:
    name: str
    paper: str
    dualpi2: str
    vdq: str
    met: bool | None
    """None: not measured (no runs)."""


def _fmt(x: float, nd: int = 2) -> str:
    return "-" if x != x else f"{x:.{nd}f}"


def _range(xs: Sequence[float], nd: int = 2, unit: str = "") -> str:
    xs = [x for x in xs if x == x]
    if not xs:
        return "not run"
    lo, hi = min(xs), max(xs)
    return f"{lo:.{nd}f}{unit}" if abs(hi - lo) < 10 ** -nd else f"{lo:.{nd}f}-{hi:.{nd}f}{unit}"


def ratio_text(r: float) -> str:
    if r != r or r <= 0:
        return "-"
    return f"1:{1 / r:.1f}" if r < 1 else f"{r:.1f}:1"


def _all(cells: dict[tuple[str, str], list[Cell]], queue: str, pick: Callable[[str], bool] = lambda t: True
         ) -> list[Cell]:
    return [c for (t, q), cs in cells.items() if q == queue and pick(t) for c in cs]


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
        return [get(p) for c in _all(cells, queue, pick) if cond(c) for p in c.phases]

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


def _cell_text(c: Cell | None, get: Callable[[Any], float], nd: int, ratio: bool = False) -> str:
    if c is None:
        return "-"
    s = c.stat(get)
    if s.n == 0:
        return "-"
    if ratio:
        return ratio_text(s.mean) + (f" ({ratio_text(s.lo)} to {ratio_text(s.hi)})" if s.n > 1 else "")
    return f"{s.mean:.{nd}f}" + (f" ({s.lo:.{nd}f}-{s.hi:.{nd}f})" if s.n > 1 else "")


def markdown(cells: dict[tuple[str, str], list[Cell]], meta: dict[str, list[dict[str, Any]]],
             tg: list[Target]) -> str:
    lines = ["# Paper 004: VDQ-CSAQM beside DualPI2 (per phase, mean over seeds, seeds' min-max in brackets)", "",
             "Generated by testbed/l4s/p004.py from the seed folders of `run_experiments.py --seeds`.", "",
             "## Targets (issue 13)", "", "| target | paper 004 | DualPI2 here | VDQ-CSAQM here | VDQ met? |",
             "|---|---|---|---|---|"]
    for t in tg:
        verdict = "not run" if t.met is None else ("**met**" if t.met else "not met")
        lines.append(f"| {t.name} | {t.paper} | {t.dualpi2} | {t.vdq} | {verdict} |")
    lines += ["", "## Per phase", ""]
    for t in TEMPLATES:
        rows = {q: {c.slot: c for c in cells.get((t, q), [])} for q in QUEUES}
        slots_ = sorted(set(rows["dualpi2"]) | set(rows["vdq_csaqm"]))
        if not slots_:
            continue
        lines += [f"### {t}", "", "| phase | L-C flows | queue | seeds | L mean (ms) | L max (ms) | C mean (ms) | L:C "
                  "| Jain | util. (%) | max class / fair |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        by_cca = "ccmix" in t
        for k in slots_:
            for q in QUEUES:
                c = rows[q].get(k)
                if c is None:
                    continue
                lines.append(
                    f"| {k * PHASE_S:.0f}-{(k + 1) * PHASE_S:.0f} s | {c.label} | {QUEUE_LABEL[q]} | {len(c.phases)} | "
                    f"{_cell_text(c, l_mean, 2)} | {_cell_text(c, l_max, 1)} | {_cell_text(c, c_mean, 1)} | "
                    f"{_cell_text(c, lambda p: p.lc_ratio, 1, ratio=True)} | {_cell_text(c, lambda p: p.jain, 2)} | "
                    f"{_cell_text(c, lambda p: 100 * p.utilisation, 0)} | "
                    f"{_cell_text(c, lambda p, b=by_cca: max_class_share(p, b), 2)} |")
        extra = _group_rows(t, rows)
        if extra:
            lines += ["", *extra]
        lines.append("")
    lines += ["## Runs", "", "| scenario | seed | UTC start | UTC end | load avg (1 min) before / after |",
              "|---|---|---|---|---|"]
    for name, recs in sorted(meta.items()):
        for r in recs:
            lb, la = r.get("load_before", [math.nan])[0], r.get("load_after", [math.nan])[0]
            lines.append(f"| {name} | {r['seed']} | {r.get('utc_start', '-')} | {r.get('utc_end', '-')} | "
                         f"{_fmt(lb, 1)} / {_fmt(la, 1)} |")
    return "\n".join(lines) + "\n"


def _group_rows(t: str, rows: dict[str, dict[int, Cell]]) -> list[str]:
    """Per-group per-flow goodput: class+RTT (rttmix), CCA (ccmix), class+policy (goldsilver)."""
    if t.startswith("l4s-rttmix-"):
        attr, what = "group_per_flow_mbps", "class and RTT"
    elif t.startswith("l4s-ccmix"):
        attr, what = "cca_per_flow_mbps", "CCA"
    elif t.startswith("l4s-goldsilver"):
        attr, what = "policy_per_flow_mbps", "class and policy"
    else:
        return []
    groups = sorted({g for q in QUEUES for c in rows[q].values() for p in c.phases for g in getattr(p, attr)})
    extra = " | Gold:Silver" if attr == "policy_per_flow_mbps" else ""
    out = [f"Per-flow goodput (Mbit/s) by {what}, mean over seeds:", "",
           "| phase | queue | " + " | ".join(groups) + f" | fair share{extra} |",
           "|---|---|" + "---|" * (len(groups) + 1 + bool(extra))]
    for k in sorted(set(rows["dualpi2"]) | set(rows["vdq_csaqm"])):
        for q in QUEUES:
            c = rows[q].get(k)
            if c is None:
                continue
            vals = [_fmt(c.stat(lambda p, g=g: getattr(p, attr).get(g, math.nan)).mean, 1) for g in groups]
            gs = f" | {_cell_text(c, lambda p: p.gold_silver, 2)}" if extra else ""
            out.append(f"| {k * PHASE_S:.0f}-{(k + 1) * PHASE_S:.0f} s | {QUEUE_LABEL[q]} | " + " | ".join(vals)
                       + f" | {_fmt(c.stat(lambda p: p.fair_mbps).mean, 1)}{gs} |")
    return out


def plot(cells: dict[tuple[str, str], list[Cell]], out: Path) -> Path:
    """Bars per template phase, DualPI2 beside VDQ-CSAQM, mean over seeds with min-max error bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    order = [t for t in TEMPLATES if t not in VDQ_ONLY and any((t, q) in cells for q in QUEUES)]
    xs: list[tuple[str, int, str]] = []
    for t in order:
        slots_ = sorted({c.slot for q in QUEUES for c in cells.get((t, q), [])})
        for k in slots_:
            c = next(c for q in QUEUES for c in cells.get((t, q), []) if c.slot == k)
            xs.append((t, k, c.label))
    panels = [("L queue delay mean (ms)", l_mean, "log", [(L_MEAN_MS, "target < 1 ms")], None),
              ("C queue delay mean (ms)", c_mean, "linear", [], None),
              ("L:C per-flow goodput", lambda p: p.lc_ratio, "log", [(0.25, "1:4"), (4.0, "4:1"), (1.0, None)], None),
              ("Jain's index", lambda p: p.jain, "linear", [], (0.4, 1.02)),
              ("utilisation (%)", lambda p: 100 * p.utilisation, "linear", [(100 * SOLO_UTIL, "80 %")], (40, 105))]
    fig, axes = plt.subplots(len(panels), 1, figsize=(max(12, 0.42 * len(xs) + 2), 2.3 * len(panels) + 1),
                             sharex=True)
    colours = {"dualpi2": "tab:blue", "vdq_csaqm": "tab:orange"}
    w = 0.4
    for ax, (title, get, scale, lines, ylim) in zip(axes, panels, strict=True):
        for j, q in enumerate(QUEUES):
            by = {(c.template, c.slot): c for c in _all(cells, q)}
            means, err_lo, err_hi, pos = [], [], [], []
            for i, (t, k, _) in enumerate(xs):
                c = by.get((t, k))
                s = c.stat(get) if c is not None else None
                if s is None or s.n == 0:
                    continue
                pos.append(i + (j - 0.5) * w)
                means.append(s.mean)
                err_lo.append(s.mean - s.lo)
                err_hi.append(s.hi - s.mean)
            ax.bar(pos, means, w, color=colours[q], label=QUEUE_LABEL[q], yerr=[err_lo, err_hi], capsize=2,
                   error_kw={"lw": 0.8})
        for y, lab in lines:
            ax.axhline(y, color="grey", ls=":", lw=1)
            if lab:
                ax.text(-0.6, y, lab, fontsize=7, va="bottom", ha="left", color="dimgrey")
        ax.set_yscale(scale)
        if scale == "log":
            from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

            if "L:C" in title:
                ticks = [0.125, 0.25, 0.5, 1.0, 2.0, 4.0]
                ax.yaxis.set_major_locator(FixedLocator(ticks))
                ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: ratio_text(v).replace(".0", "")))
                ax.set_ylim(0.08, 5.0)
            else:
                ax.yaxis.set_major_locator(FixedLocator([0.1, 0.2, 0.5, 1.0, 2.0]))
                ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
                ax.set_ylim(0.1, 2.0)
            ax.yaxis.set_minor_locator(NullLocator())
        if ylim:
            ax.set_ylim(*ylim)
        ax.set_ylabel(title, fontsize=8)
        ax.grid(axis="y", alpha=0.3)
        prev = None
        for i, (t, _, _) in enumerate(xs):
            if prev is not None and t != prev:
                ax.axvline(i - 0.5, color="0.6", lw=0.8)
            prev = t
    for t in order:  # template names above its phases
        idx = [i for i, (tt, _, _) in enumerate(xs) if tt == t]
        short = t.removeprefix("l4s-").removesuffix("-vs-prague").replace("-prague", "")
        axes[0].text((idx[0] + idx[-1]) / 2, 1.02, short, transform=axes[0].get_xaxis_transform(), ha="center",
                     va="bottom", fontsize=8)
    axes[0].legend(fontsize=8, loc="upper right", ncol=2)
    axes[-1].set_xticks(range(len(xs)))
    axes[-1].set_xticklabels([lab for _, _, lab in xs], fontsize=7)
    axes[-1].set_xlabel("phase: L4S-Classic flows", fontsize=8)
    fig.suptitle("Paper 004 templates at 50 Mbit/s, 5 ms base RTT: DualPI2 vs VDQ-CSAQM per phase, mean over "
                 "seeds, error bars min-max", fontsize=10)
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    path = out / "p004-side-by-side.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def main(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--results", type=Path, default=Path("results/p004"))
    ap.add_argument("--md", type=Path, help="write the tables here (default: RESULTS/p004.md)")
    ap.add_argument("--plots", type=Path, help="folder for p004-side-by-side.png and the seed-1 VDQ run plots")
    ap.add_argument("--run-plots", nargs="*", default=[], help="scenario names whose first seed gets report.py's plot")
    a = ap.parse_args(argv)
    cells, meta = collect(a.results)
    if not cells:
        print(f"p004.py: no finished runs under {a.results}", file=sys.stderr)
        return 1
    tg = targets(cells)
    text = markdown(cells, meta, tg)
    md = a.md or a.results / "p004.md"
    md.parent.mkdir(parents=True, exist_ok=True)
    md.write_text(text)
    print(text)
    if a.plots:
        print(plot(cells, a.plots), file=sys.stderr)
        rep = _report_module()
        for name in a.run_plots:
            runs = seed_runs(a.results, name)
            if runs:
                print(rep.plot(rep.analyse(runs[0][1]), a.plots), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
