"""End-to-end fairness experiments: each scenario with static CCAs and with ccswitchd.

Issue 5, section 4.  The driver: scenarios and arms from ccswitch.testbed.scenario,
runs from ccswitch.testbed.runs, the report from ccswitch.testbed.reports.experiments.
Every ``testbed/scenarios/fair-*.toml`` (and ``default.toml``) carries a
``[daemon]`` table; it runs in two or more arms::

    static      the file without its daemon: the flows keep their initial CCA
    dqn         ccswitchd on every client with the shipped DQN policy
    heuristic   ccswitchd with paper 002's evaluation function
    daemon-static-CCA   ccswitchd with policy "static": every flow put on CCA (what a policy
                        that always picks CCA would reach; e.g. daemon-static-bbr)

``run`` writes ``OUT/<scenario>/<arm>/run-01-seed-1/`` (the runner's run
folders); ``report`` reads them back and writes ``docs/results-daemon.md``
with one table per scenario (last-half metrics, static vs daemon, the
targets checked) and the plots ``docs/daemon/<scenario>.png``.

    python -m ccswitch.testbed.experiments run [--arms static,dqn] [--out results/daemon] [SCENARIO ...]
    python -m ccswitch.testbed.experiments report [--results results/daemon] [--doc docs/results-daemon.md]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .reports.experiments import DEFAULT_DOC, report
from .scenario import DaemonSettings, check_settings, load_scenario
from .scenario.arms import ARMS, DEFAULT_ARMS, arm_scenario, check_arms, guard_setting

REPO = Path(__file__).resolve().parent.parent
SCENARIOS = REPO / "testbed" / "scenarios"
DEFAULT_OUT = Path("results/daemon")


def scenario_files() -> list[Path]:
    return [SCENARIOS / "default.toml", *sorted(SCENARIOS.glob("fair-*.toml"))]


def run(files: Sequence[Path], arms: Sequence[str], out: Path, progress: bool = True,
        policy_file: Path | None = None, guard: Sequence[tuple[str, Any]] = ()) -> list[Path]:
    from .runs.runner import run_scenario

    if policy_file is not None and not policy_file.is_file():
        raise ValueError(f"--policy-file {policy_file}: no such file (give a policy exported by ccswitch train)")
    done = []
    for f in files:
        sc = load_scenario(f)
        for arm in arms:
            dest = out / sc.name / arm
            if (dest / "run-01-seed-1" / "summary.json").is_file():
                print(f"skip {dest} (already there; delete it to run again)", file=sys.stderr)
                done.append(dest)
                continue
            run_scenario(arm_scenario(sc, arm, policy_file, guard), dest, progress=progress, plots=True)
            done.append(dest)
    return done


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m ccswitch.testbed.experiments", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run scenarios in each arm")
    r.add_argument("scenarios", nargs="*", type=Path, help="scenario files (default: default.toml and fair-*.toml)")
    r.add_argument("--arms", default=",".join(DEFAULT_ARMS), help=f"comma-separated, of {', '.join(ARMS)}")
    r.add_argument("--out", type=Path, default=DEFAULT_OUT)
    r.add_argument("--quiet", action="store_true")
    r.add_argument("--policy-file", type=Path,
                   help="the dqn arm runs this policy file (from ccswitch train) instead of models/policy.json")
    r.add_argument("--guard", action="append", default=[], metavar="KEY=VALUE",
                   help="a [guard] setting of every daemon arm (daemon/config.py keys), e.g. return_holdoff_s=20")
    p = sub.add_parser("report", help="write docs/results-daemon.md from the run folders")
    p.add_argument("--results", type=Path, default=DEFAULT_OUT)
    p.add_argument("--doc", type=Path, default=DEFAULT_DOC)
    p.add_argument("--notes", type=Path, help="a Markdown file inserted after the introduction")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "run":
            try:
                arms = check_arms(args.arms.split(","))
            except ValueError as e:
                ap.error(str(e))
            from ccswitch.dataplane import install_signal_handlers

            install_signal_handlers()
            guard = [guard_setting(g) for g in args.guard]
            if guard:
                problems = check_settings(DaemonSettings(guard=tuple(guard)))
                if problems:
                    ap.error(f"--guard: {problems[0]}")
            run(args.scenarios or scenario_files(), arms, args.out, progress=not args.quiet,
                policy_file=args.policy_file, guard=guard)
        else:
            notes = args.notes.read_text() if args.notes else ""
            print(report(args.results, args.doc, notes=notes))
    except (OSError, ValueError, RuntimeError) as e:
        print(f"experiments: error: {' '.join(str(e).split())}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
