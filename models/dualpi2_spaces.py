"""The DualPI2 agent's observation and action spaces: the features of each action mapping, the mappings
and their constants (what each means and why: :mod:`ccswitch.models.dualpi2_actor`'s docstring).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = [
    "ACTION_KINDS",
    "ACTION_SCALE",
    "CLIP",
    "K_MAX",
    "K_MIN",
    "K_MODES",
    "K_SCALE",
    "LEASE_INTERVALS",
    "OBS_FEATURES",
    "OBS_FEATURES_K",
    "OBS_FEATURES_KF",
    "OBS_KINDS",
    "P_MAX",
    "P_MIN",
    "RESIDUAL_SCALE",
    "SHARE_EMA",
    "action_dims",
    "control_params",
    "coupling_k",
    "features_for",
    "k_output",
    "next_base_prob",
    "prob_scale",
]

OBS_FEATURES: tuple[str, ...] = (
    "p_prime",             # p' now, log scale: (log2(max(p', 1e-3)) + 10) / 10 (1e-3 -> 0, 1 -> 1)
    "classic_delay",       # sojourn of the Classic head now / 50 ms
    "l4s_delay",           # sojourn of the L4S head now / 5 ms
    "pi_qdelay",           # the PI input at its last update (max head sojourn) / 50 ms
    "classic_backlog",     # Classic bytes queued, in link time / 50 ms
    "l4s_backlog",         # L4S bytes queued, in link time / 5 ms
    "utilisation",         # bytes delivered over the interval / what the rate allows
    "offered_load",        # bytes offered over the interval / what the rate allows
    "classic_drop_frac",   # Classic drops (AQM, overload, limit) / Classic packets in, x 10
    "classic_mark_frac",   # Classic CE marks / Classic packets in, x 10
    "l4s_mark_frac",       # L4S marks (native + coupled) / L4S packets in
    "classic_delay_trend",  # change of classic_delay since the last interval (-1..1)
)
"""The observation, in order (paper 000's Table 1 state, for DualPI2's two queues)."""
OBS_FEATURES_K: tuple[str, ...] = (
    *OBS_FEATURES,
    "coupling_k",          # k now, log scale: log2(k) / 2 (1 -> 0, 2 -> 0.5, 4 -> 1)
    "l4s_share",           # L4S packets / all packets through the queue over the interval (in - Classic drops)
    "l4s_share_avg",       # the same, exponentially averaged over about 1 s (SHARE_EMA)
)
"""``residual-k``'s observation: the 12 numbers and what shows the L/C balance (linkemu's state has per-class
packets in and drops, not per-class bytes out; the flows are MSS-sized bulk, so packets are bytes)."""
OBS_FEATURES_KF: tuple[str, ...] = (
    *OBS_FEATURES_K,
    "l4s_flows",           # active L4S flows (linkemu's l4s_flows: a packet in the last 200 ms): log2(1 + n) / 4
    "classic_flows",       # the same for the Classic class (1 -> 0.25, 3 -> 0.5, 15 -> 1)
)
"""The k modes' observation with ``observation = "flows"``: OBS_FEATURES_K and the active flows per class."""
OBS_KINDS = ("base", "flows")
"""The observation options of the modes that set k (the actor file's ``observation``; absent: ``base``)."""

CLIP = (-1.0, 2.0)
"""Every feature is clipped to this range (a burst can exceed the scale; the network never sees more)."""
ACTION_SCALE = 0.5
"""a = +-1 multiplies / divides p' by sqrt(2) (two intervals to double it)."""
RESIDUAL_SCALE = 1.0
"""``residual``: a = +-1 doubles / halves the PI controller's p' (linkemu accepts 1/16..16)."""
K_SCALE = 1.0
"""``residual-k``: a_k = +-1 doubles / halves k around RFC 9332's 2 (k in 1..4)."""
K_MIN, K_MAX = 1.0, 4.0
"""The range of ``residual-k``'s k: k = 4 by hand brings the dynamic template's L:C from 0.6-0.95 (k = 2) to
1.0-1.5 (docs/l4s.md), k = 1 leaves room the other way (an L4S class ahead)."""
SHARE_EMA = 0.05
"""Weight of a new interval in ``l4s_share_avg`` (~20 intervals: 1 s at 50 ms)."""
ACTION_KINDS: dict[str, str] = {
    "step": "log2 step of base_prob",
    "residual": "log2 factor on the PI controller's base_prob",
    "residual-k": "log2 factor on the PI controller's base_prob and log2 coupling factor k",
    "k": "log2 coupling factor k (the PI controller sets base_prob)",
}
"""The action mappings (module docstring, step 3): the name a trainer takes -> the actor file's action.kind."""
K_MODES = frozenset(("residual-k", "k"))
"""The mappings that set k: their observation is OBS_FEATURES_K, their reward :func:`reward_k`."""
P_MIN, P_MAX = 1e-3, 1.0
"""p' stays within these (P_MIN: p_C = 1e-6, i.e. no Classic drops; a multiplicative step needs p' > 0)."""
LEASE_INTERVALS = 3
"""The lease of each set (hold_ms) in control intervals: one late interval does not hand p' back."""


def features_for(mode: str, obs: str = "base") -> tuple[str, ...]:
    """The observation of action mapping *mode* with observation option *obs* (:data:`OBS_KINDS`; ``flows``
    only for the modes that set k)."""
    if obs not in OBS_KINDS or (obs != "base" and mode not in K_MODES):
        raise ValueError(f"observation {obs!r} is not one of mode {mode!r}'s "
                         f"({', '.join(OBS_KINDS) if mode in K_MODES else 'base'})")
    if mode not in K_MODES:
        return OBS_FEATURES
    return OBS_FEATURES_KF if obs == "flows" else OBS_FEATURES_K


def action_dims(mode: str) -> int:
    """The actor's outputs under *mode*: (factor, k) for ``residual-k``, else one."""
    return 2 if mode == "residual-k" else 1


def k_output(mode: str) -> int | None:
    """Which of the actor's outputs sets k under *mode* (None: the mapping leaves k alone)."""
    return {"residual-k": 1, "k": 0}.get(mode)


# ------------------------------------------------------- action mappings ---


def next_base_prob(p_prime: float, action: float) -> float:
    """p' after action *a* in [-1, 1] (module docstring)."""
    if type(action) is float and type(p_prime) is float:  # the loop's case: np.clip written out for floats
        a = -1.0 if action < -1.0 else 1.0 if action > 1.0 else action  # NaN passes through, as in np.clip
        p = max(p_prime, P_MIN) * 2.0 ** (ACTION_SCALE * a)
        return P_MIN if p < P_MIN else P_MAX if p > P_MAX else p
    a = float(np.clip(action, -1.0, 1.0))
    return float(np.clip(max(p_prime, P_MIN) * 2.0 ** (ACTION_SCALE * a), P_MIN, P_MAX))


def prob_scale(action: float) -> float:
    """``residual``: the factor on the PI controller's p' for action *a* in [-1, 1]."""
    a = -1.0 if action < -1.0 else 1.0 if action > 1.0 else float(action)
    return 2.0 ** (RESIDUAL_SCALE * a)


def coupling_k(action: float) -> float:
    """``residual-k``: the coupling factor k for its second output a_k in [-1, 1] (k = 2 at a_k = 0)."""
    a = -1.0 if action < -1.0 else 1.0 if action > 1.0 else float(action)
    return min(max(2.0 ** (1.0 + K_SCALE * a), K_MIN), K_MAX)


def control_params(mode: str, p_prime: float, action: float | Sequence[float]) -> dict[str, float]:
    """What a ``set`` sends for *action* under mapping *mode*, from p' now (without the lease).  ``residual-k``
    takes its two outputs (factor, k); ``k`` sends k alone (p' stays the PI controller's)."""
    if mode == "residual-k":
        a_p, a_k = action  # type: ignore[misc]
        return {"prob_scale": prob_scale(a_p), "k": coupling_k(a_k)}
    if mode == "k":
        return {"k": coupling_k(action)}  # type: ignore[arg-type]
    if mode == "residual":
        return {"prob_scale": prob_scale(action)}  # type: ignore[arg-type]
    return {"base_prob": next_base_prob(p_prime, action)}  # type: ignore[arg-type]
