"""``ccswitch testbed matrix``: draw scenarios from a space, run them in arms x seeds, report.

The work is in ccswitch.testbed.scenario.generate, ccswitch.testbed.runs.matrix
and ccswitch.testbed.reports.matrix; this module only maps options onto them.
Every failure the user can fix is one line ``ccswitch: error: ...`` and exit 1.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

ARMS_HELP = ("comma-separated, of static, dqn, heuristic, daemon-static-cubic, daemon-static-bbr, daemon-static-pcc, "
             "daemon-deviate (one managed client at a time on bbr or pcc, the others on cubic: training data), "
             "dqn-remote[-MS] (the DQN on a policy server in the server namespace, answers held MS ms), "
             "dqn-joint[-MS] (the same, one decision per path); dqn-remote-l4s[-MS], dqn-joint-l4s[-MS] (the control "
             "traffic as L4S)")


def _fail(exc: BaseException) -> None:
    msg = " ".join(str(exc).split()) or type(exc).__name__
    click.echo(f"ccswitch: error: {msg}", err=True)
    sys.exit(1)


@click.group()
def matrix() -> None:
    """Scenario matrices: generate splits from a space, run arms x seeds, one report."""


@matrix.command("generate")
@click.argument("space", type=click.Path(dir_okay=False))
@click.option("--split", type=click.Choice(["train", "dev", "test"]), required=True)
@click.option("--count", type=click.IntRange(1, 100_000), required=True, help="Scenarios to write.")
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--out", type=click.Path(file_okay=False), required=True, help="Folder for the files and index.csv.")
def matrix_generate(space: str, split: str, count: int, seed: int, out: str) -> None:
    """Draw COUNT scenarios of SPLIT from SPACE.toml into scenario files plus index.csv."""
    from ccswitch.testbed.scenario import ScenarioError
    from ccswitch.testbed.scenario.generate import generate
    from ccswitch.testbed.scenario.space import load_space

    try:
        files = generate(load_space(space), split, count, seed, Path(out))
    except (ScenarioError, OSError) as exc:
        _fail(exc)
    click.echo(f"{len(files)} {split} scenarios -> {out} (index: {Path(out) / 'index.csv'})")


@matrix.command("requeue")
@click.argument("directory", type=click.Path(exists=True, file_okay=False))
@click.option("--queue", metavar="NAME", help="A router queue of the host-vs-network comparison "
              "(pfifo, fq_codel, fq-100, dualpi2, vdq_csaqm, ...).")
@click.option("--qdisc", metavar="INLINE", help='Or a scenario qdisc table, e.g. \'{ kind = "fq_codel" }\'.')
@click.option("--out", type=click.Path(file_okay=False), required=True, help="Folder for the copies.")
def matrix_requeue(directory: str, queue: str | None, qdisc: str | None, out: str) -> None:
    """Copy DIRECTORY's scenarios with the router's (uplink) queue replaced, nothing else changed."""
    from ccswitch.testbed.network_comparison import QUEUES
    from ccswitch.testbed.scenario import ScenarioError
    from ccswitch.testbed.scenario.requeue import requeue

    if (queue is None) == (qdisc is None):
        _fail(ValueError("give one of --queue NAME or --qdisc INLINE"))
    if queue is not None and queue not in QUEUES:
        _fail(ValueError(f"--queue {queue!r} is not a known router queue; known: {', '.join(QUEUES)}"))
    table = QUEUES[queue] if queue is not None else str(qdisc)
    try:
        files = requeue(Path(directory), table, Path(out))
    except (ScenarioError, OSError) as exc:
        _fail(exc)
    click.echo(f"{len(files)} scenarios with uplink qdisc {table} -> {out}")


@matrix.command("run")
@click.argument("directory", type=click.Path(file_okay=False))
@click.option("--arms", default="static,dqn", show_default=True, help=ARMS_HELP)
@click.option("--seeds", type=int, default=1, show_default=True, help="Seeds 1..N per scenario and arm.")
@click.option("--out", type=click.Path(file_okay=False), required=True, help="Results folder (resumable).")
@click.option("--scenario", "scenarios", multiple=True, metavar="NAME", help="Only this scenario (repeatable).")
@click.option("--policy-file", type=click.Path(dir_okay=False), help="The dqn arm runs this policy file.")
@click.option("--timeout-s", type=float, default=240.0, show_default=True, help="Bound on one run.")
@click.option("--jobs", type=int, default=1, show_default=True, help="Runs at once on this host.")
@click.option("--ray", "ray_address", metavar="auto|ADDRESS", help="Run each run as a task on a Ray cluster.")
@click.option("--runs-per-node", type=int, help="With --ray: runs at once per node (default: its CPUs / 2).")
@click.option("--guard", "guard", multiple=True, metavar="KEY=VALUE",
              help="A guard setting of every daemon arm, e.g. eval_window_s=0 (repeatable; docs/daemon.md).")
@click.option("--quiet", is_flag=True, help="Only failures and the final line.")
def matrix_run(directory: str, arms: str, seeds: int, out: str, scenarios: tuple[str, ...], policy_file: str | None,
               timeout_s: float, jobs: int, ray_address: str | None, runs_per_node: int | None,
               guard: tuple[str, ...], quiet: bool) -> None:
    """Run every scenario of DIRECTORY in each arm and seed; finished runs are never repeated."""
    from ccswitch.testbed.runs.matrix import MatrixError, run_matrix
    from ccswitch.testbed.scenario import ScenarioError

    try:
        outcomes = run_matrix(Path(directory), arms.split(","), seeds, Path(out), jobs=jobs, timeout_s=timeout_s,
                              policy_file=Path(policy_file) if policy_file else None, scenarios=scenarios,
                              ray_address=ray_address, runs_per_node=runs_per_node, progress=not quiet,
                              guard=guard)
    except (MatrixError, ScenarioError, ValueError, OSError) as exc:
        _fail(exc)
    except KeyboardInterrupt:
        click.echo(f"ccswitch: matrix interrupted; the runs in progress were stopped, finished ones are kept: "
                   f"run the same command to resume ({out})", err=True)
        sys.exit(130)
    if any(not o.ok for o in outcomes):
        sys.exit(3)


@matrix.command("report")
@click.argument("results", type=click.Path(exists=True, file_okay=False))
@click.option("--doc", type=click.Path(dir_okay=False), help="Markdown file (default: RESULTS/report.md).")
@click.option("--title", default="", help="Title line of the report.")
@click.option("--notes", type=click.Path(exists=True, dir_okay=False), help="Markdown inserted after the introduction.")
def matrix_report(results: str, doc: str | None, title: str, notes: str | None) -> None:
    """One Markdown report with PNG plots from a matrix results folder."""
    from ccswitch.testbed.reports.matrix import report

    try:
        path = report(Path(results), Path(doc) if doc else None, title=title,
                      notes=Path(notes).read_text() if notes else "")
    except (ValueError, OSError) as exc:
        _fail(exc)
    click.echo(str(path))
