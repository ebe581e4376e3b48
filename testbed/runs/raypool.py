"""Independent runs as Ray tasks on a cluster of Linux hosts: the part every ``--ray`` shares.

Two commands spread their runs over a Ray cluster: ``testbed matrix run``
(``cluster.py``) and ``dataset corpus`` (``ccswitch.datasets.corpus``).  Each
run is one Ray task that works into a node-local temporary folder and returns
its result folder packed as a gzip tar (:func:`pack`); the driver unpacks it
(:func:`unpack`) where a local run would have written it.  This module holds
what they have in common:

* :func:`import_ray` -- Ray is the optional extra ``ccswitch[cluster]``;
  missing, a one-line error names the install command.  Nothing imports this
  module (or Ray) unless ``--ray`` is given.
* :func:`connect` -- ``ray.init`` with a one-line error when no cluster answers
  (:func:`check_address` first: a TCP connect with a timeout, because ``ray.init``
  retries an address where nothing listens for minutes).
* :func:`cpus_per_run` -- every task asks for ``min node CPUs / runs_per_node``
  CPUs (default runs_per_node = max(1, CPUs // 2): a run keeps about two cores
  busy), so a node of C CPUs runs about C / that many at once.
* :func:`run_tasks` -- submit one task per item, hand each result to the
  caller as it arrives; a task whose worker or node died is retried by Ray
  (``MAX_RETRIES``), a failure the run reports itself is the caller's business.
  On Ctrl-C (or an exception of the caller's handler) the tasks still pending
  are cancelled.

The error class of the command (``MatrixError``, ``CaptureError``) is passed in,
so each CLI prints the one-line errors it already prints.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

__all__ = ["INSTALL_HINT", "MAX_RETRIES", "ClusterError", "check_address", "connect", "cpus_per_run",
           "failure_text", "import_ray", "pack", "run_tasks", "unpack"]

MAX_RETRIES = 2
"""Ray retries of a task whose worker or node died (not of runs that failed by themselves)."""
INSTALL_HINT = "pip install 'ccswitch[cluster]' (or .venv/bin/pip install -e '.[cluster]')"

T = TypeVar("T")


class ClusterError(RuntimeError):
    """A run on the cluster cannot start or come back (one line with the fix)."""


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())


def import_ray(error: type[Exception] = ClusterError) -> Any:
    """The ``ray`` module, or *error* naming the extra to install."""
    try:
        import ray
    except ImportError:
        raise error(f"--ray needs Ray: {INSTALL_HINT}") from None
    return ray


CONNECT_TIMEOUT_S = 5.0
"""How long a HOST:PORT address may take to accept a TCP connection before ``--ray`` gives up."""


def _unreachable(address: str) -> str | None:
    """Why nothing listens at a ``[ray://]HOST:PORT`` address, or None (also for "auto").

    ``ray.init`` retries an address where nothing listens for minutes; one TCP connect
    with a timeout gives the user the one-line error at once."""
    import socket

    hostport = address.removeprefix("ray://")
    if address == "auto" or ":" not in hostport:
        return None
    host, _, port = hostport.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S):
            return None
    except ValueError:
        return f"{port!r} is not a port"
    except OSError as e:
        return f"nothing answers at {hostport} ({e.strerror or type(e).__name__})"


def check_address(address: str, error: type[Exception] = ClusterError) -> None:
    """One-line *error* if nothing listens at *address*: callers check before they write anything."""
    why = _unreachable(address)
    if why is not None:
        raise error(f"--ray {address}: cannot connect to a Ray cluster ({why}); "
                    "start one with `ray start --head` (docs/cluster.md)")


def connect(address: str, error: type[Exception] = ClusterError) -> Any:
    """``ray.init`` at *address* ("auto": the running cluster); the ``ray`` module."""
    ray = import_ray(error)
    check_address(address, error)
    try:
        ray.init(address=address, ignore_reinit_error=True, log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise error(f"--ray {address}: cannot connect to a Ray cluster ({_one_line(e)}); "
                    "start one with `ray start --head` (docs/cluster.md)") from None
    return ray


def cpus_per_run(ray: Any, runs_per_node: int | None, error: type[Exception] = ClusterError) -> float:
    """The CPUs each task asks for, so that a node runs *runs_per_node* at once (default: its CPUs / 2)."""
    cpus = [n["Resources"].get("CPU", 0.0) for n in ray.nodes() if n.get("Alive")]
    smallest = min((c for c in cpus if c > 0), default=1.0)
    per_node = runs_per_node or max(1, int(smallest) // 2)
    if per_node < 1:
        raise error(f"--runs-per-node must be >= 1, got {per_node}")
    return smallest / per_node


def pack(root: Path, names: Iterable[str]) -> bytes:
    """The files and folders *names* (relative to *root*), as a gzip tar with those relative names."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name in names:
            tar.add(root / name, arcname=name)
    return buf.getvalue()


def unpack(blob: bytes, dest: Path, what: str, *, under: str | None = None,
           error: type[Exception] = ClusterError) -> None:
    """Unpack a :func:`pack` archive into *dest*; *error* for a path that leaves it (or leaves *under*)."""
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
        for m in tar.getmembers():
            parts = PurePosixPath(m.name).parts
            if m.name.startswith(("/", "..")) or ".." in parts or \
                    (under is not None and parts[:len(PurePosixPath(under).parts)] != PurePosixPath(under).parts):
                raise error(f"{what} has an unsafe path {m.name!r}")
        tar.extractall(dest, filter="data")


def failure_text(e: BaseException) -> str:
    """What a run's outcome says when its Ray task itself failed (after the retries)."""
    return f"Ray task failed: {type(e).__name__}: {_one_line(e)[:200]}"


def run_tasks(fn: Callable[..., Any], items: Sequence[T], args: Callable[[T], tuple[Any, ...]], *,
              address: str, runs_per_node: int | None, on_done: Callable[[T, Any, str], None],
              error: type[Exception] = ClusterError, force_cancel: bool = True, cancel_wait_s: float = 0.0) -> None:
    """Run ``fn(*args(item))`` for every item as a Ray task on the cluster at *address*.

    ``on_done(item, result, "")`` as each task returns, ``on_done(item, None, failure_text)``
    for a task that failed itself (its node lost more than MAX_RETRIES times, a Ray error).
    If *on_done* raises, or Ctrl-C arrives, the tasks not done yet are cancelled
    (*force_cancel*: their workers killed; else a KeyboardInterrupt in each, then up to
    *cancel_wait_s* for them to unwind) and the exception goes on.
    """
    ray = connect(address, error)
    remote = ray.remote(max_retries=MAX_RETRIES, retry_exceptions=False)(fn)
    cpus = cpus_per_run(ray, runs_per_node, error)
    refs = {remote.options(num_cpus=cpus).remote(*args(item)): item for item in items}
    pending = list(refs)
    try:
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            item = refs[done[0]]
            try:
                result, why = ray.get(done[0]), ""
            except Exception as e:  # the task itself failed MAX_RETRIES + 1 times (node loss, Ray error)
                result, why = None, failure_text(e)
            on_done(item, result, why)
    except BaseException:
        for ref in pending:
            ray.cancel(ref, force=force_cancel)
        if pending and cancel_wait_s > 0:
            ray.wait(pending, num_returns=len(pending), timeout=cancel_wait_s)
        raise
