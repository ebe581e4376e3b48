"""The reward, and paper 002's evaluation function (the reference policy for accuracy).

Reward of one interval (paper 002, section 4.1.1, plus fairness and switching)::

    R = w_throughput * ln(max(throughput_mbps, throughput_floor_mbps))
      - w_latency    * ln(max(rtt_ms, latency_floor_ms))
      - w_loss       * ln(max(loss_rate, loss_floor))
      + w_fairness   * F
      + w_utilisation * ln(clip(U, 1/20, 1))   (U = every active flow's throughput at the bottleneck
                                                together / the link's rate; off by default: w = 0)
      - w_switch     * [the agent switched CCA for this interval]

    F = jain - 1                        (fairness = "jain"; 0 when fair or alone, down to 1/n - 1)
    F = -|ln(clip(thratio, 1/20, 20))|  (fairness = "thratio"; thratio = own / mean of the others)
    F = ln(clip(min_share, 1/20, 1))    (fairness = "minshare"; min_share = the smallest active flow's
                                         throughput / the mean of the active flows at the bottleneck:
                                         the matrix's "every flow >= 0.8 of its fair share" target)

Defaults and why:

* 1/2, 1/4, 1/4: paper 002's constants.  Units (Mbit/s, ms) only shift R by a
  constant, which changes no decision.
* loss_floor = 1e-3: ln(0) is -inf.  0.1 % is about one retransmission per
  interval at the corpus' rates, i.e. measurement noise, and loss-based CCAs
  need some loss to find the capacity; the floor caps the loss term at +1.73.
* latency_floor_ms = 1: below 1 ms RTT no application notices a difference, and
  the testbed's veth links have sub-millisecond base RTTs, which would
  otherwise let the latency term dominate the reward.
* throughput_floor_mbps = 0.1: a starving flow is starving at 10 kbit/s or at
  100 kbit/s; the floor keeps one starved interval from dominating an episode
  (starvation is punished by the fairness term).
* w_fairness = 2: the largest selfish gain, taking the whole link from one
  competitor, doubles throughput: +0.5 ln 2 = +0.35; that leaves Jain's index
  near 0.55, i.e. F = -0.45.  With weight 2 unfairness costs 0.9, 2.5 times the
  gain, so the agent does not starve others, while between equally fair
  choices throughput, latency and loss still decide.
* w_utilisation = 0 (off): fairness alone is met by every flow on one CCA even
  where that CCA leaves the link half empty (CUBIC at 1 % random loss); this
  term pays for the "link stays full" target the agent's own throughput term
  sees only as its own share.  The capacity is known offline per condition (the
  link's rate_mbit; unknown on trace-driven links, where the term is 0).
* w_switch = 0.1: the replay mostly takes the next sample from a trace that ran
  the new CCA all along, which misses the transient of a switch (private CCA
  state is reset); 0.1 is the reward of a 22 % throughput gain for one
  interval (0.5 ln 1.22), so a switch must promise more than noise.

The evaluation function (paper 002, section 5.5) scores each CCA on the
interval it would produce: 70 % throughput, 20 % latency, 10 % loss, each
relative to the best candidate, and picks the highest score (ties: keep the
current CCA).  It ignores fairness and switching.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

__all__ = ["EVAL_WEIGHTS", "FAIRNESS_MODES", "RewardConfig", "eval_scores", "evaluation_choice", "reward"]

FAIRNESS_MODES = ("jain", "thratio", "minshare")
EVAL_WEIGHTS = (0.7, 0.2, 0.1)
"""Paper 002's evaluation function: throughput, latency, loss."""


@dataclass(frozen=True)
class RewardConfig:
    """Weights and floors of the reward (module docstring: the defaults and why)."""

    w_throughput: float = 0.5
    w_latency: float = 0.25
    w_loss: float = 0.25
    w_fairness: float = 2.0
    w_utilisation: float = 0.0
    w_switch: float = 0.1
    fairness: str = "jain"
    loss_floor: float = 1e-3
    latency_floor_ms: float = 1.0
    throughput_floor_mbps: float = 0.1

    def __post_init__(self) -> None:
        if self.fairness not in FAIRNESS_MODES:
            raise ValueError(f"reward fairness must be one of {', '.join(FAIRNESS_MODES)}, got {self.fairness!r}")
        for f in ("loss_floor", "latency_floor_ms", "throughput_floor_mbps"):
            if not getattr(self, f) > 0:
                raise ValueError(f"reward {f} must be > 0, got {getattr(self, f)}")

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> RewardConfig:
        if not d:
            return cls()
        known = {f.name for f in fields(cls)}
        bad = sorted(set(d) - known)
        if bad:
            raise ValueError(f"unknown reward setting {bad[0]!r} (known: {', '.join(sorted(known))})")
        return cls(**d)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def fairness_term(cfg: RewardConfig, jain: float, thratio: float, min_share: float = 1.0) -> float:
    if cfg.fairness == "jain":
        return float(jain) - 1.0
    if cfg.fairness == "minshare":
        ms = 1.0 if min_share is None or math.isnan(min_share) else float(min_share)
        return math.log(min(max(ms, 1 / 20), 1.0))
    if thratio is None or math.isnan(thratio):
        return 0.0  # alone
    return -abs(math.log(min(max(thratio, 1 / 20), 20.0)))


def reward(cfg: RewardConfig, *, throughput_mbps: float, rtt_ms: float, loss: float, jain: float = 1.0,
           thratio: float = math.nan, min_share: float = 1.0, utilisation: float = math.nan,
           switched: bool = False) -> tuple[float, dict[str, float]]:
    """The reward of one interval and its terms (each already weighted)."""
    rtt = rtt_ms if rtt_ms is not None and not math.isnan(rtt_ms) else cfg.latency_floor_ms
    terms = {
        "throughput": cfg.w_throughput * math.log(max(throughput_mbps, cfg.throughput_floor_mbps)),
        "latency": -cfg.w_latency * math.log(max(rtt, cfg.latency_floor_ms)),
        "loss": -cfg.w_loss * math.log(max(loss, cfg.loss_floor)),
        "fairness": cfg.w_fairness * fairness_term(cfg, jain, thratio, min_share),
        "switch": -cfg.w_switch * float(bool(switched)),
    }
    if cfg.w_utilisation and utilisation is not None and not math.isnan(utilisation):
        terms["utilisation"] = cfg.w_utilisation * math.log(min(max(float(utilisation), 1 / 20), 1.0))
    return float(sum(terms.values())), terms


def eval_scores(throughput_mbps: Sequence[float], rtt_ms: Sequence[float], loss: Sequence[float],
                weights: Sequence[float] = EVAL_WEIGHTS) -> np.ndarray:
    """Paper 002's evaluation function over candidate intervals (one per CCA): higher is better.

    score = 0.7 * thr / max thr + 0.2 * min rtt / rtt + 0.1 * (1 - loss / max loss)
    (NaN candidates score -inf; RTT floored at 1 ms.)
    """
    thr = np.nan_to_num(np.asarray(throughput_mbps, dtype=np.float64), nan=-np.inf)
    rtt = np.maximum(np.nan_to_num(np.asarray(rtt_ms, dtype=np.float64), nan=np.inf), 1.0)
    los = np.nan_to_num(np.asarray(loss, dtype=np.float64), nan=np.inf)
    with np.errstate(invalid="ignore", divide="ignore"):
        t = thr / np.max(thr) if np.max(thr) > 0 else np.ones_like(thr)
        r = np.min(rtt) / rtt
        lmax = np.max(los[np.isfinite(los)]) if np.isfinite(los).any() else 0.0
        lo = 1.0 - los / lmax if lmax > 0 else np.ones_like(los)
    s = weights[0] * t + weights[1] * r + weights[2] * lo
    return np.where(np.isfinite(thr) & np.isfinite(los), s, -np.inf)


def evaluation_choice(scores: np.ndarray, current: int) -> int:
    """argmax of the scores; ties keep the current CCA, else the lowest index."""
    best = np.max(scores)
    ties = np.flatnonzero(np.isclose(scores, best, rtol=0, atol=1e-12))
    return int(current) if current in ties else int(ties[0])
