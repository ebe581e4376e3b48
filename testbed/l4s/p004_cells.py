"""Paper 004's seed folders as cells: per template, router queue and nominal 20 s phase, the phases of every seed.

Input: the seed folders ``run_experiments.py --seeds`` writes (``RESULTS/<scenario>/seed-<s>/run-*``) for each
template in :data:`TEMPLATES`, once with DualPI2 (``<name>``) and once with VDQ-CSAQM (``<name>-vdq``).  Each
run is read by :func:`.report_phases.analyse`; phases are matched across seeds by their nominal slot (a loaded
VM starts flows late; the report places every flow at its actual start, and a phase's slot is where its middle
falls).  A :class:`Cell`'s :class:`Stat` is the mean over seeds with the seeds' min-max.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ccswitch.testbed.l4s.make_scenarios import PHASE_S, QUEUES, STEADY_SUFFIX, scenario_name
from ccswitch.testbed.l4s.report_phases import analyse

TEMPLATES = (
    "l4s-dyn-cubic-vs-prague", "l4s-dyn-bbr-vs-prague", "l4s-dyn-pcc-vs-prague",
    "l4s-rttmix-cubic-vs-prague", "l4s-rttmix-bbr-vs-prague", "l4s-rttmix-pcc-vs-prague",
    "l4s-ccmix-vs-prague", "l4s-solo-prague", "l4s-goldsilver-cubic-prague",
)
VDQ_ONLY = ("l4s-goldsilver-cubic-prague",)
VDQ_ONLY_SUFFIXES = (STEADY_SUFFIX,)
"""Variant suffixes only VDQ-CSAQM has (``-steady``: its CTV rule); DualPI2's side reads the variant without them."""


def queue_variant(variant: str, queue: str) -> str:
    """The suffix *queue*'s files carry for *variant*: ``-rtt40-steady`` is ``-rtt40`` for DualPI2."""
    if queue == "dualpi2":
        for s in VDQ_ONLY_SUFFIXES:
            variant = variant.replace(s, "")
    return variant


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


def collect(results: Path, variant: str = "") -> tuple[dict[tuple[str, str], list[Cell]],
                                                      dict[str, list[dict[str, Any]]]]:
    """Cells per (template, queue), ordered by slot; and each scenario's run.json records.

    *variant* reads each template's twin of that suffix instead (``-rtt40``: make_scenarios.py's scaled RTT;
    ``-steady``: VDQ-CSAQM's steady CTV rule, beside DualPI2's files without it, :func:`queue_variant`); the
    cells keep the template's own name, so the targets read them as they read the originals."""
    cells: dict[tuple[str, str], list[Cell]] = {}
    meta: dict[str, list[dict[str, Any]]] = {}
    for t in TEMPLATES:
        for q in QUEUES:
            if q == "dualpi2" and t in VDQ_ONLY:
                continue
            name = scenario_name(t + queue_variant(variant, q), q)
            runs = seed_runs(results, name)
            if not runs:
                continue
            by_slot: dict[int, list[Any]] = {}
            for seed, run_dir in runs:
                r = analyse(run_dir)
                for k, p in slots(r).items():
                    by_slot.setdefault(k, []).append(p)
                info = run_dir.parent / "run.json"
                rec: dict[str, Any] = {"seed": seed, "run": str(run_dir)}
                if info.is_file():
                    rec |= json.loads(info.read_text())
                meta.setdefault(name, []).append(rec)
            cells[(t, q)] = [Cell(t, q, k, ps[0].label, ps) for k, ps in sorted(by_slot.items())]
    return cells, meta


def cells_of(cells: dict[tuple[str, str], list[Cell]], queue: str, pick: Callable[[str], bool] = lambda t: True
             ) -> list[Cell]:
    """The cells of *queue* whose template *pick* accepts."""
    return [c for (t, q), cs in cells.items() if q == queue and pick(t) for c in cs]
