"""Credit for DualPI2's coupling factor k: each draw scored over its hold window against the episode's others.

Why not the A3C advantage.  k moves the L:C balance through the senders' rate
adaptation, over ~1 s; the worker's n-step advantage (``t_max`` = 5 steps of
50 ms, gamma 0.9) credits a draw of k with the next ~0.25-0.5 s only, where a
larger k shows first as fewer L4S packets and a shallower queue, and the
balance it costs arrives later.  Three trainings drifted k upward (2.4-3.8)
although a constant k = 4 earns 0.18 per step less than k = 2 over 5 s
(docs/l4s.md, "Why the agent moves k the wrong way").  And between episodes
the drawn condition (rate, RTT, flow mix) spreads the reward by +-0.4 per
step, far more than k's effect.

The estimator here (``--k-credit window``): k is drawn every ``hold`` steps
and held between (a window).  A window's score is its mean reward over its
steps from ``settle`` on (the rate adaptation to the new k has happened).  A
draw's advantage is its window's score minus the mean score of the episode's
other windows: REINFORCE with a leave-one-out baseline (Kool et al. 2019,
"Buy 4 REINFORCE samples, get a baseline for free").  The other windows ran
the same condition, so the condition's spread cancels; the baseline does not
depend on the draw it scores, so the gradient stays unbiased up to the carry-
over of one window's k into the next's settle steps.  Episodes without an L4S
flow are skipped (k has no effect there: their advantages are noise).  At the
episode's end the worker applies one update of the k output from these draws:

    -mean_i log pi(a_k,i | s_i) A_i - beta H(pi_k(.|s_i))

with its own learning rate (``lr_k``): ~75 updates in the paper's 100-episode
budget (a quarter have no L4S flow), so Adam at the actor's 1e-3 could move
the mean head's output by ~0.08 at most.
"""

from __future__ import annotations

import numpy as np

__all__ = ["KWindows", "leave_one_out"]


def leave_one_out(scores: np.ndarray) -> np.ndarray:
    """Each score minus the mean of the others (needs >= 2 scores)."""
    n = len(scores)
    if n < 2:
        raise ValueError(f"leave-one-out needs at least 2 windows, got {n}")
    s = np.asarray(scores, np.float64)
    return (s * n - s.sum()) / (n - 1)


class KWindows:
    """One episode's draws of k and their windows' rewards (module docstring)."""

    def __init__(self, hold: int, settle: int) -> None:
        if hold < 2 or not 0 <= settle < hold:
            raise ValueError(f"k windows need hold >= 2 and 0 <= settle < hold (got hold {hold}, settle {settle})")
        self.hold, self.settle = hold, settle
        self.states: list[np.ndarray] = []
        self.actions: list[float] = []
        self.rewards: list[list[float]] = []

    def draw(self, state: np.ndarray, a_k: float) -> None:
        """A fresh draw of k (raw, before clipping) in *state*: a new window starts."""
        self.states.append(np.asarray(state, np.float32).copy())
        self.actions.append(float(a_k))
        self.rewards.append([])

    def reward(self, t: int, r: float) -> None:
        """Step *t*'s reward (t counts from the episode's first step), counted once its window has settled."""
        if self.rewards and t % self.hold >= self.settle:
            self.rewards[-1].append(float(r))

    def batch(self) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """(states, raw a_k, advantages) of the windows that settled, or None with fewer than two."""
        done = [i for i, w in enumerate(self.rewards) if w]
        if len(done) < 2:
            return None
        scores = np.array([np.mean(self.rewards[i]) for i in done])
        return (np.stack([self.states[i] for i in done]),
                np.array([self.actions[i] for i in done], np.float32),
                leave_one_out(scores).astype(np.float32))
