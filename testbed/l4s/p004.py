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

This module is the command; the work is in :mod:`.p004_cells` (the seed folders, phases by slot),
:mod:`.p004_targets`, :mod:`.p004_tables` (Markdown) and :mod:`.p004_plot`.

    .venv/bin/python testbed/l4s/p004.py --results results/p004 --md docs/l4s/p004.md --plots docs/l4s
    .venv/bin/python testbed/l4s/p004.py --results results/p004-rtt40 --variant rtt40 --md docs/l4s/p004-rtt40.md
    .venv/bin/python testbed/l4s/p004.py --results results/p004 --variant steady --md docs/l4s/p004-steady.md
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from ccswitch.testbed.l4s.p004_cells import collect, seed_runs
from ccswitch.testbed.l4s.p004_plot import plot
from ccswitch.testbed.l4s.p004_tables import markdown
from ccswitch.testbed.l4s.p004_targets import targets
from ccswitch.testbed.l4s.report_phases import analyse
from ccswitch.testbed.l4s.report_plot import plot as run_plot


def main(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--results", type=Path, default=Path("results/p004"))
    ap.add_argument("--md", type=Path, help="write the tables here (default: RESULTS/p004.md)")
    ap.add_argument("--plots", type=Path, help="folder for p004-side-by-side[-VARIANT].png and the seed-1 VDQ run "
                    "plots")
    ap.add_argument("--run-plots", nargs="*", default=[], help="scenario names whose first seed gets report.py's plot")
    ap.add_argument("--variant", default="", help="read each template's twin <name>-VARIANT instead (rtt40: "
                    "40 ms base RTT; steady: VDQ-CSAQM's steady CTV, DualPI2 as without it; rtt40-steady: both; "
                    "make_scenarios.py)")
    a = ap.parse_args(argv)
    variant = f"-{a.variant.lstrip('-')}" if a.variant else ""
    cells, meta = collect(a.results, variant)
    if not cells:
        print(f"p004.py: no finished runs under {a.results}", file=sys.stderr)
        return 1
    tg = targets(cells)
    text = markdown(cells, meta, tg, variant)
    md = a.md or a.results / "p004.md"
    md.parent.mkdir(parents=True, exist_ok=True)
    md.write_text(text)
    print(text)
    if a.plots:
        print(plot(cells, a.plots, variant), file=sys.stderr)
        for name in a.run_plots:
            runs = seed_runs(a.results, name)
            if runs:
                print(run_plot(analyse(runs[0][1]), a.plots), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
