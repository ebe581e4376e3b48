"""Run an L4S scenario with a given build and RTT-independence setting of ccswitch's Prague, per seed.

docs/l4s.md "Prague fidelity" compares ccswitch's BPF Prague before and after
RTT independence on ``l4s-dyn-cubic-vs-prague``.  This registers Prague from
``--obj`` (default: bpf/prague.bpf.o) with ``--rtt-scaling``/``--rtt-target-ms``
(objects built before RTT independence have no tunables: leave those out),
runs the scenario once per ``--seeds`` (linkemu's random seed; one run folder
each), then writes the tables and plots with testbed/l4s/report.py.

    # before: the sender as it was (git show REV:bpf/prague.bpf.c > /tmp/before.bpf.c; build it
    # like bpf/Makefile does, with -I bpf, into /tmp/prague-before.bpf.o)
    sudo nice -n 5 .venv/bin/python testbed/l4s/prague_fidelity.py --obj /tmp/prague-before.bpf.o \\
        --seeds 1 2 --out results/prague-before
    sudo nice -n 5 .venv/bin/python testbed/l4s/prague_fidelity.py --seeds 1 2 --out results/prague-after
    sudo nice -n 5 .venv/bin/python testbed/l4s/prague_fidelity.py --rtt-scaling none --seeds 1 2 \\
        --out results/prague-none

~85 s per run.  Prague must not be registered by another process (its build
and settings would be used instead): the script refuses to start then.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from ccswitch.testbed.l4s import report

HERE = Path(__file__).resolve().parent
SCENARIOS = HERE.parent / "scenarios"


def main(argv: Sequence[str]) -> int:
    from ccswitch.bpf import holder
    from ccswitch.bpf.prague import OBJ_PATH, RTT_SCALING, PragueTunables, ensure_prague
    from ccswitch.testbed.runs.runner import run_scenario
    from ccswitch.testbed.scenario import ScenarioError, load_scenario

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenario", default="l4s-dyn-cubic-vs-prague", help="name in testbed/scenarios or a .toml path")
    ap.add_argument("--obj", type=Path, default=OBJ_PATH, help="the Prague object to register")
    ap.add_argument("--rtt-scaling", choices=list(RTT_SCALING), help="default: the object's own (rate)")
    ap.add_argument("--rtt-target-ms", type=float, default=25.0)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    path = Path(a.scenario) if a.scenario.endswith(".toml") else SCENARIOS / f"{a.scenario}.toml"
    try:
        sc = load_scenario(path)
        tunables = PragueTunables(a.rtt_scaling, round(a.rtt_target_ms * 1000)) if a.rtt_scaling else None
    except (ScenarioError, ValueError) as e:
        print(f"prague_fidelity.py: {e}", file=sys.stderr)
        return 2
    runs: list[Path] = []
    for seed in a.seeds:
        if not holder.unregistered_within("prague", 3.0):  # the previous seed's goes within its holder's poll
            print("prague_fidelity.py: prague is already registered (another process or a module); "
                  "its build would be measured, not --obj", file=sys.stderr)
            return 1
        handle = ensure_prague(a.obj, tunables=tunables)
        try:
            t, load = time.monotonic(), os.getloadavg()
            out = a.out / f"seed-{seed}"
            runs += run_scenario(dataclasses.replace(sc, seeds=(seed,), repetitions=1), out, progress=False,
                                 plots=False)
            (out / "prague.json").write_text(json.dumps({
                "obj": str(a.obj), "seed": seed, "tunables": dataclasses.asdict(tunables) if tunables else None,
                "load_before": load, "load_after": os.getloadavg(), "took_s": round(time.monotonic() - t, 1)}))
        finally:
            handle.close()
    return report.main([*map(str, runs), "--out", str(a.out / "plots"), "--md", str(a.out / "results.md")])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
