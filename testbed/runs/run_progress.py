"""The progress line of a run on stderr: elapsed / total and each flow's current CCA and rate."""

from __future__ import annotations

import math
import sys
from typing import IO


class Progress:
    """One line on stderr: elapsed / total and each flow's current CCA and rate."""

    def __init__(self, label: str, total_s: float, stream: IO[str] | None = None, enabled: bool = True) -> None:
        self.label, self.total_s = label, total_s
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = self.stream.isatty()
        self._last_line = -math.inf

    def update(self, elapsed_s: float, flows: dict[str, tuple[str, float]]) -> None:
        if not self.enabled:
            return
        parts = [f"{n} {cca} {bps / 1e6:6.1f}" for n, (cca, bps) in sorted(flows.items())]
        text = (f"ccswitch testbed: {self.label} [{min(elapsed_s, self.total_s):5.1f}/{self.total_s:g} s] "
                + (" | ".join(parts) + " Mbit/s" if parts else "starting"))
        if self.tty:
            self.stream.write("\r\x1b[K" + text)
            self.stream.flush()
        elif elapsed_s - self._last_line >= 10.0:
            self.stream.write(text + "\n")
            self.stream.flush()
            self._last_line = elapsed_s

    def done(self, text: str) -> None:
        if not self.enabled:
            return
        self.stream.write(("\r\x1b[K" if self.tty else "") + f"ccswitch testbed: {self.label} {text}\n")
        self.stream.flush()
