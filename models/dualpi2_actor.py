"""The DualPI2 actor file and what it defines: paper 000's agent's observation, action and reward.

Numpy only (no TensorFlow): the router side (``testbed/runs/dualpi2_agent.py``, the
loop beside linkemu), the training env (``envs/dualpi2_env.py``), the trainer
(``models/a3c_dualpi2.py``) and the scenario parser (which checks an ``agent``
file) all use these definitions.

Paper 000 puts an A3C agent beside a dual-queue coupled AQM: every control
interval it reads the queue's state and sets the marking/drop probability.
Here the AQM is linkemu's DualPI2 (RFC 9332) and the agent talks to it through
linkemu's control socket (:mod:`ccswitch.testbed.runs.linkemu_control`):

1. ``state`` of the bottleneck direction -> the observation below (12 numbers,
   each scaled to about 0..1 like the paper's min-max normalisation);
2. the actor network (numpy only; trained by ``ccswitch.models.a3c_dualpi2``)
   gives the action a in [-1, 1];
3. one of four action mappings (the actor file's ``action.kind``, :data:`ACTION_KINDS`):

   * ``step`` (paper 000: the agent sets p' itself): p' <- clip(p' * 2**(ACTION_SCALE * a),
     P_MIN, P_MAX) (ACTION_SCALE 0.5), sent as ``set base_prob``; the PI controller is paused;
   * ``residual-k`` (issue 14's stretch item): ``residual``'s factor and, from a second output a_k,
     the coupling factor k = 2**(1 + K_SCALE * a_k) in [K_MIN, K_MAX] = [1, 4] (a_k = 0: RFC 9332's
     k = 2, so an untrained actor is still plain DualPI2), sent as ``set prob_scale, k``.  Its
     observation is the 12 numbers and OBS_FEATURES_K's three (k now, the L4S class's share of the
     packets through the queue over the interval and over about one second), its reward
     :func:`reward_k` (``reward`` minus the per-flow L:C imbalance, which training can count because
     the env knows its flows).  linkemu's lease (``hold_ms``) covers k too (a k not renewed is the
     configuration's again), and the router loop also puts k back to the scenario's value when it
     stops or fails (:mod:`ccswitch.testbed.runs.dualpi2_agent`);
   * ``k``: ``residual-k`` without the factor: the one output sets k as a_k above, sent as ``set k``
     with the lease, and the PI controller alone sets p' (same observation and reward).  Why: trained
     together, the factor drifted to its bound and took k with it (docs/l4s.md);
   * ``residual``: the PI controller keeps running and the agent sets a factor on its p',
     2**(RESIDUAL_SCALE * a) (x0.5..x2), sent as ``set prob_scale``.  a = 0 is DualPI2 as it
     is, so even an untrained actor is the PI controller, and training only has to learn
     corrections (residual policy learning: Johannink et al. 2019, Silver et al. 2018).  The PI
     integrator stays in the loop, so the delay the queue settles at is still the target's;
     what the agent changes is how p' moves on the way (flows arriving, leaving, slow start).

   The modes that set k take an observation option (the actor file's ``observation``, :data:`OBS_KINDS`):
   ``base`` (the above; files without the key) or ``flows``, OBS_FEATURES_KF: OBS_FEATURES_K and the active
   flows per class (log2(1 + n_L) / 4, log2(1 + n_C) / 4, from linkemu's ``l4s_flows``, ``classic_flows``:
   5-tuples with a packet in the last 200 ms).  Why: the per-flow L:C balance and the k that evens it depend on
   how many flows of each class share the link, which class shares alone do not tell (docs/l4s.md).

   Each is sent with a lease of LEASE_INTERVALS intervals (``hold_ms``): if the agent dies
   or hangs, linkemu's PI controller takes p' back, and the configuration's k returns, within the lease.

Where this deviates from the paper, and why:

* **Action** (``step``): the paper's action is p itself.  Ours is a change of p' in log
  space (at most x1.41 or /1.41 per interval).  The state carries p', so the two
  can express the same controllers; the relative step makes a random initial
  policy a random walk around the current p' instead of a jump anywhere in
  [0, 1], which is what lets 100 episodes of 100 steps learn anything.
* **Reward**: the paper's reward is the queue delay alone, whose optimum is
  p' = 1 (an empty queue and an idle link).  Ours (:func:`reward`) pays for
  utilisation and charges for the Classic queue delay away from DualPI2's
  target (more above it than below) and for Classic drops, so the optimum is
  the PI controller's job: full link, Classic delay at the target, few drops.
* **State**: the paper lists p, queue delay, drops, queue length and bytes sent
  per sub-queue.  DualPI2 has two queues (C and L) and one p', so the 12
  numbers are those per class plus utilisation, offered load and the delay
  trend (:data:`OBS_FEATURES`).

The actor file (``ccswitch-dualpi2-actor``, JSON like the DQN's policy file,
checksummed) is the one contract between training and the router; scenario
files select it with ``agent`` in a dualpi2 queue table.
"""

from __future__ import annotations

import json
import math
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .policy import PolicyError, decode_array, encode_layers, plain_json, read_signed, write_signed

__all__ = [
    "ACTION_KINDS",
    "ACTOR_FORMAT",
    "K_MODES",
    "LEASE_INTERVALS",
    "OBS_FEATURES",
    "OBS_FEATURES_K",
    "OBS_FEATURES_KF",
    "OBS_KINDS",
    "STATE_KEYS",
    "STATE_KEYS_K",
    "STATE_KEYS_KF",
    "Actor",
    "ActorError",
    "Observer",
    "action_dims",
    "annotate_actor",
    "control_params",
    "coupling_k",
    "features_for",
    "k_output",
    "lc_imbalance",
    "load_actor",
    "next_base_prob",
    "prob_scale",
    "reward",
    "reward_k",
    "save_actor",
    "state_keys_for",
]

ACTOR_FORMAT = "ccswitch-dualpi2-actor"
ACTOR_VERSION = 1

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


class ActorError(ValueError):
    """An actor file is missing, unreadable, corrupt or does not fit this ccswitch."""


# ----------------------------------------------------------- observation ---


def _num(d: Mapping[str, Any], key: str) -> float:
    v = d.get(key, 0.0)
    return float(v) if isinstance(v, int | float) and math.isfinite(float(v)) else 0.0


_GAUGES = ("base_prob", "classic_delay_ms", "l4s_delay_ms", "qdelay_ms", "classic_bytes", "l4s_bytes")
"""The state values an observation reads as they are."""
_COUNTERS = ("bytes_out", "bytes_in", "classic_packets_in", "l4s_packets_in", "classic_drops",
             "classic_limit_drops", "classic_marks", "l4s_native_marks", "l4s_coupled_marks")
"""The state counters an observation reads per interval (this state's minus the previous one's)."""
STATE_KEYS: tuple[str, ...] = _GAUGES + _COUNTERS
"""The keys of a direction's control-socket state that :class:`Observer` reads (all it needs from it: an
agent asks linkemu for only these)."""
STATE_KEYS_K: tuple[str, ...] = (*STATE_KEYS, "k")
"""What ``residual-k``'s observer reads (STATE_KEYS and the coupling factor now)."""
STATE_KEYS_KF: tuple[str, ...] = (*STATE_KEYS_K, "l4s_flows", "classic_flows")
"""What the observer reads with ``observation = "flows"`` (STATE_KEYS_K and the active flows per class)."""
_F32 = np.dtype(np.float32)  # a dtype object: given np.float32, numpy looks the dtype up on every call
_PLAIN_NUMBERS = frozenset((int, float, bool))
_ZEROS = (0.0,) * len(_COUNTERS)
_LOWS, _HIGHS = (CLIP[0],) * len(OBS_FEATURES), (CLIP[1],) * len(OBS_FEATURES)


def _nums(d: Mapping[str, Any]) -> list[float]:
    """``[_num(d, k) for k in STATE_KEYS]``.  The agent's loop reads them every control interval (issue 14),
    so the common case -- all of them ints or finite floats -- is checked and converted by builtins."""
    vals = list(map(d.get, STATE_KEYS))
    if set(map(type, vals)) <= _PLAIN_NUMBERS:
        total = sum(vals)
        if total - total == 0:  # none of them inf or NaN (or an overflow: then each is looked at)
            return list(map(float, vals))
    return [_num(d, k) for k in STATE_KEYS]


@dataclass
class Observer:
    """Turns successive control-socket states of one direction into observations and rewards.

    *rate_mbit* is the direction's configured rate (the router knows its own shaper); the counters of
    consecutive states give the per-interval fractions.  The first state gives zeros for them.
    """

    rate_mbit: float
    target_ms: float = 15.0
    extended: bool = False  # residual-k: OBS_FEATURES_K (the 12 numbers, then k and the L4S share)
    flows: bool = False  # with extended: OBS_FEATURES_KF (then the active flows per class)
    _prev: list[float] | None = field(default=None, repr=False)
    _share_avg: float | None = field(default=None, repr=False)  # the previous state's _COUNTERS (None: none)
    _prev_t: float | None = field(default=None, repr=False)
    _prev_delay: float = field(default=0.0, repr=False)

    def update(self, d: Mapping[str, Any], t_s: float) -> tuple[np.ndarray, dict[str, float]]:
        """(observation, raw interval metrics) for direction state *d* taken at emulator time *t_s*."""
        vals = _nums(d)
        p_prime, c_delay_ms, l_delay_ms, qdelay_ms, c_bytes, l_bytes = vals[:6]
        cur = vals[6:]
        prev = self._prev
        dt = max(t_s - self._prev_t, 1e-3) if self._prev_t is not None else 0.0
        if prev is not None:  # max(now - before, 0.0) per counter
            b_out, b_in, c_in, l_in, c_drops, c_limit_drops, c_marks, l_native, l_coupled = map(
                max, map(operator.sub, cur, prev), _ZEROS)
        else:
            b_out = b_in = c_in = l_in = c_drops = c_limit_drops = c_marks = l_native = l_coupled = 0.0

        link_bytes = self.rate_mbit * 1e6 / 8 * dt if dt > 0 else 0.0
        c_drops = c_drops + c_limit_drops
        raw = {
            "p_prime": p_prime,
            "classic_delay_ms": c_delay_ms,
            "l4s_delay_ms": l_delay_ms,
            "utilisation": b_out / link_bytes if link_bytes > 0 else 0.0,
            "offered_load": b_in / link_bytes if link_bytes > 0 else 0.0,
            "classic_drop_frac": c_drops / c_in if c_in > 0 else 0.0,
            "classic_mark_frac": c_marks / c_in if c_in > 0 else 0.0,
            "l4s_mark_frac": (l_native + l_coupled) / l_in if l_in > 0 else 0.0,
        }
        byte_ms = 8 / (self.rate_mbit * 1e3)  # ms of link time per byte
        classic_delay = c_delay_ms / 50.0
        # Clipped as floats (min(max(v, lo), hi): NaN stays NaN, as in np.clip), then rounded to float32: the
        # same numbers as np.clip on the float32 array (rounding is monotonic, CLIP's bounds are float32
        # numbers), cheaper.
        obs = np.fromiter(map(min, map(max, (
            (math.log2(max(p_prime, P_MIN)) + 10.0) / 10.0,
            classic_delay,
            l_delay_ms / 5.0,
            qdelay_ms / 50.0,
            c_bytes * byte_ms / 50.0,
            l_bytes * byte_ms / 5.0,
            raw["utilisation"],
            raw["offered_load"],
            10.0 * raw["classic_drop_frac"],
            10.0 * raw["classic_mark_frac"],
            raw["l4s_mark_frac"],
            classic_delay - self._prev_delay if prev is not None else 0.0,
        ), _LOWS), _HIGHS), _F32, len(OBS_FEATURES))
        if self.extended:
            obs = self._extend(obs, raw, d, c_in - c_drops, l_in, prev is not None)
        # An empty state leaves no counters to count from (as the first state).
        self._prev, self._prev_t, self._prev_delay = (cur if d else None), t_s, classic_delay
        return obs, raw

    def _extend(self, obs: np.ndarray, raw: dict[str, float], d: Mapping[str, Any], c_pkts: float, l_pkts: float,
                counted: bool) -> np.ndarray:
        """``residual-k``: *obs* with OBS_FEATURES_K's three; *raw* gets ``k``, the per-class packets through the
        queue (``classic_pkts``, ``l4s_pkts``) and ``l4s_share`` (NaN when none went through)."""
        k = _num(d, "k") or 2.0
        c_pkts, l_pkts = max(c_pkts, 0.0), max(l_pkts, 0.0)
        total = c_pkts + l_pkts
        share = l_pkts / total if counted and total > 0 else math.nan
        if share == share:
            self._share_avg = share if self._share_avg is None else (
                (1 - SHARE_EMA) * self._share_avg + SHARE_EMA * share)
        raw.update(k=k, classic_pkts=c_pkts, l4s_pkts=l_pkts, l4s_share=share)
        extra = [math.log2(max(k, 1e-3)) / 2.0, share if share == share else 0.0,
                 self._share_avg if self._share_avg is not None else 0.0]
        if self.flows:
            n_l, n_c = max(_num(d, "l4s_flows"), 0.0), max(_num(d, "classic_flows"), 0.0)
            raw.update(l4s_flows=n_l, classic_flows=n_c)
            extra += [math.log2(1.0 + n_l) / 4.0, math.log2(1.0 + n_c) / 4.0]
        extra = np.array(extra, _F32)
        return np.clip(np.concatenate((obs, extra)), CLIP[0], CLIP[1]).astype(_F32)


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


def features_for(mode: str, obs: str = "base") -> tuple[str, ...]:
    """The observation of action mapping *mode* with observation option *obs* (:data:`OBS_KINDS`; ``flows``
    only for the modes that set k)."""
    if obs not in OBS_KINDS or (obs != "base" and mode not in K_MODES):
        raise ValueError(f"observation {obs!r} is not one of mode {mode!r}'s "
                         f"({', '.join(OBS_KINDS) if mode in K_MODES else 'base'})")
    if mode not in K_MODES:
        return OBS_FEATURES
    return OBS_FEATURES_KF if obs == "flows" else OBS_FEATURES_K


def state_keys_for(mode: str, obs: str = "base") -> tuple[str, ...]:
    """The control-socket state keys the observer of *mode* with option *obs* reads."""
    features_for(mode, obs)  # checks the pair
    return STATE_KEYS if mode not in K_MODES else STATE_KEYS_KF if obs == "flows" else STATE_KEYS_K


def action_dims(mode: str) -> int:
    """The actor's outputs under *mode*: (factor, k) for ``residual-k``, else one."""
    return 2 if mode == "residual-k" else 1


def k_output(mode: str) -> int | None:
    """Which of the actor's outputs sets k under *mode* (None: the mapping leaves k alone)."""
    return {"residual-k": 1, "k": 0}.get(mode)


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


# ----------------------------------------------------------------- actor ---


@dataclass
class Actor:
    """The actor's mean network: tanh(relu(relu(x W0 + b0) W1 + b1) W2 + b2) -> a in [-1, 1]."""

    kernels: list[np.ndarray]
    biases: list[np.ndarray]
    interval_s: float
    target_ms: float = 15.0
    mode: str = "step"  # the action mapping, a key of ACTION_KINDS
    obs: str = "base"  # the observation option (OBS_KINDS; the file's ``observation``, absent: base)
    training: dict[str, Any] = field(default_factory=dict)
    evaluation: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None
    checksum: str = ""

    def act(self, obs: np.ndarray) -> float:
        # np.dot, not @: for a vector and a matrix both are one BLAS gemv (the same numbers, checked by
        # tests/test_dualpi2_agent.py against @), and np.dot is the cheaper call (issue 14).
        x = obs if type(obs) is np.ndarray and obs.dtype is _F32 else np.asarray(obs, dtype=np.float32)
        for k, b in zip(self.kernels[:-1], self.biases[:-1], strict=True):
            x = np.maximum(np.dot(x, k) + b, 0.0)
        return float(np.tanh(np.dot(x, self.kernels[-1]) + self.biases[-1])[0])

    def act_all(self, obs: np.ndarray) -> tuple[float, ...]:
        """Every output (``residual-k``: (factor, k)); the first is :meth:`act`'s."""
        x = obs if type(obs) is np.ndarray and obs.dtype is _F32 else np.asarray(obs, dtype=np.float32)
        for k, b in zip(self.kernels[:-1], self.biases[:-1], strict=True):
            x = np.maximum(np.dot(x, k) + b, 0.0)
        return tuple(map(float, np.tanh(np.dot(x, self.kernels[-1]) + self.biases[-1])))


def save_actor(path: str | Path, *, kernels: Sequence[np.ndarray], biases: Sequence[np.ndarray],
               interval_s: float, target_ms: float = 15.0, mode: str = "step",
               training: Mapping[str, Any] | None = None, evaluation: Mapping[str, Any] | None = None,
               obs: str = "base") -> str:
    """Write an actor file; returns its checksum.  *obs* other than ``base`` is recorded as ``observation``
    (files without it are ``base``: those written before the option are byte-for-byte what they were)."""
    action: dict[str, Any] = (
        {"kind": ACTION_KINDS["residual"], "scale": RESIDUAL_SCALE} if mode == "residual"
        else {"kind": ACTION_KINDS["residual-k"], "scale": RESIDUAL_SCALE, "k_scale": K_SCALE, "k_min": K_MIN,
              "k_max": K_MAX} if mode == "residual-k"
        else {"kind": ACTION_KINDS["k"], "k_scale": K_SCALE, "k_min": K_MIN, "k_max": K_MAX} if mode == "k"
        else {"kind": ACTION_KINDS["step"], "scale": ACTION_SCALE, "p_min": P_MIN, "p_max": P_MAX})
    doc: dict[str, Any] = {
        "format": ACTOR_FORMAT, "version": ACTOR_VERSION,
        "features": list(features_for(mode, obs)), "interval_s": interval_s, "target_ms": target_ms,
        **({"observation": obs} if obs != "base" else {}),
        "action": action,
        "network": {"hidden_activation": "relu", "output_activation": "tanh",
                    "layers": encode_layers(kernels, biases)},
        "training": plain_json(training),
        "evaluation": plain_json(evaluation),
    }
    return write_signed(path, doc)


def load_actor(path: str | Path) -> Actor:
    """Load and check an actor file; every problem is one :class:`ActorError` line naming the file."""
    p = Path(path)
    doc = read_signed(p, fmt=ACTOR_FORMAT, version=ACTOR_VERSION, what="DualPI2 actor", error=ActorError,
                      hint="train one with `python -m ccswitch.models.a3c_dualpi2 train`, or use "
                           "models/dualpi2_a3c.json")
    try:
        return _build_actor(p, doc)
    except PolicyError as e:
        raise ActorError(str(e)) from None
    except (KeyError, TypeError, IndexError, ValueError) as e:
        raise ActorError(f"{p}: malformed actor file ({type(e).__name__}: {e})") from None


def _build_actor(p: Path, doc: dict[str, Any]) -> Actor:
    act = doc["action"]
    if act.get("kind") == ACTION_KINDS["residual"]:
        mode, ok = "residual", act.get("scale") == RESIDUAL_SCALE
    elif act.get("kind") == ACTION_KINDS["residual-k"]:
        mode, ok = "residual-k", ((act.get("scale"), act.get("k_scale"), act.get("k_min"), act.get("k_max"))
                                  == (RESIDUAL_SCALE, K_SCALE, K_MIN, K_MAX))
    elif act.get("kind") == ACTION_KINDS["k"]:
        mode, ok = "k", (act.get("k_scale"), act.get("k_min"), act.get("k_max")) == (K_SCALE, K_MIN, K_MAX)
    else:
        mode, ok = "step", (act.get("scale"), act.get("p_min"), act.get("p_max")) == (ACTION_SCALE, P_MIN, P_MAX)
    obs = doc.get("observation", "base")
    if obs not in OBS_KINDS or (obs != "base" and mode not in K_MODES):
        raise ActorError(f"{p}: observation {obs!r} is not one this ccswitch knows for its action mapping "
                         f"(the modes that set k: {', '.join(OBS_KINDS)}; the others: base)")
    features = features_for(mode, obs)
    if tuple(doc["features"]) != features:
        raise ActorError(f"{p}: its features are not this ccswitch's observation ({len(features)} "
                         f"features: {', '.join(features)}); train it again")
    if not ok:
        raise ActorError(f"{p}: trained for another action mapping ({act}); train it again")
    layers = doc["network"]["layers"]
    kernels = [decode_array(la["kernel"], f"{p}: network.layers[{i}].kernel") for i, la in enumerate(layers)]
    biases = [decode_array(la["bias"], f"{p}: network.layers[{i}].bias") for i, la in enumerate(layers)]
    outputs = action_dims(mode)
    shapes_ok = bool(kernels) and kernels[0].shape[0] == len(features) and kernels[-1].shape[1] == outputs
    for i, (k, b) in enumerate(zip(kernels, biases, strict=True)):
        shapes_ok = shapes_ok and k.ndim == 2 and b.shape == (k.shape[1],)
        shapes_ok = shapes_ok and (i == 0 or kernels[i - 1].shape[1] == k.shape[0])
    if not shapes_ok:
        raise ActorError(f"{p}: the layers do not chain from {len(features)} inputs to {outputs} output(s): "
                         f"{[list(k.shape) for k in kernels]}")
    interval = float(doc["interval_s"])
    if not 0.001 <= interval <= 10.0:
        raise ActorError(f"{p}: interval_s {interval} is outside 0.001..10 s")
    return Actor(kernels, biases, interval, float(doc.get("target_ms", 15.0)), mode, obs,
                 doc.get("training", {}), doc.get("evaluation", {}), p, str(doc["checksum"]))


def annotate_actor(path: str | Path, evaluation: Mapping[str, Any]) -> str:
    """Record closed-loop results in an actor file (key ``evaluation``); the checksum covers them."""
    p = Path(path)
    doc = json.loads(p.read_text())
    load_actor(p)  # refuse to re-sign a corrupt file
    doc["evaluation"] = plain_json(evaluation)
    return write_signed(p, doc)
