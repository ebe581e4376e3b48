"""Starvation escape: a flow on a loss-based CCA that is being beaten leaves for one that is not.

Why.  On the dev split the shipped DQN leaves most flows on CUBIC, and the
commonest failure is a managed CUBIC/Reno flow starved beside a flow that does
not back off on loss (an unmanaged BBR or PCC host: 14 of the 26 failing dev
runs of 25 Nov, docs/learning.md "What the dev failures are").  Those flows
are easy to tell from their own counters: the managed CUBIC/Reno flows below
half their fair share lost a median 5.3 % of their segments at a median cwnd
of 7 segments; the others 0.9 % at 20.  That is the loss-limited regime of a
loss-based sender (Mathis: cwnd ~ 1.22 / sqrt(p) segments, 6 at p = 4 %):
whatever the link's capacity, the flow cannot grow while it stays on that
CCA, whether the loss comes from a competitor that fills the queue or from
the medium.  The policy's Q-values for those states differ by 1-3 % between
CCAs, inside the guard's relative margin, so the policy alone never moves.

Rule, per managed flow at each decision (vectorised over the flows):

    stuck   the flow runs a loss-based CCA (LOSS_BASED), its interval's
            loss_rate >= guard.escape_loss, its cwnd <= guard.escape_cwnd_segs and
            its RTT inflation (rtt_ratio, srtt / min RTT) < guard.escape_max_rtt_ratio
    escape  stuck on every decision for guard.escape_after_s: propose a switch
            to guard.escape_to, reason "escape: ...".  It goes through
            Guard.explore, so pins, hold-offs, dwell, desync jitter and the
            switch cap still apply; once applied, every other allowed CCA is
            held off for guard.holdoff_s, so the policy does not walk the flow
            straight back into the trap.

guard.escape_loss = 0 turns the rule off, the default: on two dev seeds (4 %, 10
segments, 3 s) it met fewer scenarios than the policy alone and did not lift the
hog runs' worst share (docs/learning.md has the table and why).

The RTT gate (guard.escape_max_rtt_ratio; inf = none) keeps the rule to loss
that does not come with a queue: random loss of the medium.  Read off the
shipped policy's dev runs (89 runs, 26 Nov; docs/learning.md): loss-limited
managed CUBIC/Reno flows beside an unmanaged BBR/PCC host ran at a median RTT
inflation of 2.5 (the competitor keeps the queue full), those on a lossy link
with no such host at 1.09 (p90 at most 1.44), at 19-36 % utilisation; on BBR the
same flows made 9-19 Mbit/s against 1-3 on CUBIC.  Moving a flow that fills no
queue takes nothing from anyone; moving one that competes with a queue-filler
only starts a fight the other loss-based flows lose.  The ratio cannot see
buffer sizes: behind a very shallow buffer (0.3 BDP) a hog keeps it low too.
Off by default as well: on dev (seed 1) it fired in 2 scenarios and the flow
that escaped a lossy link took it from the managed flows that stayed (docs/learning.md,
"The escape with an RTT gate").  A flow not stuck on a decision
starts its count again.  Not kept across a restart (a restarted daemon sees
the flow stuck again after escape_after_s).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

LOSS_BASED = ("cubic", "reno")
"""CCAs whose window shrinks with every loss: the ones a lossy, contested path can starve."""


@dataclass(frozen=True)
class EscapeConfig:
    loss: float = 0.0  # guard.escape_loss (0 = off)
    cwnd_segs: float = 10.0  # guard.escape_cwnd_segs
    after_s: float = 3.0  # guard.escape_after_s
    to: str = "bbr"  # guard.escape_to
    max_rtt_ratio: float = float("inf")  # guard.escape_max_rtt_ratio

    @classmethod
    def from_guard(cls, guard: Mapping[str, Any]) -> EscapeConfig:
        return cls(loss=float(guard.get("escape_loss", cls.loss)),
                   cwnd_segs=float(guard.get("escape_cwnd_segs", cls.cwnd_segs)),
                   after_s=float(guard.get("escape_after_s", cls.after_s)), to=str(guard.get("escape_to", cls.to)),
                   max_rtt_ratio=float(guard.get("escape_max_rtt_ratio", cls.max_rtt_ratio)))

    @property
    def enabled(self) -> bool:
        return self.loss > 0


class StarvationDetector:
    """Per flow slot (the controller's FlowIndex), since when the flow has been stuck (NaN: not stuck)."""

    def __init__(self, cfg: EscapeConfig) -> None:
        self.cfg = cfg
        self.since = np.full(64, np.nan)

    def grow(self, size: int) -> None:
        if size > len(self.since):
            self.since = np.concatenate([self.since, np.full(max(size, 2 * len(self.since)) - len(self.since),
                                                             np.nan)])

    def reset(self, slots: np.ndarray) -> None:
        """New flows (or slots reused for them) start unstuck."""
        self.since[slots] = np.nan

    def update(self, slots: np.ndarray, loss_based: np.ndarray, loss_rate: np.ndarray, cwnd: np.ndarray,
               now: float, rtt_ratio: np.ndarray | None = None) -> np.ndarray:
        """One decision for the flows in *slots* (already grown to: the controller grows with its
        FlowIndex); returns the boolean mask of those due to escape.  A NaN rtt_ratio (no RTT sample)
        does not pass the RTT gate."""
        c = self.cfg
        with np.errstate(invalid="ignore"):
            stuck = loss_based & (np.nan_to_num(loss_rate, nan=0.0) >= c.loss) & (cwnd <= c.cwnd_segs)
            if rtt_ratio is not None and c.max_rtt_ratio != float("inf"):
                stuck &= rtt_ratio < c.max_rtt_ratio
        prev = self.since[slots]
        self.since[slots] = np.where(stuck, np.where(np.isnan(prev), now, prev), np.nan)
        return stuck & (now - self.since[slots] >= c.after_s - 1e-9)

    def reason(self, loss_rate: float, cwnd: float, since: float, now: float) -> str:
        gate = "" if self.cfg.max_rtt_ratio == float("inf") else f", RTT < {self.cfg.max_rtt_ratio:g} x min"
        return (f"escape: {100 * loss_rate:.1f} % loss at cwnd {cwnd:.0f} for {now - since:.0f} s "
                f"(loss-limited; >= {100 * self.cfg.loss:g} % and <= {self.cfg.cwnd_segs:g} segments{gate})")
