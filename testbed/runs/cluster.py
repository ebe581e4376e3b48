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

import io
import shutil
import tarfile
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .matrix import MatrixError, Outcome, Task, set_aside

MAX_RETRIES = 2
"""Ray retries of a task whose worker or node died (not of runs that failed by themselves)."""


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise MatrixError("--ray needs Ray: pip install 'ccswitch[cluster]' (or .venv/bin/pip install -e '.[cluster]')"
                          ) from None
    return ray


def pack_run(results: Path, task: Task) -> bytes:
    """The run folder(s) and log of *task* under *results*, as a gzip tar relative to its arm folder."""
    arm_dir = results / task.scenario / task.arm
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for p in sorted(arm_dir.glob(f"seed-{task.seed}*")):
            tar.add(p, arcname=p.name)
    return buf.getvalue()


def unpack_run(results: Path, task: Task, blob: bytes) -> None:
    """Unpack a run packed by :func:`pack_run` into *results*; an older attempt's folder is kept aside."""
    arm_dir = results / task.scenario / task.arm
    arm_dir.mkdir(parents=True, exist_ok=True)
    set_aside(task.run_dir(results))
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
        for m in tar.getmembers():
            if m.name.startswith(("/", "..")) or ".." in Path(m.name).parts:
                raise MatrixError(f"run archive of {task.key} has an unsafe path {m.name!r}")
        tar.extractall(arm_dir, filter="data")


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


def _cpus_per_run(ray: Any, runs_per_node: int | None) -> float:
    cpus = [n["Resources"].get("CPU", 0.0) for n in ray.nodes() if n.get("Alive")]
    smallest = min((c for c in cpus if c > 0), default=1.0)
    per_node = runs_per_node or max(1, int(smallest) // 2)
    if per_node < 1:
        raise MatrixError(f"--runs-per-node must be >= 1, got {per_node}")
    return smallest / per_node


def run_on_ray(todo: Sequence[Task], results: Path, policy: Path | None, timeout_s: float, address: str,
               runs_per_node: int | None, on_done: Callable[[Outcome], None],
               guard: Sequence[str] = ()) -> list[Outcome]:
    """Run *todo* as Ray tasks on the cluster at *address* ("auto": the running one)."""
    ray = _ray()
    try:
        ray.init(address=address, ignore_reinit_error=True, log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise MatrixError(f"--ray {address}: cannot connect to a Ray cluster ({' '.join(str(e).split())}); "
                          "start one with `ray start --head` (docs/cluster.md)") from None
    remote = ray.remote(max_retries=MAX_RETRIES, retry_exceptions=False)(run_remote)
    cpus = _cpus_per_run(ray, runs_per_node)
    refs = {remote.options(num_cpus=cpus).remote(t, policy, timeout_s, list(guard)): t for t in todo}
    outcomes: list[Outcome] = []
    try:
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            task = refs[done[0]]
            try:
                r = ray.get(done[0])
                unpack_run(results, task, r["tar"])
                o = Outcome(task, bool(r["ok"]), float(r["wall_s"]), r["error"] + (f" (node {r['node']})"
                                                                                    if r["error"] else ""))
            except Exception as e:  # the task itself failed MAX_RETRIES + 1 times (node loss, Ray error)
                o = Outcome(task, False, 0.0, f"Ray task failed: {type(e).__name__}: {' '.join(str(e).split())[:200]}")
            outcomes.append(o)
            on_done(o)
    except KeyboardInterrupt:
        for ref in refs:
            ray.cancel(ref, force=True)
        raise
    return outcomes
