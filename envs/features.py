"""The observation: one definition for the env, the trainer, the policy file and the daemon.

numpy only (no gymnasium, no TensorFlow): the daemon imports this module.

An observation is one flow's view at the end of an interval, a float32 vector
of ``feature_names()`` (``OBS_DIM`` = 30 with the defaults)::

    w0.log_throughput_mbps ... w3.log_sending_rate_mbps   WINDOW x BASE_FEATURES, oldest
                                                          interval first, standardised
                                                          ((x - mean) / std, clipped to +-CLIP)
    cca.cubic  cca.bbr  cca.pcc      one-hot: the flow's CCA in the newest interval
    local.others                     other active flows on this host, / 4, clipped to 1
    local.share                      this flow's share of the host's active throughput (1 alone)
    local.jain                       Jain's index over the host's active flows (1 alone)

BASE_FEATURES are transforms of FlowSample columns (ccswitch/schema.py): logs of
rates and delays (they span orders of magnitude), the loss rate as is.  The
local.* features are what a host can see of competition: only flows of the
same network namespace (the daemon) / the same client (the corpus); competing
flows on other machines show only indirectly (RTT, loss, own throughput).
A flow is *active* when it has data queued (sndq_bytes > 0) or moves at least
ACTIVE_MIN_BPS; idle connections do not count as competitors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "ACTIONS",
    "ACTIVE_MIN_BPS",
    "BASE_FEATURES",
    "CLIP",
    "CONTEXT_FEATURES",
    "FEATURE_VERSION",
    "OBS_DIM",
    "WINDOW",
    "Normalisation",
    "ObservationBuilder",
    "assemble",
    "base_features",
    "competition_features",
    "feature_names",
    "obs_dim",
]

FEATURE_VERSION = 1
"""Bump when the meaning of any feature changes; policy files record it."""
ACTIONS: tuple[str, ...] = ("cubic", "bbr", "pcc")
"""The agent's choices: the CCA of the flow for the next interval."""
WINDOW = 4
"""Intervals of history in an observation."""
CLIP = 10.0
"""Standardised features are clipped to [-CLIP, CLIP] (the observation space bounds)."""
ACTIVE_MIN_BPS = 100e3
"""A flow moving at least this much (bit/s) counts as active even with nothing queued."""
MAX_OTHERS = 4

BASE_FEATURES: tuple[tuple[str, str], ...] = (
    ("log_throughput_mbps", "ln(max(throughput_bps / 1e6, 1e-3))"),
    ("log_rtt_ms", "ln(max(rtt_us / 1e3, 1e-2))"),
    ("log_rtt_ratio", "ln(clip(rtt_ratio, 1, 100)); rtt_us / min_rtt_us"),
    ("loss_rate", "clip(loss_rate, 0, 1)"),
    ("log_jitter_ms", "ln(1 + jitter_us / 1e3); 0 when unknown"),
    ("log_sending_rate_mbps", "ln(max(sending_rate_bps / 1e6, 1e-3))"),
)
BASE_COLUMNS = ("throughput_bps", "rtt_us", "rtt_ratio", "loss_rate", "jitter_us", "sending_rate_bps")
"""The FlowSample columns BASE_FEATURES are computed from."""
CONTEXT_FEATURES: tuple[str, ...] = ("local.others", "local.share", "local.jain")


def feature_names(window: int = WINDOW, actions: Sequence[str] = ACTIONS) -> list[str]:
    names = [f"w{i}.{name}" for i in range(window) for name, _ in BASE_FEATURES]
    return names + [f"cca.{a}" for a in actions] + list(CONTEXT_FEATURES)


def obs_dim(window: int = WINDOW, actions: Sequence[str] = ACTIONS) -> int:
    return window * len(BASE_FEATURES) + len(actions) + len(CONTEXT_FEATURES)


OBS_DIM = obs_dim()


def base_features(cols: Mapping[str, np.ndarray]) -> np.ndarray:
    """FlowSample columns (arrays of equal length) -> raw BASE_FEATURES, float64 [N, 6]."""
    with np.errstate(invalid="ignore", divide="ignore"):
        thr = np.asarray(cols["throughput_bps"], dtype=np.float64)
        rtt = np.asarray(cols["rtt_us"], dtype=np.float64)
        ratio = np.asarray(cols["rtt_ratio"], dtype=np.float64)
        loss = np.asarray(cols["loss_rate"], dtype=np.float64)
        jit = np.asarray(cols["jitter_us"], dtype=np.float64)
        snd = np.asarray(cols["sending_rate_bps"], dtype=np.float64)
        out = np.stack([
            np.log(np.maximum(np.nan_to_num(thr, nan=0.0) / 1e6, 1e-3)),
            np.log(np.maximum(rtt / 1e3, 1e-2)),
            np.log(np.clip(ratio, 1.0, 100.0)),
            np.clip(np.nan_to_num(loss, nan=0.0), 0.0, 1.0),
            np.log1p(np.maximum(np.nan_to_num(jit, nan=0.0), 0.0) / 1e3),
            np.log(np.maximum(np.nan_to_num(snd, nan=0.0) / 1e6, 1e-3)),
        ], axis=-1)
    return out  # NaN where RTT is unknown; standardisation maps it to 0 (the mean)


def competition_features(throughput_bps: np.ndarray, group: np.ndarray, active: np.ndarray) -> np.ndarray:
    """(local.others, local.share, local.jain) for every row; rows of a *group* share a host.

    Inactive rows still get features (as if they were active) but do not count for the others.
    """
    thr = np.maximum(np.nan_to_num(np.asarray(throughput_bps, dtype=np.float64), nan=0.0), 0.0)
    act = np.asarray(active, dtype=bool)
    _, inv = np.unique(np.asarray(group), return_inverse=True)
    n_g = np.bincount(inv, weights=act.astype(np.float64))
    s_g = np.bincount(inv, weights=thr * act)
    q_g = np.bincount(inv, weights=thr * thr * act)
    # each row's group as if the row itself were active
    n = n_g[inv] + (~act)
    s = s_g[inv] + thr * (~act)
    q = q_g[inv] + thr * thr * (~act)
    others = np.clip((n - 1) / MAX_OTHERS, 0.0, 1.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(s > 0, thr / s, 1.0 / np.maximum(n, 1))
        jain = np.where(q > 0, s * s / (n * q), 1.0)
    return np.stack([others, share, np.where(n <= 1, 1.0, jain)], axis=-1)


def is_active(throughput_bps: np.ndarray, sndq_bytes: np.ndarray) -> np.ndarray:
    thr = np.nan_to_num(np.asarray(throughput_bps, dtype=np.float64), nan=0.0)
    return (np.nan_to_num(np.asarray(sndq_bytes, dtype=np.float64), nan=0.0) > 0) | (thr >= ACTIVE_MIN_BPS)


@dataclass(frozen=True)
class Normalisation:
    """Per-BASE_FEATURE mean and std (from the training corpus), shared by every window slot."""

    mean: tuple[float, ...]
    std: tuple[float, ...]
    clip: float = CLIP

    @classmethod
    def fit(cls, raw: np.ndarray) -> Normalisation:
        """From raw BASE_FEATURES rows [N, 6] (NaN ignored; std floored at 1e-3)."""
        mean = np.nanmean(raw, axis=0)
        std = np.maximum(np.nanstd(raw, axis=0), 1e-3)
        mean = np.where(np.isnan(mean), 0.0, mean)
        return cls(tuple(float(x) for x in mean), tuple(float(x) for x in std))

    @classmethod
    def identity(cls) -> Normalisation:
        k = len(BASE_FEATURES)
        return cls((0.0,) * k, (1.0,) * k)

    def apply(self, raw: np.ndarray) -> np.ndarray:
        z = (raw - np.asarray(self.mean)) / np.asarray(self.std)
        return np.clip(np.nan_to_num(z, nan=0.0), -self.clip, self.clip)

    def as_dict(self) -> dict[str, object]:
        return {"mean": list(self.mean), "std": list(self.std), "clip": self.clip,
                "features": [n for n, _ in BASE_FEATURES]}


def push_window(buf: np.ndarray, slots: np.ndarray, new: np.ndarray, raw: np.ndarray) -> np.ndarray:
    """Shift each known flow's window (buf[slot], oldest first) by one interval and append its
    raw features; a new flow's window starts filled with its first interval.  Returns buf."""
    old = ~new
    buf[slots[old], :-1] = buf[slots[old], 1:]
    buf[slots[old], -1] = raw[old]
    buf[slots[new]] = raw[new][:, None, :]
    return buf


def assemble(window_raw: np.ndarray, cca_index: np.ndarray, context: np.ndarray,
             norm: Normalisation, n_actions: int = len(ACTIONS)) -> np.ndarray:
    """Observations [N, OBS_DIM] float32 from raw windows [N, W, 6], CCA indices [N]
    (-1: not one of the actions) and competition features [N, 3]."""
    n = window_raw.shape[0]
    z = norm.apply(window_raw).reshape(n, -1)
    idx = np.asarray(cca_index, dtype=np.int64)
    onehot = np.zeros((n, n_actions))
    ok = idx >= 0
    onehot[np.flatnonzero(ok), idx[ok]] = 1.0
    return np.concatenate([z, onehot, np.clip(context, 0.0, 1.0)], axis=1).astype(np.float32)


class ObservationBuilder:
    """Observations for live flows from successive FlowSample tables (the daemon's side).

    ``update(table)`` appends each row to its flow's window (a new flow's window
    is padded with its first sample) and returns ``(flow_ids, obs)`` for the
    flows in the table.  Flows absent for ``forget_after`` updates are dropped
    (checked every 16 updates).
    Competition is computed per ``netns_cookie`` (one host = one namespace).
    """

    def __init__(self, norm: Normalisation, *, window: int = WINDOW, actions: Sequence[str] = ACTIONS,
                 forget_after: int = 3) -> None:
        self.norm = norm
        self.window = window
        self.actions = tuple(actions)
        self.forget_after = forget_after
        self._slot: dict[int, int] = {}
        self._buf = np.zeros((64, window, len(BASE_FEATURES)))
        self._last_seen = np.zeros(64, dtype=np.int64)
        self._free = list(range(63, -1, -1))
        self._tick = 0
        self._cca_index = {a: i for i, a in enumerate(self.actions)}
        self._prev_ids: np.ndarray | None = None  # the last update's flow ids and their slots: when the
        self._prev_slots: np.ndarray | None = None  # next table lists the same flows, no per-flow lookup

    def _slots(self, ids: list[int]) -> tuple[np.ndarray, np.ndarray]:
        slots = np.empty(len(ids), dtype=np.int64)
        new = np.zeros(len(ids), dtype=bool)
        for i, fid in enumerate(ids):
            s = self._slot.get(fid)
            if s is None:
                if not self._free:
                    self._grow()
                s = self._free.pop()
                self._slot[fid] = s
                new[i] = True
            slots[i] = s
        return slots, new

    def _grow(self) -> None:
        old = len(self._buf)
        self._buf = np.concatenate([self._buf, np.zeros_like(self._buf)])
        self._last_seen = np.concatenate([self._last_seen, np.zeros_like(self._last_seen)])
        self._free.extend(range(2 * old - 1, old - 1, -1))

    def update(self, table: object) -> tuple[np.ndarray, np.ndarray]:
        """One tick from a FlowSample table: ``(flow_ids [N] uint64, obs [N, OBS_DIM] float32)``.

        *table*: a ccswitch.frame.FlowFrame (numpy columns, no pyarrow) or a pyarrow.Table."""
        from ccswitch.frame import FlowFrame

        if isinstance(table, FlowFrame):
            cols = {c: table.column(c) for c in (*BASE_COLUMNS, "flow_id", "sndq_bytes", "netns_cookie")}
            codes, values = table.codes("cca")
            lut = np.array([self._cca_index.get(v, -1) for v in values] or [-1], dtype=np.int64)
            return self._update(cols, lut[codes] if len(codes) else np.empty(0, dtype=np.int64))
        import pyarrow as pa
        import pyarrow.compute as pc

        cols = {c: table.column(c).to_numpy(zero_copy_only=False)  # type: ignore[attr-defined]
                for c in (*BASE_COLUMNS, "flow_id", "sndq_bytes", "netns_cookie")}
        idx = pc.index_in(table.column("cca"), value_set=pa.array(self.actions, pa.string()))  # type: ignore
        return self._update(cols, idx.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64))

    def update_arrays(self, cols: Mapping[str, np.ndarray], ccas: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Like :meth:`update`, from numpy columns and the CCA names."""
        cca_idx = np.fromiter((self._cca_index.get(c, -1) for c in ccas), dtype=np.int64, count=len(ccas))
        return self._update(cols, cca_idx)

    def _update(self, cols: Mapping[str, np.ndarray], cca_idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        self._tick += 1
        ids = np.asarray(cols["flow_id"]).astype(np.uint64)
        prev = self._prev_ids
        if prev is not None and self._prev_slots is not None and np.array_equal(ids, prev):
            slots, new = self._prev_slots, np.zeros(len(ids), dtype=bool)  # same flows as last tick
        else:
            slots, new = self._slots(ids.tolist())
        self._prev_ids, self._prev_slots = ids, slots
        buf = push_window(self._buf, slots, new, base_features(cols))
        self._last_seen[slots] = self._tick
        thr = np.asarray(cols["throughput_bps"], dtype=np.float64)
        ctx = competition_features(thr, np.asarray(cols["netns_cookie"]), is_active(thr, cols["sndq_bytes"]))
        obs = assemble(buf[slots], cca_idx, ctx, self.norm, len(self.actions))
        self._expire()
        return ids, obs

    def _expire(self) -> None:
        if self._tick % 16:
            return
        stale = [fid for fid, s in self._slot.items() if self._tick - self._last_seen[s] >= self.forget_after]
        for fid in stale:
            self._free.append(self._slot.pop(fid))

    def __len__(self) -> int:
        return len(self._slot)
