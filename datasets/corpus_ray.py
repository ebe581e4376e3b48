"""A corpus build on a Ray cluster: each run is a Ray task on a node, captured into a node-local
folder and sent back packed; it lands where a local capture writes it (docs/cluster.md)."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from .capture import CaptureError
from .corpus_runs import capture_run, is_captured, write_index
from .corpus_spec import CorpusSpec, Run, SpecError, parse_spec
from .trace import Capture, TraceError

__all__ = ["RayProgress", "capture_on_ray", "capture_one", "capture_remote"]


class RayProgress(Protocol):
    """What :func:`capture_on_ray` reports to (the build's progress bar, corpus.py)."""

    enabled: bool

    def start_ray(self, total: int) -> None: ...

    def finish_run(self, done: int, run: Run, eta: str, ok: bool = True) -> None: ...


def capture_remote(spec_text: str, source: str, rel_dir: str, backend: str, slim: bool) -> dict[str, Any]:
    """The body of one Ray task (on its node): the run captured into a node-local folder, packed.

    The capture is a child process (``python -m ccswitch.datasets.corpus one``), not the
    Ray worker itself: the namespace set-up forks (pyroute2), and a fork of a Ray worker
    that receives a SIGTERM takes the worker down with it.  A cancelled task (Ctrl-C, a
    failed run without --keep-going) stops the child's process group like a stopped
    matrix run, and namespaces whose owner died are removed (never those of live runs)."""
    import socket
    import subprocess
    import sys
    import tempfile

    from ccswitch.testbed.runs.matrix import _cleanup_namespaces, _kill, _last_error
    from ccswitch.testbed.runs.raypool import pack

    t0 = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="ccswitch-corpus-"))
    result: dict[str, Any] = {"ok": False, "error": "", "node": socket.gethostname(), "tar": b""}
    try:
        (tmp / "spec.toml").write_text(spec_text)
        argv = [sys.executable, "-m", "ccswitch.datasets.corpus", "one", str(tmp / "spec.toml"), rel_dir, str(tmp),
                "--source", source, "--backend", backend, *(["--slim"] if slim else [])]
        log = tmp / "capture.log"
        with log.open("w") as fh:
            proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
            try:
                while True:
                    try:
                        rc = proc.wait(timeout=1.0)
                        break
                    except subprocess.TimeoutExpired:
                        continue
            except BaseException:  # the task was cancelled
                _kill(proc)
                raise
            finally:
                _cleanup_namespaces()
        if rc == 0 and is_captured(tmp / rel_dir):
            result.update(ok=True, tar=pack(tmp, [rel_dir]))
        else:
            result["error"] = f"exit {rc}: {_last_error(log)}"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result["wall_s"] = time.monotonic() - t0
    return result


def capture_one(spec_file: Path, rel_dir: str, root: Path, source: str, backend: str, slim: bool) -> None:
    """The child of :func:`capture_remote`: run *rel_dir* of the spec into ROOT/*rel_dir*."""
    from ccswitch.dataplane import install_signal_handlers

    install_signal_handlers()
    spec = parse_spec(spec_file.read_text(), source)
    run = next((r for r in spec.runs if r.rel_dir == rel_dir), None)
    if run is None:
        raise SpecError(f"{source}: no run {rel_dir}")
    capture_run(root / rel_dir, spec, run, backend, slim, None)


def capture_on_ray(todo: Sequence[Run], spec: CorpusSpec, out: Path, backend: str, slim: bool, keep_going: bool,
                   address: str, runs_per_node: int | None, bar: RayProgress, log: Callable[[str], None],
                   failures: list[str]) -> None:
    """*todo* as Ray tasks; each capture comes back packed and lands at OUT/CONDITION/ARM--sSEED."""
    from ccswitch.testbed.runs.raypool import run_tasks, unpack

    t_start = time.monotonic()
    done = 0

    def finish(run: Run, r: dict[str, Any] | None, why: str) -> None:
        nonlocal done
        done += 1
        run_dir = out / run.rel_dir
        if r is not None and r["ok"]:
            try:
                if run_dir.exists():
                    shutil.rmtree(run_dir)  # an interrupted attempt
                unpack(r["tar"], out, f"capture archive of {run.rel_dir}", under=run.rel_dir, error=CaptureError)
                Capture.open(run_dir).validate()
            except (CaptureError, TraceError, OSError) as e:
                why = f"the capture from node {r['node']} did not unpack: {' '.join(str(e).split())}"
        elif r is not None:
            why = f"{r['error']} (node {r['node']})"
        if why:
            failures.append(f"{run.rel_dir}: {why}")
            log(f"corpus {spec.name}: FAILED {run.rel_dir}: {why}")
            shutil.rmtree(run_dir, ignore_errors=True)
            if not keep_going:
                write_index(out, spec)
                raise CaptureError(f"{run.rel_dir}: {why}")
        elapsed = time.monotonic() - t_start
        eta = elapsed / done * (len(todo) - done)
        eta_text = f"ETA {int(eta // 3600)}:{int(eta % 3600 // 60):02d}:{int(eta % 60):02d}"
        bar.finish_run(done, run, eta_text, ok=not why)
        if not why and not bar.enabled:
            log(f"corpus {spec.name}: [{done}/{len(todo)}] {run.rel_dir} done on {r['node'] if r else '?'} "
                f"({elapsed / 60:.1f} min, {eta_text})")
        write_index(out, spec)

    bar.start_ray(len(todo))
    run_tasks(capture_remote, todo, lambda run: (spec.text, spec.source, run.rel_dir, backend, slim), address=address,
              runs_per_node=runs_per_node, on_done=finish, error=CaptureError, force_cancel=False,
              cancel_wait_s=60.0)
