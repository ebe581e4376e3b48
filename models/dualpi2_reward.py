"""The DualPI2 agent's reward per control interval: :func:`reward`, and :func:`reward_k` for the modes that
set k (the per-flow L:C imbalance charged too).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

__all__ = ["LC_CAP", "lc_imbalance", "reward", "reward_k"]


def reward(raw: Mapping[str, float], target_ms: float = 15.0, *, w_delay: float = 1.0, w_under: float = 0.3,
           w_drop: float = 10.0, max_over: float = 4.0) -> float:
    """One interval's reward: utilisation - w_delay * min(relu(C delay / target - 1), max_over)
    - w_under * relu(1 - C delay / target) - w_drop * C drop fraction.

    Why these: utilisation is the "link stays full" goal (0..1); a Classic delay 50 % above target costs as
    much as half the link; a 1 % Classic drop rate costs 0.1 (DualPI2 at p' = 0.1 drops 1 % of
    Classic packets: the penalty keeps the agent from buying a short queue with many drops).  Below target
    the delay costs less (an empty queue 0.3): Classic drops are rare and noisy per interval, so without
    this term the reward is flat below the target and p' drifts; with it the optimum is DualPI2's own
    set point (the target), which is what the agent is judged against (C-queue mean <= 17 ms, the PI's
    utilisation, no more drops).  The delay term is capped (at 5 x target by default) so that one bloated
    episode cannot swamp the critic's scale.
    """
    ratio = raw["classic_delay_ms"] / target_ms
    over = min(max(ratio - 1.0, 0.0), max_over)
    under = max(1.0 - ratio, 0.0)
    return float(raw["utilisation"] - w_delay * over - w_under * under - w_drop * raw["classic_drop_frac"])


LC_CAP = 2.0
"""lc_imbalance's cap: |log2 L:C| beyond 2 (4:1 either way) costs no more (one starved interval is noise)."""


def lc_imbalance(raw: Mapping[str, float], n_l4s: int, n_classic: int) -> float:
    """|log2 of the per-flow L:C packet rate| over one interval, capped at LC_CAP; 0 when a class has no flow or
    sent nothing through (no balance to judge).  Needs the flow counts: the training env knows them, the router
    does not (it only observes the class shares)."""
    c, l4s = raw.get("classic_pkts", 0.0), raw.get("l4s_pkts", 0.0)
    if n_l4s <= 0 or n_classic <= 0 or c <= 0 or l4s <= 0:
        return 0.0
    return min(abs(math.log2((l4s / n_l4s) / (c / n_classic))), LC_CAP)


def reward_k(raw: Mapping[str, float], n_l4s: int, n_classic: int, target_ms: float = 15.0, *,
             w_lc: float = 0.5) -> float:
    """``residual-k``'s reward: :func:`reward` - w_lc * :func:`lc_imbalance`.

    Why: the stretch goal is L:C within 1.5:1 per flow, i.e. |log2 L:C| <= 0.58; the log makes 2:1 and 1:2
    cost alike.  w_lc 0.5: an L:C of 0.6 (k = 2 in the dynamic template) costs 0.37, about what 37 points of
    utilisation or a Classic delay 37 % over target cost, so balance is worth having but not at the price of
    the queue (the base terms are unchanged: the delay target and drops still bind p').  Per interval the
    ratio is noisy (a CUBIC sawtooth spans many intervals); the critic averages it.
    """
    return reward(raw, target_ms) - w_lc * lc_imbalance(raw, n_l4s, n_classic)
