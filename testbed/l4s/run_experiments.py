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
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from ccswitch.testbed.runs.runner import run_scenario
from ccswitch.testbed.scenario import ScenarioError, load_scenario

HERE = Path(__file__).resolve().parent
SCENARIOS = HERE.parent / "scenarios"
DEFAULT_SET = (
    "l4s-dyn-cubic-vs-prague", "l4s-dyn-bbr-vs-prague", "l4s-dyn-pcc-vs-prague",
    "l4s-rttmix-cubic-vs-prague", "l4s-rttmix-bbr-vs-prague", "l4s-rttmix-pcc-vs-prague",
    "l4s-dyn-cubic-vs-prague-daemon", "l4s-dyn-bbr-vs-prague-daemon", "l4s-dyn-pcc-vs-prague-daemon",
    "l4s-dyn-cubic-vs-prague-k4",
)


@contextlib.contextmanager
def prague_registered() -> Iterator[str]:
    from ccswitch.bpf.prague import ensure_prague

    h = ensure_prague()
    try:
        yield h.source
    finally:
        h.close()


def _report_module():  # testbed/l4s/report.py (a script folder, not a package)
    spec = importlib.util.spec_from_file_location("l4s_report", HERE / "report.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def main(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", nargs="+", help="scenario names (default: every l4s experiment that exists)")
    ap.add_argument("--out", type=Path, default=Path("results/l4s"))
    ap.add_argument("--plots", type=Path, default=Path("docs/l4s"))
    ap.add_argument("--md", type=Path, help="tables as markdown (default: OUT/results.md)")
    ap.add_argument("--report-only", action="store_true", help="do not run; report the runs already in OUT")
    a = ap.parse_args(argv)
    names = a.only or [n for n in DEFAULT_SET if (SCENARIOS / f"{n}.toml").is_file()]
    runs: list[Path] = []
    if a.report_only:
        runs = [next(iter(sorted((a.out / n).glob("run-*"))), a.out / n) for n in names]
        runs = [r for r in runs if (r / "summary.json").is_file()]
    else:
        try:
            scenarios = [load_scenario(SCENARIOS / f"{n}.toml") for n in names]
        except ScenarioError as e:
            print(f"run_experiments.py: {e}", file=sys.stderr)
            return 2
        with prague_registered() as source:
            print(f"run_experiments.py: prague from {source}; {len(scenarios)} scenario(s)", file=sys.stderr)
            for sc in scenarios:
                t = time.monotonic()
                runs += run_scenario(sc, a.out / sc.name, progress=True, plots=False)
                print(f"run_experiments.py: {sc.name} took {time.monotonic() - t:.0f} s", file=sys.stderr)
    rep = _report_module()
    md = a.md or a.out / "results.md"
    return rep.main([*map(str, runs), "--out", str(a.plots), "--md", str(md),
                     "--json", str(md.with_suffix(".json"))]) if runs else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
