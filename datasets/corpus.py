"""The corpus: a matrix of link conditions x agent arms, captured on the testbed.

A corpus spec (TOML; ``datasets/specs/``, read by ``corpus_spec.py``) names
the matrix: link conditions, the agent's arms (one static arm per CCA, one
per ordered pair of CCAs and switch time) and seeds.  :func:`build_corpus`
runs what is missing (``corpus_runs.py``: one run captured into its folder by
the tbf bottleneck or the testbed runner; a capture with a manifest counts as
done, so an interrupted build resumes), shows progress, and keeps
``corpus.json`` (the spec and an index) at the top of the output folder.
With ``ray_address`` each run is a Ray task on a cluster node
(``corpus_ray.py``) that captures into a node-local folder and sends it back
packed; it lands where a local capture writes it (docs/cluster.md).  ``python
-m ccswitch.datasets.corpus one`` is that task's child process.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .capture import CaptureError
from .corpus_ray import capture_on_ray, capture_one
from .corpus_runs import CAPTURE_FAILURES, capture_run, is_captured, runner_available, write_index

# Re-exported: this module's public names before the split.
from .corpus_spec import BACKENDS, WIFI_PRESETS, CorpusSpec, Run, SpecError, load_spec, parse_spec

__all__ = ["BACKENDS", "WIFI_PRESETS", "CorpusSpec", "Run", "SpecError", "build_corpus", "load_spec",
           "parse_spec"]


def build_corpus(spec: CorpusSpec, out_dir: str | Path, *, backend: str | None = None,
                 only: Callable[[Run], bool] | None = None, keep_going: bool = False, slim: bool = False,
                 progress: bool = True, log: Callable[[str], None] = print, ray_address: str | None = None,
                 runs_per_node: int | None = None) -> dict[str, Any]:
    """Capture every run of *spec* that *out_dir* does not hold yet; returns the corpus index.

    *slim* keeps only the manifest, the samples and the scenario of each capture.
    *ray_address* ("auto" or a Ray address): each run is a Ray task on a cluster node
    (:func:`ccswitch.datasets.corpus_ray.capture_on_ray`), *runs_per_node* at once per node; the folder is
    the same.
    """
    backend = backend or spec.backend
    if backend not in BACKENDS:
        raise SpecError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if backend == "runner" and (why := runner_available()):
        raise CaptureError(why)
    if ray_address is not None:  # before anything is written: a wrong address leaves no corpus folder
        from ccswitch.testbed.runs.raypool import check_address

        check_address(ray_address, CaptureError)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    runs = [r for r in spec.runs if only is None or only(r)]
    todo = [r for r in runs if not is_captured(out / r.rel_dir)]
    log(f"corpus {spec.name}: {len(spec.conditions)} conditions x {len(spec.arms())} arms x {len(spec.seeds)} "
        f"seeds = {len(spec.runs)} runs; {len(runs) - len(todo)} done, {len(todo)} to capture "
        f"(~{len(todo) * (spec.duration_s + 3) / 60:.0f} min, backend {backend}"
        + (f", on the Ray cluster {ray_address})" if ray_address is not None and todo else ")"))
    failures: list[str] = []
    t_start = time.monotonic()
    bar = _Bar(len(todo), enabled=progress)
    with bar:
        if ray_address is not None and todo:
            capture_on_ray(todo, spec, out, backend, slim, keep_going, ray_address, runs_per_node, bar, log,
                           failures)
        for i, run in enumerate(todo if ray_address is None else ()):
            run_dir = out / run.rel_dir
            if run_dir.exists():
                shutil.rmtree(run_dir)  # an interrupted attempt
            bar.start_run(i, run, spec.duration_s)
            try:
                capture_run(run_dir, spec, run, backend, slim, bar.update)
            except CAPTURE_FAILURES as e:
                failures.append(f"{run.rel_dir}: {e}")
                log(f"corpus {spec.name}: FAILED {run.rel_dir}: {e}")
                shutil.rmtree(run_dir, ignore_errors=True)
                if not keep_going:
                    write_index(out, spec)
                    raise
            else:
                if not bar.enabled:
                    log(f"corpus {spec.name}: [{i + 1}/{len(todo)}] {run.rel_dir} done "
                        f"({(time.monotonic() - t_start) / 60:.1f} min)")
            write_index(out, spec)
    index = write_index(out, spec)
    log(f"corpus {spec.name}: {index['runs_done']}/{index['runs_planned']} runs in {out} "
        f"({(time.monotonic() - t_start) / 60:.1f} min this time" + (f", {len(failures)} failed)" if failures else ")"))
    return index


def main(argv: Sequence[str] | None = None) -> None:
    """The child process of one Ray task (``one``); the user-facing CLI is ``ccswitch dataset corpus``."""
    import argparse
    import sys

    ap = argparse.ArgumentParser(prog="python -m ccswitch.datasets.corpus")
    sub = ap.add_subparsers(dest="cmd", required=True)
    one = sub.add_parser("one", help="one run of a corpus (what `dataset corpus --ray` starts per task)")
    one.add_argument("spec", type=Path)
    one.add_argument("rel_dir")
    one.add_argument("root", type=Path)
    one.add_argument("--source", default="")
    one.add_argument("--backend", choices=BACKENDS, required=True)
    one.add_argument("--slim", action="store_true")
    args = ap.parse_args(argv)
    try:
        capture_one(args.spec, args.rel_dir, args.root, args.source or str(args.spec), args.backend, args.slim)
    except Exception as e:  # the task reads the last error line of the log
        print(f"corpus run: error: {type(e).__name__}: {' '.join(str(e).split())}", file=sys.stderr)
        sys.exit(1)


class _Bar:
    """rich progress: one bar over the runs, the current run's clock and flow rates in its text."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.enabled = enabled and total > 0
        self.total = total
        self._p: Any = None
        self._task: Any = None
        self._label = ""
        self._i = 0

    def __enter__(self) -> _Bar:
        if self.enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._p = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                               TimeRemainingColumn(), transient=False)
            self._p.__enter__()
            self._task = self._p.add_task("corpus", total=self.total)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._p is not None:
            self._p.__exit__(None, None, None)

    def start_run(self, i: int, run: Run, duration_s: float) -> None:
        self._i = i
        self._label = f"{run.condition.id} {run.arm.id} s{run.seed}"
        if self._p is not None:
            self._p.update(self._task, completed=i, description=self._label)

    def start_ray(self, total: int) -> None:
        if self._p is not None:
            self._p.update(self._task, completed=0, description=f"{total} runs on the Ray cluster")

    def finish_run(self, done: int, run: Run, eta: str, ok: bool = True) -> None:
        """Ray: *done* runs have come back, the last one *run*; *eta* from the mean time per run so far
        (the ETA column needs two completions, and runs come back in bursts)."""
        if self._p is not None:
            self._p.update(self._task, completed=done, description=f"{run.condition.id} {run.arm.id} s{run.seed} "
                                                                   f"{'back' if ok else 'FAILED'}, {eta}")

    def update(self, elapsed: float, total: float, latest: dict[str, tuple[str, float]]) -> None:
        if self._p is None:
            return
        rates = " ".join(f"{n}:{c} {b / 1e6:.1f}" for n, (c, b) in sorted(latest.items()))
        self._p.update(self._task, completed=self._i + min(elapsed / total, 1.0),
                       description=f"{self._label} [{elapsed:4.0f}/{total:g} s] {rates}")


if __name__ == "__main__":
    main()
