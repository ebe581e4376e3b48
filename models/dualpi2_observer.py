"""The DualPI2 agent's observer: successive control-socket states of one direction -> observations and the
interval's raw metrics, and the state keys it reads.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .dualpi2_spaces import CLIP, K_MODES, OBS_FEATURES, P_MIN, SHARE_EMA, features_for

__all__ = ["F32", "STATE_KEYS", "STATE_KEYS_K", "STATE_KEYS_KF", "Observer", "state_keys_for"]


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
F32 = np.dtype(np.float32)  # a dtype object: given np.float32, numpy looks the dtype up on every call
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
        ), _LOWS), _HIGHS), F32, len(OBS_FEATURES))
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
        extra = np.array(extra, F32)
        return np.clip(np.concatenate((obs, extra)), CLIP[0], CLIP[1]).astype(F32)


def state_keys_for(mode: str, obs: str = "base") -> tuple[str, ...]:
    """The control-socket state keys the observer of *mode* with option *obs* reads."""
    features_for(mode, obs)  # checks the pair
    return STATE_KEYS if mode not in K_MODES else STATE_KEYS_KF if obs == "flows" else STATE_KEYS_K
