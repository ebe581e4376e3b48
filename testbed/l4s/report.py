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

This module is the command; the work is in :mod:`.report_read` (a run folder),
:mod:`.report_phases` (the metrics above), :mod:`.report_tables` (Markdown) and
:mod:`.report_plot` (the plot), on the data of :mod:`.report_model`.

    .venv/bin/python testbed/l4s/report.py results/l4s-dyn-cubic/run-01-seed-1 ... \\
        --out docs/l4s --md docs/l4s/results.md
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from ccswitch.testbed.l4s.report_phases import analyse
from ccswitch.testbed.l4s.report_plot import plot
from ccswitch.testbed.l4s.report_tables import markdown


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
