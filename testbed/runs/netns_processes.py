"""Running commands and threads inside a namespace, and owning what they start.

* :func:`run_in` / :func:`popen_in` -- a command inside a namespace via
  ``nsenter --net=/run/netns/NAME`` (no new mount namespace, so ``/sys/fs/bpf``
  stays visible); :func:`wait_for_stderr` and :func:`stop_process` (SIGTERM,
  grace, SIGKILL) for the processes started that way.
* :func:`entered` -- the *current thread* moved into a namespace with ``setns(2)``
  and back.
* :class:`Resource` (the ``with`` protocol over open/close) and
  :class:`LiveHandles` (what is still open at interpreter exit gets closed):
  the base of every namespace or process owner of the testbed.
"""

from __future__ import annotations

import abc
import atexit
import contextlib
import ctypes
import ctypes.util
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import Any, Generic, Self, TypeVar

from .netns_lifecycle import NetnsError, ns_file, nsenter_argv

CLONE_NEWNET = 0x40000000


class Resource(abc.ABC):
    """Base of the testbed's context managers (namespace sets, processes).

    ``with X(...) as x`` calls :meth:`open` on entry and :meth:`leave` on exit,
    also through an exception; :meth:`leave` closes by default.
    """

    def open(self) -> None:  # noqa: B027 (optional hook: most acquire in open, processes in __init__)
        """Acquire what the handle holds (default: nothing, the constructor did)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release everything (idempotent)."""

    def leave(self, failed: bool) -> None:
        """End of the ``with`` block; *failed*: it is being left through an exception."""
        self.close()

    def __enter__(self) -> Self:
        self.open()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.leave(exc_type is not None)


_H = TypeVar("_H")


class LiveHandles(Generic[_H]):
    """Handles (namespace sets, processes) that must not outlive the interpreter.

    Owners :meth:`add` a handle when it starts holding something and
    :meth:`discard` it when released; at interpreter exit *close* is called on
    every handle still registered (errors suppressed).  The set holds strong
    references, so a forgotten handle is still closed.
    """

    def __init__(self, close: Callable[[_H], object]) -> None:
        self._close = close
        self._handles: set[_H] = set()
        self._lock = threading.Lock()
        atexit.register(self.close_all)

    def add(self, handle: _H) -> None:
        with self._lock:
            self._handles.add(handle)

    def discard(self, handle: _H) -> None:
        with self._lock:
            self._handles.discard(handle)

    def forget_all(self) -> None:
        """Drop every handle without closing it (a forked child's copy)."""
        self._handles.clear()

    def close_all(self) -> None:
        with self._lock:
            live = list(self._handles)
        for handle in live:
            with contextlib.suppress(Exception):
                self._close(handle)


def run_in(name: str, argv: Sequence[str], *, check: bool = True, **kwargs: Any) -> subprocess.CompletedProcess[Any]:
    """Run *argv* inside namespace *name* and wait (``subprocess.run`` semantics).

    ``check`` defaults to True; other keyword arguments go to ``subprocess.run``.
    """
    return subprocess.run(nsenter_argv(name, argv), check=check, **kwargs)


def popen_in(name: str, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
    """Start *argv* inside namespace *name*; keyword arguments go to ``Popen``.

    ``nsenter`` execs the command, so the returned PID is the command's own.
    """
    return subprocess.Popen(nsenter_argv(name, argv), **kwargs)


def wait_for_stderr(proc: subprocess.Popen[Any], needle: bytes, timeout_s: float = 30.0) -> None:
    """Block until *needle* appears on *proc*'s stderr (a pipe); RuntimeError with its last output if the
    process exits first or *timeout_s* passes (a loaded host can take seconds to import numpy)."""
    assert proc.stderr is not None
    os.set_blocking(proc.stderr.fileno(), False)
    seen, end = b"", time.monotonic() + timeout_s
    while time.monotonic() < end:
        seen += proc.stderr.read() or b""
        if needle in seen:
            return
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[-1]!r}... exited before {needle!r}: "
                               f"{seen.decode(errors='replace')[-500:]}")
        time.sleep(0.05)
    raise RuntimeError(f"no {needle!r} after {timeout_s} s: {seen.decode(errors='replace')[-500:]}")


def stop_process(proc: subprocess.Popen[Any], grace_s: float) -> None:
    """SIGTERM *proc* if it still runs, SIGKILL it after *grace_s* seconds; reap it."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


_libc: ctypes.CDLL | None = None


def _setns(fd: int) -> None:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns(CLONE_NEWNET): {os.strerror(err)}")


@contextlib.contextmanager
def entered(name: str) -> Iterator[None]:
    """Move the *current thread* into network namespace *name* (or a ns file path).

    Other (running) threads of the process are unaffected; threads *started*
    inside inherit the namespace, like any child task.  On exit (also on exceptions) the
    thread returns to the namespace it was in before.  Sockets created inside stay
    in the namespace they were created in.  Must be exited on the thread that
    entered it (do not ``await`` across threads inside).
    """
    target = os.open(ns_file(name), os.O_RDONLY | os.O_CLOEXEC)
    try:
        orig = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    except BaseException:
        os.close(target)
        raise
    try:
        _setns(target)
        os.close(target)
        target = -1
        try:
            yield
        finally:
            try:
                _setns(orig)
            except OSError as e:  # pragma: no cover - should never happen
                raise NetnsError(f"could not restore the thread's network namespace: {e}") from e
    finally:
        if target >= 0:
            os.close(target)
        os.close(orig)
