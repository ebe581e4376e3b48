"""The guard: what stands between the policy's wish and a socket's congestion control.

A policy scores every allowed CCA for a flow on each decision (Q-values of
the DQN, or the heuristic's scores); the guard turns that into keep, switch
or revert, with a reason.  Per flow, in this order:

1. pinned     A manual override (`ccswitch switch FLOW CCA` through the
              daemon) fixes the flow's CCA until released: always keep.
2. hold-off   Choices reverted recently (step 8 below) are removed from the
              candidates until their hold-off time passes.
3. preferred  best = argmax of the scores over the remaining candidates.
              best == current: keep (and the hysteresis streak restarts).
4. margin     score[best] - score[current] < max(margin, margin_rel * |score[current]|):
              keep, streak restarts.  (A current CCA the policy cannot score, e.g.
              reno, scores -inf.)  The relative part follows the DQN's Q-values,
              whose scale varies with the state (-20 to -100 on the dev split).
5. streak     The same best must win by the margin on `consecutive`
              decisions in a row (hysteresis): until then keep.
6. evaluating A switch is under post-switch evaluation: keep.
7. dwell      Less than min_dwell_s since the flow's last switch: keep.
   desync     Before the flow's random "not before" time: keep (see below).
8. cap        max_switches_per_min switches of this flow in the last 60 s: keep.
9. damping    best is the CCA a confirmed policy switch left less than
              return_holdoff_s ago: keep (flap damping; see below).
   Otherwise: switch to best.

Flap damping: daemons on different hosts react to each other through the
shared bottleneck.  Each flow's best CCA depends on what the others run, so
two policies can chase each other (A leaves CUBIC for PCC, B's state changes,
B leaves PCC, A's state changes, A goes back...): docs/results-daemon.md saw
flows flip between CUBIC and PCC every 6-15 s.  Once a switch is confirmed by
the post-switch evaluation, going back to the CCA it left is blocked for
return_holdoff_s (only going back: a third CCA is still allowed, and a revert
is the evaluation's business, not blocked).

Desynchronisation: daemons on different clients see the same bottleneck and
run the same policy, so they tend to decide the same thing at the same moment
(both flows leave BBR together and the unfairness flips sides: issue 11's
failure pattern (a)).  With jitter_s > 0 each flow draws a random delay,
uniform in [0, jitter_s], when it is first seen and at each switch; a policy
or exploration switch waits until min_dwell_s plus that delay have passed.
The draw comes from each daemon's own random source, so one of two daemons
usually moves first and the other's policy sees the result before its own
move is due.  Reverts are not delayed.  docs/learning.md ("Coordination")
has the measurement that set the default.

Post-switch evaluation (paper 002, Algorithm 1, step 8): every tick the
controller feeds each flow's reward (envs/reward.py) to :meth:`Guard.observe`.
At a policy switch the guard notes the mean reward of the eval_window_s
before it; once eval_window_s has passed after the switch it compares the
mean reward since the switch.  Worse by more than revert_threshold: revert to
the previous CCA and hold the tried one off for holdoff_s; otherwise confirm.
Reverts and manual switches are not evaluated themselves (no ping-pong), and
a revert is never blocked by dwell, hysteresis or the cap (it undoes harm).

Exploration switches (explore.py: trying a CCA the policy cannot score yet)
go through :meth:`Guard.explore`: steps 1, 2 and 6-8 apply, 3-5 do not (an
unscored choice cannot win by a margin); they are evaluated like policy
switches.

Times are wall-clock seconds from an injectable clock, so the state survives
a restart of the daemon (:meth:`to_state`, :meth:`from_state`) and the unit
tests run on a fake clock.
"""

from __future__ import annotations

import math
import random
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

CAP_WINDOW_S = 60.0


@dataclass(frozen=True)
class GuardConfig:
    min_dwell_s: float = 5.0
    margin: float = 0.05
    margin_rel: float = 0.1
    consecutive: int = 3
    max_switches_per_min: int = 4
    eval_window_s: float = 0.0
    revert_threshold: float = 0.1
    holdoff_s: float = 60.0
    return_holdoff_s: float = 0.0
    jitter_s: float = 3.0

    @classmethod
    def from_mapping(cls, m: Mapping[str, Any]) -> GuardConfig:
        return cls(**{k: m[k] for k in cls.__dataclass_fields__ if k in m})


@dataclass
class Verdict:
    """The guard's answer for one flow on one decision."""

    action: str  # "keep" | "switch" | "revert"
    to: str  # the CCA after the action (== current for keep)
    reason: str
    best: str = ""  # what the policy preferred

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


@dataclass
class Evaluation:
    """A policy switch under post-switch evaluation."""

    at: float
    prev: str
    to: str
    before: float  # mean reward over the window before the switch (NaN: unknown)
    after_sum: float = 0.0
    after_n: int = 0


@dataclass
class FlowGuard:
    first_seen: float
    original: str  # CCA when the daemon first saw the flow
    last_switch: float = -math.inf
    switches: deque[float] = field(default_factory=deque)
    pin: str | None = None
    holdoff: dict[str, float] = field(default_factory=dict)
    streak_to: str = ""
    streak: int = 0
    evaluation: Evaluation | None = None
    rewards: deque[tuple[float, float]] = field(default_factory=deque)  # (time, reward)
    changed_by_us: bool = False
    left: tuple[str, float] | None = None  # (CCA a confirmed policy switch left, until when going back is damped)
    not_before: float = -math.inf  # desync: no policy/exploration switch before this time


class Guard:
    def __init__(self, cfg: GuardConfig | None = None, clock: Callable[[], float] = time.time,
                 rng: random.Random | None = None):
        self.cfg = cfg or GuardConfig()
        self.clock = clock
        self.rng = rng or random.Random()  # desync draws: each daemon its own (seeded from the OS)
        self.flows: dict[int, FlowGuard] = {}
        self._touched: set[int] = set()  # flows handled since the last busy(): the only ones that can be busy

    # ------------------------------------------------------------ bookkeeping
    def track(self, flow: int, cca: str) -> FlowGuard:
        fg = self.flows.get(flow)
        if fg is None:
            now = self.clock()
            fg = self.flows[flow] = FlowGuard(first_seen=now, original=cca, not_before=now + self._delay())
        self._touched.add(flow)
        return fg

    def _delay(self) -> float:
        return self.rng.uniform(0.0, self.cfg.jitter_s) if self.cfg.jitter_s > 0 else 0.0

    def forget(self, alive: Iterable[int]) -> list[int]:
        """Drop flows that are gone; returns their ids."""
        keep = alive if isinstance(alive, set | frozenset) else set(alive)
        gone = [f for f in self.flows if f not in keep]
        for f in gone:
            del self.flows[f]
            self._touched.discard(f)
        return gone

    def busy(self) -> set[int]:
        """Flows with something going on: a pin, a hysteresis streak, an evaluation or a hold-off.

        Every change of those goes through a method that calls :meth:`track` (or
        :meth:`from_state`), so only flows handled since the last call need a look:
        the cost follows the busy flows, not all flows.
        """
        flows = self.flows
        out = {f for f in self._touched if (fg := flows.get(f)) is not None and (
            fg.pin is not None or fg.streak or fg.evaluation is not None or fg.holdoff or fg.left)}
        self._touched = set(out)
        return out

    def is_busy(self, flow: int) -> bool:
        fg = self.flows.get(flow)
        return fg is not None and (fg.pin is not None or bool(fg.streak) or fg.evaluation is not None
                                   or bool(fg.holdoff) or fg.left is not None)

    def age(self, flow: int) -> float:
        fg = self.flows.get(flow)
        return self.clock() - fg.first_seen if fg else 0.0

    def pin(self, flow: int, cca: str, current: str) -> None:
        fg = self.track(flow, current)
        fg.pin = cca
        fg.evaluation = None
        fg.streak, fg.streak_to = 0, ""

    def unpin(self, flow: int) -> bool:
        fg = self.flows.get(flow)
        if not fg or fg.pin is None:
            return False
        fg.pin = None
        self._touched.add(flow)
        return True

    # ------------------------------------------------------- rewards/evaluate
    def observe(self, flow: int, cca: str, reward: float) -> Verdict | None:
        """Record this tick's reward; returns a revert/confirm verdict when an evaluation ends."""
        now = self.clock()
        fg = self.track(flow, cca)
        if not math.isnan(reward):
            fg.rewards.append((now, reward))
        horizon = now - max(self.cfg.eval_window_s, 0.0) - 1e-9
        while fg.rewards and fg.rewards[0][0] < horizon:
            fg.rewards.popleft()
        ev = fg.evaluation
        if ev is None:
            return None
        if not math.isnan(reward) and now > ev.at:
            ev.after_sum += reward
            ev.after_n += 1
        if now - ev.at < self.cfg.eval_window_s:
            return None
        fg.evaluation = None
        after = ev.after_sum / ev.after_n if ev.after_n else math.nan
        if math.isnan(ev.before) or math.isnan(after):
            return Verdict("keep", cca, f"confirmed {ev.prev}->{ev.to}: no reward to compare "
                                        f"(before {ev.before:.3f}, after {after:.3f})", ev.to)
        if after < ev.before - self.cfg.revert_threshold and cca == ev.to:
            fg.holdoff[ev.to] = now + self.cfg.holdoff_s
            return Verdict("revert", ev.prev, f"revert {ev.to}->{ev.prev}: reward {after:.3f} after the switch < "
                                              f"{ev.before:.3f} before - {self.cfg.revert_threshold:g}; "
                                              f"{ev.to} held off for {self.cfg.holdoff_s:g} s", ev.prev)
        if self.cfg.return_holdoff_s > 0 and cca == ev.to:
            fg.left = (ev.prev, now + self.cfg.return_holdoff_s)
        return Verdict("keep", cca, f"confirmed {ev.prev}->{ev.to}: reward {after:.3f} after vs {ev.before:.3f} "
                                    "before", ev.to)

    def _mean_before(self, fg: FlowGuard) -> float:
        vals = [r for _, r in fg.rewards]
        return sum(vals) / len(vals) if vals else math.nan

    # ---------------------------------------------------------------- decide
    def decide(self, flow: int, current: str, scores: Mapping[str, float]) -> Verdict:
        """*scores*: the policy's score per allowed CCA (higher is better)."""
        now = self.clock()
        fg = self.track(flow, current)
        c = self.cfg
        if fg.pin is not None:
            return Verdict("keep", current, f"pinned to {fg.pin} (manual override)", fg.pin)
        for cca, until in list(fg.holdoff.items()):
            if until <= now:
                del fg.holdoff[cca]
        cands = {k: v for k, v in scores.items() if k not in fg.holdoff and not math.isnan(v)}
        if not cands:
            return Verdict("keep", current, "no candidate (all held off or unscored)", current)
        best = max(cands, key=lambda k: (cands[k], k == current))
        if best == current:
            fg.streak, fg.streak_to = 0, ""
            return Verdict("keep", current, "policy prefers the current CCA", best)
        cur = cands.get(current, -math.inf)
        gain = cands[best] - cur
        need = self._margin(cur)
        if gain < need:
            fg.streak, fg.streak_to = 0, ""
            return Verdict("keep", current, f"{best} wins by {gain:.3f} < margin {need:.3g}", best)
        fg.streak = fg.streak + 1 if fg.streak_to == best else 1
        fg.streak_to = best
        gain_s = "inf" if math.isinf(gain) else f"{gain:.3f}"
        if fg.streak < c.consecutive:
            return Verdict("keep", current, f"hysteresis: {best} wins by {gain_s} ({fg.streak}/{c.consecutive})",
                           best)
        blocked = self._blocked(fg, current, best, f"{best} preferred", now)
        if blocked is not None:
            return blocked
        if fg.left is not None and fg.left[1] <= now:
            fg.left = None
        if fg.left is not None and fg.left[0] == best:
            return Verdict("keep", current, f"{best} preferred; damping: left {best} for {current}, going back "
                                            f"blocked for {fg.left[1] - now:.1f} s more", best)
        return Verdict("switch", best, f"{best} wins by {gain_s} over {current} on {fg.streak} decisions", best)

    def _margin(self, current_score: float) -> float:
        """How much the best CCA must beat the current one by (step 4)."""
        if self.cfg.margin_rel > 0 and math.isfinite(current_score):
            return max(self.cfg.margin, self.cfg.margin_rel * abs(current_score))
        return self.cfg.margin

    def _blocked(self, fg: FlowGuard, current: str, best: str, what: str, now: float) -> Verdict | None:
        """Steps 6-8 (evaluation in progress, dwell, cap): a keep verdict, or None when a switch may go."""
        c = self.cfg
        if fg.evaluation is not None:
            return Verdict("keep", current, f"{what}; post-switch evaluation of {fg.evaluation.to} in progress",
                           best)
        since = now - fg.last_switch
        if since < c.min_dwell_s:
            return Verdict("keep", current, f"{what}; dwell: {c.min_dwell_s - since:.1f} s left", best)
        if now < fg.not_before:
            return Verdict("keep", current, f"{what}; desync: {fg.not_before - now:.1f} s left", best)
        while fg.switches and fg.switches[0] <= now - CAP_WINDOW_S:
            fg.switches.popleft()
        if len(fg.switches) >= c.max_switches_per_min:
            return Verdict("keep", current, f"{what}; cap: {len(fg.switches)} switches in the last "
                                            f"{CAP_WINDOW_S:g} s", best)
        return None

    def hold_off(self, flow: int, cca: str) -> None:
        """Take *cca* out of the flow's candidates for holdoff_s (the kernel refused a switch to it, or the
        flow escaped from it: escape.py)."""
        fg = self.flows.get(flow)
        if fg is None:
            return
        self._touched.add(flow)
        fg.holdoff[cca] = self.clock() + self.cfg.holdoff_s
        fg.streak, fg.streak_to = 0, ""

    def explore(self, flow: int, current: str, to: str, reason: str) -> Verdict:
        """An exploration switch (explore.py): like :meth:`decide` without margin and hysteresis.

        Pins, hold-offs, an evaluation in progress, dwell and the cap still block it.
        """
        now = self.clock()
        fg = self.track(flow, current)
        if fg.pin is not None:
            return Verdict("keep", current, f"pinned to {fg.pin} (manual override)", fg.pin)
        if fg.holdoff.get(to, -math.inf) > now:
            return Verdict("keep", current, f"{reason}; {to} held off", to)
        blocked = self._blocked(fg, current, to, reason, now)
        if blocked is not None:
            return blocked
        fg.streak, fg.streak_to = 0, ""
        return Verdict("switch", to, reason, to)

    def would(self, flow: int | None, current: str, scores: Mapping[str, float]) -> Verdict:
        """What :meth:`decide` would answer now if the scores held, without changing any state."""
        saved = None
        if flow is not None and flow in self.flows:
            fg = self.flows[flow]
            saved = (fg.streak, fg.streak_to, dict(fg.holdoff))
        tmp = flow if flow is not None else -1
        existed = tmp in self.flows
        v = self.decide(tmp, current, scores)
        if v.action == "keep" and v.reason.startswith("hysteresis"):
            need = self.cfg.consecutive - self.flows[tmp].streak
            v.reason += f"; would switch after {need} more decision(s) if the scores hold"
        if not existed:
            del self.flows[tmp]
        elif saved is not None:
            fg = self.flows[tmp]
            fg.streak, fg.streak_to, fg.holdoff = saved[0], saved[1], saved[2]
        return v

    # --------------------------------------------------------------- applied
    def applied(self, flow: int, prev: str, to: str, kind: str, before: float | None = None) -> None:
        """A switch happened (kind: "policy", "revert" or "manual").

        *before*: the flow's mean reward before the switch when the caller keeps it
        (the controller's running mean); else the rewards given to observe().
        """
        now = self.clock()
        fg = self.track(flow, prev)
        fg.last_switch = now
        fg.not_before = now + self.cfg.min_dwell_s + self._delay()
        fg.switches.append(now)
        fg.streak, fg.streak_to = 0, ""
        fg.changed_by_us = True
        if kind == "policy" and self.cfg.eval_window_s > 0:
            fg.evaluation = Evaluation(at=now, prev=prev, to=to,
                                       before=before if before is not None else self._mean_before(fg))
        else:
            fg.evaluation = None
        fg.rewards.clear()  # the next comparison starts from the new algorithm

    # ----------------------------------------------------------- persistence
    def to_state(self) -> dict[str, Any]:
        out = {}
        for fid, fg in self.flows.items():
            out[str(fid)] = {
                "first_seen": fg.first_seen, "original": fg.original,
                "last_switch": fg.last_switch if math.isfinite(fg.last_switch) else None,
                "switches": list(fg.switches), "pin": fg.pin, "holdoff": fg.holdoff,
                "changed_by_us": fg.changed_by_us, "left": list(fg.left) if fg.left else None,
                "not_before": fg.not_before if math.isfinite(fg.not_before) else None,
                "evaluation": asdict(fg.evaluation) if fg.evaluation else None,
            }
        return out

    def from_state(self, state: Mapping[str, Any], alive: Sequence[int] | None = None) -> int:
        """Restore flows (only *alive* ones when given); returns how many."""
        keep = set(alive) if alive is not None else None
        n = 0
        for key, d in state.items():
            fid = int(key)
            if keep is not None and fid not in keep:
                continue
            ev = d.get("evaluation")
            ev = Evaluation(**ev) if ev and isinstance(ev.get("before"), float | int) else None
            self.flows[fid] = FlowGuard(
                first_seen=float(d["first_seen"]), original=str(d["original"]),
                last_switch=float(d["last_switch"]) if d.get("last_switch") is not None else -math.inf,
                switches=deque(float(x) for x in d.get("switches", [])), pin=d.get("pin"),
                holdoff={str(k): float(v) for k, v in d.get("holdoff", {}).items()},
                changed_by_us=bool(d.get("changed_by_us")), evaluation=ev,
                left=(str(d["left"][0]), float(d["left"][1])) if d.get("left") else None,
                not_before=float(d["not_before"]) if d.get("not_before") is not None else -math.inf)
            self._touched.add(fid)
            n += 1
        return n
