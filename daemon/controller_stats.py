"""TickStats: the controller's counters and tick times, as `ccswitch status` and the metrics report them."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class TickStats:
    n: int = 0
    last_ms: float = 0.0
    max_ms: float = 0.0
    sum_ms: float = 0.0
    flows: int = 0
    managed: int = 0
    decisions: int = 0
    switches: int = 0
    reverts: int = 0
    manual: int = 0
    failed: int = 0
    explores: int = 0
    escapes: int = 0  # starvation escapes (escape.py)
    idle: int = 0  # ticks without a monitor read (daemon.sample_every_tick = false, no --record)
    recent_ms: deque[float] = field(default_factory=lambda: deque(maxlen=300))
    recent_sample_ms: deque[float] = field(default_factory=lambda: deque(maxlen=300))

    def add(self, ms: float, sample_ms: float = 0.0) -> None:
        self.recent_sample_ms.append(sample_ms)
        self.n += 1
        self.last_ms = ms
        self.max_ms = max(self.max_ms, ms)
        self.sum_ms += ms
        self.recent_ms.append(ms)

    def as_dict(self) -> dict[str, Any]:
        def pct(values: Iterable[float], q: float) -> float:
            r = sorted(values)
            return r[min(len(r) - 1, int(q * len(r)))] if r else 0.0

        own = [a - b for a, b in zip(self.recent_ms, self.recent_sample_ms, strict=True)]
        return {"ticks": self.n, "tick_ms_last": self.last_ms, "tick_ms_mean": self.sum_ms / max(self.n, 1),
                "tick_ms_p50": pct(self.recent_ms, 0.5), "tick_ms_p99": pct(self.recent_ms, 0.99),
                "tick_ms_max": self.max_ms, "sample_ms_p50": pct(self.recent_sample_ms, 0.5),
                "sample_ms_p99": pct(self.recent_sample_ms, 0.99), "own_ms_p50": pct(own, 0.5),
                "own_ms_p99": pct(own, 0.99), "flows": self.flows,
                "managed": self.managed, "decisions": self.decisions, "switches": self.switches,
                "reverts": self.reverts, "manual": self.manual, "failed": self.failed,
                "explores": self.explores, "escapes": self.escapes, "idle_ticks": self.idle}
