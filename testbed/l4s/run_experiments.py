"""Run the L4S experiments (testbed/scenarios/l4s-*.toml) and write their report.

Each scenario runs once (one repetition, 80 s; the whole set takes about
``len(scenarios) * 100 s``) through the namespace testbed with linkemu's
DualPI2, then ``testbed/l4s/report.py`` turns the run folders into the
tables (markdown on stdout and ``--md``) and the paper-004-style plots
(``--plots``).

ccswitch's BPF Prague must be registered while the flows start; the process
keeps it registered for the whole session (``ccswitch.bpf.prague.ensure_prague``:
idempotent, a no-op when another ccswitch process or a kernel module already
offers ``prague``).

    sudo nice -n 10 .venv/bin/python testbed/l4s/run_experiments.py \\
        [--only l4s-dyn-cubic-vs-prague ...] [--out results/l4s] [--plots docs/l4s] [--md FILE]

``--queue vdq_csaqm`` runs each named template's VDQ-CSAQM twin (``<name>-vdq``,
make_scenarios.py) instead; ``--seeds 1 2 3`` runs every scenario once per seed
into ``OUT/<name>/seed-<s>/`` (with ``run.json``: UTC start/end, load average
before/after, Prague's source) and skips a seed whose run already finished, so
an interrupted batch resumes where it stopped.  Paper 004 side by side:
testbed/l4s/p004.py.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ccswitch.bpf.pcc import pcc_held
from ccswitch.testbed.l4s import report
from ccswitch.testbed.l4s.make_scenarios import QUEUE_SUFFIX, scenario_name
from ccswitch.testbed.runs.runner import run_scenario
from ccswitch.testbed.scenario import ScenarioError, load_scenario

if TYPE_CHECKING:
    from ccswitch.bpf.prague import PragueHandle

HERE = Path(__file__).resolve().parent
SCENARIOS = HERE.parent / "scenarios"
DEFAULT_SET = (
    "l4s-dyn-cubic-vs-prague", "l4s-dyn-bbr-vs-prague", "l4s-dyn-pcc-vs-prague",
    "l4s-rttmix-cubic-vs-prague", "l4s-rttmix-bbr-vs-prague", "l4s-rttmix-pcc-vs-prague",
    "l4s-dyn-cubic-vs-prague-daemon", "l4s-dyn-bbr-vs-prague-daemon", "l4s-dyn-pcc-vs-prague-daemon",
    "l4s-dyn-cubic-vs-prague-k4",
)


@contextlib.contextmanager
def prague_registered() -> Iterator[PragueHandle]:
    """Prague registered for the whole session; the handle (``source``; ``repairs()``, the count of the
    kernel's reductions without Prague that were redone, docs/l4s-kernel.md section 8)."""
    from ccswitch.bpf.prague import ensure_prague

    h = ensure_prague()
    try:
        yield h
    finally:
        h.close()


def finished_run(seed_dir: Path) -> Path | None:
    """The finished run folder under *seed_dir* (OUT/<name>/seed-<s>), if any."""
    return next((r for r in sorted(seed_dir.glob("run-*")) if (r / "summary.json").is_file()), None)


def run_seeds(sc, out: Path, seeds: Sequence[int], prague: PragueHandle) -> list[Path]:
    """*sc* once per seed into OUT/<name>/seed-<s>/, skipping seeds already finished; with run.json (UTC
    start/end, load, Prague's source and its repairs during the run: null when this process's Prague
    cannot count them, e.g. one registered by another process)."""
    import dataclasses
    import datetime
    import json
    import os

    runs = []
    for seed in seeds:
        seed_dir = out / sc.name / f"seed-{seed}"
        done = finished_run(seed_dir)
        if done is not None:
            print(f"run_experiments.py: {sc.name} seed {seed} already done ({done})", file=sys.stderr)
            runs.append(done)
            continue
        t, load, repairs0 = time.monotonic(), os.getloadavg(), prague.repairs()
        start = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        got = run_scenario(dataclasses.replace(sc, seeds=(seed,), repetitions=1), seed_dir, progress=False,
                           plots=False)
        (seed_dir / "run.json").write_text(json.dumps({
            "scenario": sc.name, "seed": seed, "utc_start": start,
            "utc_end": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "load_before": load, "load_after": os.getloadavg(), "took_s": round(time.monotonic() - t, 1),
            "prague": prague.source,
            "prague_repairs": None if repairs0 is None else (prague.repairs() or 0) - repairs0}) + "\n")
        print(f"run_experiments.py: {sc.name} seed {seed} took {time.monotonic() - t:.0f} s", file=sys.stderr)
        runs += got
    return runs


def main(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", nargs="+", help="scenario names (default: every l4s experiment that exists)")
    ap.add_argument("--out", type=Path, default=Path("results/l4s"))
    ap.add_argument("--plots", type=Path, default=Path("docs/l4s"))
    ap.add_argument("--md", type=Path, help="tables as markdown (default: OUT/results.md)")
    ap.add_argument("--report-only", action="store_true", help="do not run; report the runs already in OUT")
    ap.add_argument("--queue", choices=sorted(QUEUE_SUFFIX), help="run each name's twin for this router queue")
    ap.add_argument("--seeds", type=int, nargs="+", help="one run per seed into OUT/<name>/seed-<s>/ (resumable)")
    ap.add_argument("--no-report", action="store_true", help="run only (p004.py reports the seed folders)")
    a = ap.parse_args(argv)
    names = a.only or [n for n in DEFAULT_SET if (SCENARIOS / f"{n}.toml").is_file()]
    if a.queue:
        names = list(dict.fromkeys(scenario_name(n, a.queue) for n in names))
        names = [n for n in names if a.only or (SCENARIOS / f"{n}.toml").is_file()]
    runs: list[Path] = []
    if a.report_only and a.seeds:
        runs = [r for n in names for s in a.seeds if (r := finished_run(a.out / n / f"seed-{s}")) is not None]
    elif a.report_only:
        runs = [next(iter(sorted((a.out / n).glob("run-*"))), a.out / n) for n in names]
        runs = [r for r in runs if (r / "summary.json").is_file()]
    else:
        try:
            scenarios = [load_scenario(SCENARIOS / f"{n}.toml") for n in names]
        except ScenarioError as e:
            print(f"run_experiments.py: {e}", file=sys.stderr)
            return 2
        # a PCC registration of this process: another job's run ending cannot take `pcc` from these
        # runs (seen in 4 of 51 runs for docs/l4s.md "Paper 004")
        with prague_registered() as prague, pcc_held(any(f.cca == "pcc" for sc in scenarios for f in sc.flows)):
            print(f"run_experiments.py: prague from {prague.source}; {len(scenarios)} scenario(s)", file=sys.stderr)
            for sc in scenarios:
                if a.seeds:
                    runs += run_seeds(sc, a.out, a.seeds, prague)
                    continue
                t = time.monotonic()
                runs += run_scenario(sc, a.out / sc.name, progress=True, plots=False)
                print(f"run_experiments.py: {sc.name} took {time.monotonic() - t:.0f} s", file=sys.stderr)
    if a.no_report:
        return 0 if runs else 1
    md = a.md or a.out / "results.md"
    return report.main([*map(str, runs), "--out", str(a.plots), "--md", str(md),
                     "--json", str(md.with_suffix(".json"))]) if runs else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
