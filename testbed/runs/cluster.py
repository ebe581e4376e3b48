"""Matrix runs as Ray tasks on a cluster of Linux hosts (``matrix run --ray auto|ADDRESS``).

Each run of the matrix becomes one Ray task.  On whatever node Ray places it,
the task does exactly what a local run does (:func:`.matrix.execute`: the
child process, the per-run bound, the namespace clean-up) into a node-local
temporary folder, packs the run folder and its log as a gzip tar, and returns
the bytes; the driver unpacks them into ``RESULTS/<scenario>/<arm>/`` so the
results folder is the same whether the runs were local or remote.

* Runs per node: every task asks for ``min node CPUs / runs_per_node`` CPUs
  (default runs_per_node = max(1, CPUs // 2): a run keeps about two cores busy
  with linkemu, iperf3 and the daemons), so a node of C CPUs runs about
  C / that many at once.  Runs on one node never collide: each topology draws
  its own namespace ID, and addresses are per namespace.
* The Ray side (import, connection, CPUs per run, the wait loop, packing) is
  ``raypool.py``, shared with ``dataset corpus --ray``; this module is the
  matrix's part: what a task runs and where its folder goes.
* A node that dies takes its running tasks with it; Ray retries them on
  another node (``max_retries``).  A run that fails by itself (non-zero exit,
  its time bound) is an ordinary failed :class:`Outcome`, not retried here:
  the next ``matrix run`` tries it again.
* Every node needs the repository at the same path as the driver (scenario
  and policy files are passed by path), ``bash scripts/setup.sh`` done, root,
  and Linux >= 6.10 with BTF (docs/cluster.md).

Nothing imports Ray unless ``--ray`` is given; it is the optional extra
``ccswitch[cluster]``.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .matrix import MatrixError, Outcome, Task, set_aside
from .raypool import MAX_RETRIES, failure_text, pack, run_tasks, unpack

__all__ = ["MAX_RETRIES", "pack_run", "run_on_ray", "run_remote", "unpack_run"]


def pack_run(results: Path, task: Task) -> bytes:
    """The run folder(s) and log of *task* under *results*, as a gzip tar relative to its arm folder."""
    arm_dir = results / task.scenario / task.arm
    return pack(arm_dir, [p.name for p in sorted(arm_dir.glob(f"seed-{task.seed}*"))])


def unpack_run(results: Path, task: Task, blob: bytes) -> None:
    """Unpack a run packed by :func:`pack_run` into *results*; an older attempt's folder is kept aside."""
    arm_dir = results / task.scenario / task.arm
    arm_dir.mkdir(parents=True, exist_ok=True)
    set_aside(task.run_dir(results))
    unpack(blob, arm_dir, f"run archive of {task.key}", error=MatrixError)


def run_remote(task: Task, policy: Path | None, timeout_s: float, guard: Sequence[str] = ()) -> dict[str, Any]:
    """The body of one Ray task (runs on the node): the run, packed."""
    import socket

    from .matrix import execute

    tmp = Path(tempfile.mkdtemp(prefix="ccswitch-matrix-"))
    try:
        o = execute(task, tmp, policy, timeout_s, guard=guard)
        return {"ok": o.ok, "wall_s": o.wall_s, "error": o.error, "node": socket.gethostname(),
                "tar": pack_run(tmp, task)}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_on_ray(todo: Sequence[Task], results: Path, policy: Path | None, timeout_s: float, address: str,
               runs_per_node: int | None, on_done: Callable[[Outcome], None],
               guard: Sequence[str] = ()) -> list[Outcome]:
    """Run *todo* as Ray tasks on the cluster at *address* ("auto": the running one)."""
    outcomes: list[Outcome] = []

    def finish(task: Task, r: dict[str, Any] | None, why: str) -> None:
        if r is None:
            o = Outcome(task, False, 0.0, why)
        else:
            try:
                unpack_run(results, task, r["tar"])
                o = Outcome(task, bool(r["ok"]), float(r["wall_s"]),
                            r["error"] + (f" (node {r['node']})" if r["error"] else ""))
            except Exception as e:  # an archive that cannot be unpacked: as if the task had failed
                o = Outcome(task, False, 0.0, failure_text(e))
        outcomes.append(o)
        on_done(o)

    run_tasks(run_remote, todo, lambda t: (t, policy, timeout_s, list(guard)), address=address,
              runs_per_node=runs_per_node, on_done=finish, error=MatrixError)
    return outcomes
