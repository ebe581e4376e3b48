"""sd_notify(3) without libsystemd: one datagram to $NOTIFY_SOCKET.

The protocol is a newline-separated list of VAR=VALUE in one AF_UNIX
datagram; a socket path starting with "@" is in the abstract namespace.
Used for READY=1 (Type=notify), RELOADING=1/READY=1 around a SIGHUP reload,
STOPPING=1, STATUS=... and WATCHDOG=1 (every tick when $WATCHDOG_USEC is
set).  Without $NOTIFY_SOCKET every call is a no-op.
"""

from __future__ import annotations

import os
import socket
import time


class Notifier:
    def __init__(self) -> None:
        addr = os.environ.get("NOTIFY_SOCKET", "")
        self._addr = ("\0" + addr[1:]) if addr.startswith("@") else addr
        self._sock: socket.socket | None = None
        if self._addr:
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        usec = os.environ.get("WATCHDOG_USEC", "")
        pid = os.environ.get("WATCHDOG_PID", "")
        self.watchdog_s = int(usec) / 1e6 if usec.isdigit() and (not pid or pid == str(os.getpid())) else 0.0
        self._last_ping = 0.0

    @property
    def enabled(self) -> bool:
        return self._sock is not None

    def notify(self, *lines: str) -> bool:
        if self._sock is None:
            return False
        try:
            self._sock.sendto("\n".join(lines).encode(), self._addr)
            return True
        except OSError:
            return False

    def ready(self, status: str = "") -> None:
        self.notify("READY=1", f"MAINPID={os.getpid()}", *([f"STATUS={status}"] if status else []))

    def reloading(self) -> None:
        mono_us = int(time.clock_gettime(time.CLOCK_MONOTONIC) * 1e6)
        self.notify("RELOADING=1", f"MONOTONIC_USEC={mono_us}")

    def stopping(self) -> None:
        self.notify("STOPPING=1")

    def status(self, text: str) -> None:
        self.notify(f"STATUS={text}")

    def watchdog(self) -> None:
        """WATCHDOG=1 at most every watchdog_s / 4."""
        if not self.watchdog_s:
            return
        now = time.monotonic()
        if now - self._last_ping >= self.watchdog_s / 4:
            self._last_ping = now
            self.notify("WATCHDOG=1")

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
