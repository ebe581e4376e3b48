"""``ccswitch dataset ...``: record, import, build, validate and describe traces.

Registered on the main CLI in ccswitch/cli.py.  Only click is imported here;
each command imports what it needs when it runs.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

__all__ = ["dataset", "fail"]


def fail(exc: BaseException | str) -> None:
    """The CLI's one-line error and exit status 1."""
    msg = (str(exc) if not isinstance(exc, str) else exc).replace("\n", " ") or type(exc).__name__
    click.echo(f"ccswitch: error: {msg}", err=True)
    sys.exit(1)


def _rich_progress(label: str) -> Any:
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

    return Progress(TextColumn(label), BarColumn(), TaskProgressColumn(), TimeElapsedColumn(),
                    TextColumn("{task.description}"), transient=False)


@click.group()
def dataset() -> None:
    """Traces: record from the monitor, import iperf3/tshark, build the corpus, validate."""


@dataset.command("record")
@click.argument("out", type=click.Path(file_okay=False))
@click.option("--duration", type=float, default=60.0, show_default=True, help="Seconds to record.")
@click.option("--interval", type=float, default=1.0, show_default=True, help="Sampling interval, s (>= 0.1).")
@click.option("--port", "ports", type=int, multiple=True, metavar="PORT",
              help="Keep only flows with this local or remote port (repeatable; default: all flows).")
@click.option("--id", "capture_id", help="Capture id (default: the folder name).")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@click.pass_context
def record(ctx: click.Context, out: str, duration: float, interval: float, ports: tuple[int, ...],
           capture_id: str | None, quiet: bool) -> None:
    """Record the ccswitch monitor's flow samples into capture folder OUT (needs root)."""
    from .capture import record_live
    from .trace import TraceError

    netns = (ctx.find_root().obj or {}).get("netns")
    try:
        if quiet:
            path = record_live(out, duration_s=duration, interval_s=interval, ports=ports, capture_id=capture_id,
                               netns=netns)
        else:
            with _rich_progress("record") as prog:
                task = prog.add_task("", total=duration)

                def update(elapsed: float, total: float, latest: dict[str, tuple[str, float]]) -> None:
                    top = sorted(latest.items(), key=lambda kv: -kv[1][1])[:3]
                    prog.update(task, completed=elapsed, description=f"{len(latest)} flows " + "  ".join(
                        f"{n}:{c} {b / 1e6:.1f} Mb/s" for n, (c, b) in top))

                path = record_live(out, duration_s=duration, interval_s=interval, ports=ports,
                                   capture_id=capture_id, progress=update, netns=netns)
    except TraceError as e:
        fail(e)
    click.echo(str(path))


@dataset.command("import-iperf3")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Capture folder to write.")
@click.option("--id", "capture_id", help="Capture id (default: the folder name).")
def import_iperf3_cmd(files: tuple[str, ...], out: str, capture_id: str | None) -> None:
    """Import iperf3 -J client reports (one capture; one flow per stream)."""
    from .importers import import_iperf3

    with _rich_progress("import") as prog:
        task = prog.add_task("", total=len(files))
        path = import_iperf3(files, out, capture_id=capture_id,
                             progress=lambda done, total, text: prog.update(task, completed=done, description=text))
    click.echo(str(path))


@dataset.command("import-tshark")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Capture folder to write.")
@click.option("--interval", type=float, default=1.0, show_default=True, help="Sample interval, s.")
@click.option("--cca", default="unknown", show_default=True, help="The senders' CCA (a capture cannot tell).")
@click.option("--id", "capture_id", help="Capture id (default: the folder name).")
def import_tshark_cmd(file: str, out: str, interval: float, cca: str, capture_id: str | None) -> None:
    """Import a pcap/pcapng (read with tshark) or a `tshark -T fields` file."""
    from .importers import import_tshark

    with _rich_progress("import") as prog:
        task = prog.add_task("", total=None)
        path = import_tshark(file, out, interval_s=interval, cca=cca, capture_id=capture_id,
                             progress=lambda done, total, text: prog.update(task, completed=done, description=text))
    click.echo(str(path))


@dataset.command("corpus")
@click.argument("spec", type=click.Path(dir_okay=False))
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Corpus folder (resumes what is there).")
@click.option("--backend", type=click.Choice(["bottleneck", "runner"]), help="Override the spec's backend.")
@click.option("--only", metavar="REGEX", help="Only runs whose CONDITION/ARM--sSEED path matches.")
@click.option("--keep-going", is_flag=True, help="Log a failed run and go on.")
@click.option("--slim", is_flag=True, help="Keep only manifest, samples and scenario of each run.")
@click.option("--dry-run", is_flag=True, help="List the runs and exit.")
@click.option("--quiet", is_flag=True, help="A log line per run instead of the progress bar.")
@click.option("--ray", "ray_address", metavar="auto|ADDRESS",
              help="Capture each run as a task on a Ray cluster (docs/cluster.md); OUT is the same.")
@click.option("--runs-per-node", type=click.IntRange(min=1),
              help="With --ray: runs at once per node (default: its CPUs / 2).")
def corpus_cmd(spec: str, out: str, backend: str | None, only: str | None, keep_going: bool, slim: bool,
               dry_run: bool, quiet: bool, ray_address: str | None, runs_per_node: int | None) -> None:
    """Capture the corpus matrix of SPEC (datasets/specs/*.toml) into OUT (needs root).

    Resumable: a run whose capture is complete in OUT is never repeated.  With --ray
    each run is a Ray task on a cluster node (root there, set up as docs/cluster.md
    says), captured into a node-local folder and unpacked into OUT where a local
    capture writes it."""
    import re

    from .capture import CaptureError
    from .corpus import build_corpus
    from .corpus_spec import load_spec

    if runs_per_node is not None and ray_address is None:
        fail("--runs-per-node needs --ray")
    sp = load_spec(spec)
    pattern = re.compile(only) if only else None
    sel = (lambda r: bool(pattern.search(r.rel_dir))) if pattern else None
    if dry_run:
        runs = [r for r in sp.runs if sel is None or sel(r)]
        for r in runs:
            click.echo(r.rel_dir)
        click.echo(f"{len(runs)} runs, ~{len(runs) * (sp.duration_s + 3) / 60:.0f} min", err=True)
        return
    from ccswitch.dataplane import install_signal_handlers

    install_signal_handlers()
    try:
        build_corpus(sp, out, backend=backend, only=sel, keep_going=keep_going, slim=slim, progress=not quiet,
                     log=lambda m: click.echo(m, err=True), ray_address=ray_address, runs_per_node=runs_per_node)
    except CaptureError as e:
        fail(e)
    from .card import template_for, write_card

    if template_for(out).is_file():
        click.echo(f"dataset card: {write_card(out)}", err=True)


@dataset.command("card")
@click.argument("corpus", type=click.Path(exists=True, file_okay=False))
@click.option("--template", type=click.Path(exists=True, dir_okay=False),
              help="Card template with @KEY@ placeholders (default: datasets/specs/<corpus name>.card.md).")
def card_cmd(corpus: str, template: str | None) -> None:
    """Recompute the dataset card's numbers (size, rows, per-condition table, ...) into CORPUS/README.md."""
    from .card import write_card
    from .trace import TraceError

    try:
        click.echo(str(write_card(corpus, template)))
    except (TraceError, KeyError) as e:
        fail(e.args[0] if isinstance(e, KeyError) else e)


@dataset.command("validate")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
def validate_cmd(paths: tuple[str, ...]) -> None:
    """Check captures (folders), corpora or single samples.parquet files; one line per problem."""
    from .trace import SAMPLES, TraceError, find_captures, read_samples

    bad = 0
    n = 0
    for p in paths:
        try:
            if Path(p).is_file() and Path(p).suffix == ".parquet":
                t = read_samples(p)
                n += 1
                click.echo(f"ok  {p}: {t.num_rows} rows")
                continue
            caps = find_captures(p)
        except TraceError as e:
            click.echo(f"ccswitch: error: {e}", err=True)
            bad += 1
            continue
        for c in caps:
            n += 1
            try:
                c.validate()
            except TraceError as e:
                bad += 1
                click.echo(f"ccswitch: error: {e}", err=True)
            else:
                click.echo(f"ok  {c.path}: {c.samples().num_rows} rows, {len(c.flows)} flows ({c.manifest['source']})")
        if not caps:
            click.echo(f"ccswitch: error: {p}: no captures ({SAMPLES} with manifest.json) found", err=True)
            bad += 1
    click.echo(f"{n - bad if n >= bad else 0} of {n} valid" if n else "nothing validated", err=True)
    if bad:
        sys.exit(1)


@dataset.command("info")
@click.argument("path", type=click.Path(exists=True))
@click.option("--json", "as_json", is_flag=True)
def info_cmd(path: str, as_json: bool) -> None:
    """Summarise a corpus: conditions, arms, rows, sources; what the env can replay."""
    import json
    from collections import Counter

    from .trace import find_captures

    caps = find_captures(path)
    conds: dict[str, list[str]] = {}
    rows = 0
    for c in caps:
        rows += int(c.manifest.get("files", {}).get("samples.parquet", {}).get("rows", 0))
        if c.condition:
            conds.setdefault(c.condition, []).append((c.manifest.get("arm") or {}).get("start", "?"))
    summary = {
        "path": path, "captures": len(caps), "rows": rows,
        "sources": dict(Counter(c.manifest["source"] for c in caps)),
        "interval_s": sorted({c.interval_s for c in caps}),
        "conditions": len(conds), "captures_per_condition": dict(Counter(len(v) for v in conds.values())),
    }
    if as_json:
        click.echo(json.dumps(summary, indent=2))
        return
    for k, v in summary.items():
        click.echo(f"{k}: {v}")


@dataset.command("synthetic")
@click.argument("out", type=click.Path(file_okay=False))
@click.option("--conditions", type=int, default=6, show_default=True)
@click.option("--duration", type=int, default=20, show_default=True, help="Seconds per trace.")
@click.option("--seed", type=int, default=0, show_default=True)
def synthetic_cmd(out: str, conditions: int, duration: int, seed: int) -> None:
    """Write a small synthetic corpus (datasets/synthetic.py) for experiments and tests."""
    from .synthetic import make_corpus

    click.echo(str(make_corpus(out, n_conditions=conditions, duration_s=duration, seed=seed)))


@dataset.command("from-matrix")
@click.argument("results", type=click.Path(exists=True, file_okay=False))
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Corpus folder to write (resumes).")
@click.option("--self-play", is_flag=True,
              help="Also the runs of the dqn arm: the policy on every managed client (iterated self-play).")
@click.option("--extends", type=click.Path(exists=True, file_okay=False),
              help="OUT adds captures to this corpus's conditions (read together: --data BASE --data OUT).")
def from_matrix_cmd(results: str, out: str, self_play: bool, extends: str | None) -> None:
    """A replay corpus from `testbed matrix run --arms daemon-static-cubic,...-bbr,...-pcc` run folders.

    One condition per managed bulk flow of each scenario, one capture per daemon-static arm
    (datasets/from_matrix.py: the population-on-X reading of those runs); with --self-play one
    more per run of the dqn arm; the daemon-deviate runs become unilateral conditions.  Converting
    into an existing corpus adds to it; with --extends into a folder of its own beside it."""
    from .from_matrix import corpus_from_matrix
    from .trace import TraceError

    try:
        corpus_from_matrix(results, out, self_play=self_play, extends=extends, log=click.echo)
    except (TraceError, OSError) as e:
        fail(e)


@dataset.command("minari")
@click.argument("corpus", type=click.Path(exists=True, file_okay=False))
@click.option("--id", "dataset_id", required=True, metavar="NAMESPACE/NAME-vN",
              help="Minari dataset id, e.g. ccswitch/space-v0.")
@click.option("--out", type=click.Path(file_okay=False),
              help="Datasets root (MINARI_DATASETS_PATH; default: Minari's, ~/.minari/datasets).")
@click.option("--random-episodes", type=click.IntRange(0, 100), default=2, show_default=True,
              help="Sticky-random episodes per condition and starting CCA, beside the one that keeps it.")
@click.option("--seed", type=int, default=1, show_default=True)
def minari_cmd(corpus: str, dataset_id: str, out: str | None, random_episodes: int, seed: int) -> None:
    """Export CORPUS as a Minari offline-RL dataset (datasets/minari_export.py says what the episodes are)."""
    try:
        import minari  # noqa: F401
    except ImportError:
        fail("Minari is not installed: pip install 'ccswitch[train]' (or bash scripts/setup.sh)")
    import re

    if not re.fullmatch(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+-v\d+", dataset_id):
        fail(f"--id {dataset_id!r}: expected NAMESPACE/NAME-vN, e.g. ccswitch/space-v0")
    from .minari_export import export_minari
    from .trace import TraceError

    try:
        export_minari(corpus, dataset_id, out_root=out, random_episodes=random_episodes, seed=seed, log=click.echo)
    except (TraceError, FileExistsError, ValueError) as e:
        fail(e)
