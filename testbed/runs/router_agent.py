"""What every router-side agent beside linkemu shares: a thread on linkemu's control socket.

The agents (paper 000's DualPI2 agent, :mod:`.dualpi2_agent`; paper 001's LFQ
agent, :mod:`.lfq_agent`) each run their own control step every interval; this
base holds the rest: connecting to the socket (``start()`` raises
:class:`~.linkemu_control.LinkemuControlError` when it is not there), the thread,
and stopping (``stop()``: the thread joined, then the subclass's ``_release``
hands the queue back, then the socket closed).  A subclass sets ``name`` and
implements ``_run`` (and ``_release`` if the queue must be handed back).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Self

from .linkemu_control import LinkemuControl

__all__ = ["RouterAgentLoop"]


class RouterAgentLoop:
    """A thread that runs ``_run`` against linkemu's control socket from ``start()`` to ``stop()``."""

    name = "router-agent"

    def __init__(self, socket_path: str | Path, *, direction: str, interval_s: float,
                 log_csv: str | Path | None) -> None:
        self.socket_path = Path(socket_path)
        self.direction = direction
        self.interval_s = interval_s
        self.log_csv = Path(log_csv) if log_csv else None
        self.error: str | None = None
        self.steps = 0
        self.cpu_s = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ctl: LinkemuControl | None = None

    def start(self) -> Self:
        self._ctl = LinkemuControl(self.socket_path)
        self._ctl.__enter__()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()
        return self

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        if self._ctl is not None:
            self._release(self._ctl)
            self._ctl.__exit__(None, None, None)
            self._ctl = None

    def _run(self) -> None:
        raise NotImplementedError

    def _release(self, ctl: LinkemuControl) -> None:
        """Hand the queue back to linkemu after the thread ended (default: leave it as it is)."""
