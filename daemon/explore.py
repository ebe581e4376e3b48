"""Exploration: measure the CCAs a policy cannot score yet (paper 002, Algorithm 1, steps 6-8).

The heuristic (paper 002's evaluation function, policies.py) compares
candidates on measurements, but a live flow only shows the CCA it runs: a CCA
the flow has not run within policy.heuristic_memory_s (and no flow on its path
runs now) has no score (NaN), and the guard never chooses an unscored CCA.
Without exploring, a lone flow -- one flow per client namespace, the
testbed's case -- would keep its first CCA forever.  Algorithm 1 of paper 002
implies the remedy: switch, monitor, compare with before, confirm or revert.

One exploration round of a flow, driven from the controller's decisions:

start  policy.explore is on, the flow is managed, some allowed CCA has no score
       (and is neither held off nor failed recently), and either
       policy.explore_every_s have passed since the flow's last round started
       (its first round: as soon as it is managed) or its Thratio is below
       policy.explore_thratio (a poor share of its path; 0 = never).
try    each allowed CCA without a score in turn (policy actions order):
       propose a switch to it, reason "explore: ...".  The guard takes it like
       a policy switch minus the hysteresis (an unscored choice cannot win by
       a margin): a pin, a hold-off, a post-switch evaluation in progress,
       guard.min_dwell_s and guard.max_switches_per_min still block it (the
       proposal is repeated on the next decision), and the post-switch
       evaluation still reverts a candidate that lowers the reward by more than
       guard.revert_threshold (that candidate is then held off).  So the flow
       runs a candidate for at least the evaluation window and the dwell time;
       the heuristic's score of it is its newest interval under it.
pick   every allowed CCA has a score: switch to the best-scoring one when it
       beats the current one by guard.margin ("explore: round done, ..."),
       without hysteresis, within dwell and cap; then the round ends.
A failed switch to a candidate skips it for policy.explore_every_s.  Between
rounds the policy decides as usual (margin and consecutive wins) on the
scores it has; they expire after heuristic_memory_s, so the next round
measures again.  Rounds are not kept across a restart (nor is the
heuristic's memory).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ExploreConfig:
    enabled: bool = True
    every_s: float = 60.0  # policy.explore_every_s
    thratio: float = 0.5  # policy.explore_thratio (0: no early rounds)
    margin: float = 0.05  # guard.margin: the pick must win by this

    @classmethod
    def from_config(cls, policy: Mapping[str, Any], guard: Mapping[str, Any]) -> ExploreConfig:
        return cls(enabled=bool(policy["explore"]), every_s=float(policy["explore_every_s"]),
                   thratio=float(policy["explore_thratio"]), margin=float(guard["margin"]))


@dataclass
class Proposal:
    kind: str  # "try" | "pick"
    to: str
    reason: str


@dataclass
class Round:
    started: float
    why: str
    active: bool = True
    failed: dict[str, float] = field(default_factory=dict)  # cca -> not before


class Explorer:
    def __init__(self, cfg: ExploreConfig, clock: Callable[[], float] = time.time):
        self.cfg = cfg
        self.clock = clock
        self.rounds: dict[int, Round] = {}
        self.pending: dict[int, Proposal] = {}  # proposals of the current decision, by flow

    @property
    def active(self) -> set[int]:
        """Flows with a round in progress (the controller asks them even when the policy is content)."""
        return {f for f, r in self.rounds.items() if r.active}

    def forget(self, alive: Iterable[int]) -> None:
        keep = set(alive)
        for f in [f for f in self.rounds if f not in keep]:
            del self.rounds[f]

    def propose(self, flow: int, current: str, scores: Mapping[str, float], thratio: float,
                held_off: Iterable[str] = ()) -> Proposal | None:
        """*scores*: the policy's score per allowed CCA (NaN: unscored); *held_off*: the guard's hold-offs."""
        now = self.clock()
        r = self.rounds.get(flow)
        held = set(held_off)
        failed = {a for a, until in (r.failed.items() if r else ()) if until > now}
        untried = [a for a, v in scores.items() if math.isnan(v) and a != current and a not in held
                   and a not in failed]
        if r is None or not r.active:
            if not untried:
                return None
            if r is None:
                why = "first round"
            elif now - r.started >= self.cfg.every_s:
                why = f"{now - r.started:.0f} s since the last round"
            elif self.cfg.thratio > 0 and thratio < self.cfg.thratio:
                why = f"Thratio {thratio:.2f} < {self.cfg.thratio:g}"
            else:
                return None
            r = self.rounds[flow] = Round(now, why, failed=r.failed if r else {})
        if untried:
            p = Proposal("try", untried[0], f"explore: trying {untried[0]} (no measurement of it; {r.why})")
            self.pending[flow] = p
            return p
        # every candidate measured: the best one, if it wins by the margin
        cands = {a: v for a, v in scores.items() if not math.isnan(v) and a not in held}
        if not cands:
            r.active = False
            return None
        best = max(cands, key=lambda a: (cands[a], a == current))
        cur = cands.get(current, -math.inf)
        if best == current or cands[best] - cur < self.cfg.margin:
            r.active = False
            return None
        shown = ", ".join(f"{a} {v:.3f}" for a, v in sorted(cands.items(), key=lambda kv: -kv[1]))
        p = Proposal("pick", best, f"explore: round done, {best} scored best ({shown})")
        self.pending[flow] = p
        return p

    def applied(self, flow: int, to: str, ok: bool) -> None:
        """The outcome of a proposed switch that the guard let through."""
        p = self.pending.pop(flow, None)
        r = self.rounds.get(flow)
        if p is None or r is None:
            return
        if not ok:
            r.failed[to] = self.clock() + self.cfg.every_s
        elif p.kind == "pick":
            r.active = False
