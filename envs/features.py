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
They are computed in envs/competition.py (what counts as an active flow, too).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from .competition import ACTIVE_MIN_BPS, competition_columns, competition_features, is_active
from .numeric import F64_MAX, zero_nan

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
    "WindowStore",
    "assemble",
    "base_feature_columns",
    "base_feature_rows",
    "base_features",
    "competition_columns",
    "competition_features",
    "feature_names",
    "is_active",
    "obs_dim",
    "set_cca_and_context",
    "short_string_index",
]

FEATURE_VERSION = 1
"""Bump when the meaning of any feature changes; policy files record it."""
ACTIONS: tuple[str, ...] = ("cubic", "bbr", "pcc")
"""The agent's choices: the CCA of the flow for the next interval."""
WINDOW = 4
"""Intervals of history in an observation."""
CLIP = 10.0
"""Standardised features are clipped to [-CLIP, CLIP] (the observation space bounds)."""

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


_Columns = TypeVar("_Columns", np.ndarray, list[np.ndarray])  # features stored feature-major: one array or columns


def feature_names(window: int = WINDOW, actions: Sequence[str] = ACTIONS) -> list[str]:
    names = [f"w{i}.{name}" for i in range(window) for name, _ in BASE_FEATURES]
    return names + [f"cca.{a}" for a in actions] + list(CONTEXT_FEATURES)


def obs_dim(window: int = WINDOW, actions: Sequence[str] = ACTIONS) -> int:
    return window * len(BASE_FEATURES) + len(actions) + len(CONTEXT_FEATURES)


OBS_DIM = obs_dim()


def base_feature_columns(cols: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """FlowSample columns (arrays of equal length) -> the raw BASE_FEATURES, one float64 array each."""
    return list(base_feature_rows(cols))


def base_feature_rows(cols: Mapping[str, np.ndarray], out: np.ndarray | None = None) -> np.ndarray:
    """FlowSample columns (arrays of equal shape S) -> the raw BASE_FEATURES feature-major, float64 [6, *S]
    (written into *out* when given).

    The BASE_FEATURES formulas bit for bit, in fewer passes: np.fmax's floor turns NaN into the floor as
    nan_to_num's 0 would, and +inf is capped where nan_to_num's largest float ends up after the division."""
    thr, rtt, ratio, loss, jit, snd = (np.asarray(cols[c], dtype=np.float64) for c in BASE_COLUMNS)
    z = np.empty((len(BASE_FEATURES), *thr.shape)) if out is None else out
    with np.errstate(invalid="ignore", divide="ignore"):
        for row, rate in ((z[0], thr), (z[5], snd)):  # ln(max(nan_to_num(rate) / 1e6, 1e-3))
            np.divide(rate, 1e6, out=row)
            np.fmax(row, 1e-3, out=row)
            np.fmin(row, F64_MAX / 1e6, out=row)
            np.log(row, out=row)
        np.log(np.maximum(np.divide(rtt, 1e3, out=z[1]), 1e-2, out=z[1]), out=z[1])
        np.log(np.clip(ratio, 1.0, 100.0, out=z[2]), out=z[2])
        zero_nan(np.clip(loss, 0.0, 1.0, out=z[3]))  # clip(nan_to_num(loss), 0, 1)
        np.maximum(jit, 0.0, out=z[4])  # ln(1 + max(nan_to_num(jitter), 0) / 1e3)
        np.divide(z[4], 1e3, out=z[4])
        np.log1p(np.minimum(z[4], F64_MAX / 1e3, out=z[4]), out=z[4])  # np.minimum keeps NaN: zeroed here
        zero_nan(z[4])
    return z  # NaN where RTT is unknown; standardisation maps it to 0 (the mean)


def base_features(cols: Mapping[str, np.ndarray]) -> np.ndarray:
    """FlowSample columns (arrays of equal length) -> raw BASE_FEATURES, float64 [N, 6]."""
    return np.stack(base_feature_columns(cols), axis=-1)


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
        """Standardised features [..., 6] from raw ones [..., 6]."""
        raw = np.asarray(raw, dtype=np.float64)
        z = raw.reshape(-1, raw.shape[-1]).T.copy()  # feature-major [6, rows], a copy: standardise works in place
        return self.standardise(z).T.reshape(raw.shape)

    def standardise(self, z: _Columns) -> _Columns:
        """In place on raw features stored feature-major: ``z[k]`` is BASE_FEATURE k, a float64 array of any
        shape (z: one array, or a list of them).  Returns z.

        The arithmetic of apply(); each feature's mean and std apply to its contiguous values (numpy
        broadcasts over a trailing axis of 6 much more slowly).  Clipping keeps NaN, then NaN -> 0: the
        result of nan_to_num then clip."""
        if isinstance(z, np.ndarray):  # all features in one pass per step, as z[k] -= mean[k] ...
            shape = (len(self.mean),) + (1,) * (z.ndim - 1)
            z -= np.reshape(self.mean, shape)
            z /= np.reshape(self.std, shape)
            return zero_nan(np.clip(z, -self.clip, self.clip, out=z))
        for k, (mean, std) in enumerate(zip(self.mean, self.std, strict=True)):
            x = z[k]
            x -= mean
            x /= std
            zero_nan(np.clip(x, -self.clip, self.clip, out=x))
        return z

    def as_dict(self) -> dict[str, object]:
        return {"mean": list(self.mean), "std": list(self.std), "clip": self.clip,
                "features": [n for n, _ in BASE_FEATURES]}


def assemble(window_raw: np.ndarray, cca_index: np.ndarray, context: np.ndarray,
             norm: Normalisation, n_actions: int = len(ACTIONS)) -> np.ndarray:
    """Observations [N, OBS_DIM] float32 from raw windows [N, W, 6], CCA indices [N]
    (-1: not one of the actions) and competition features [N, 3]."""
    n, w = window_raw.shape[:2]
    obs = np.empty((n, w * len(BASE_FEATURES) + n_actions + len(CONTEXT_FEATURES)), dtype=np.float32)
    obs[:, :w * len(BASE_FEATURES)] = norm.apply(window_raw).reshape(n, -1)  # float64 -> float32 as astype
    return set_cca_and_context(obs, cca_index, context, n_actions)


def set_cca_and_context(obs: np.ndarray, cca_index: np.ndarray, context: np.ndarray | Sequence[np.ndarray],
                        n_actions: int) -> np.ndarray:
    """Fill the columns after the windows of observations *obs* [N, D]: the CCA one-hot from cca_index [N]
    (-1: not one of the actions) and the competition features (an [N, 3] array or its 3 columns) clipped
    to [0, 1].  Returns obs."""
    nz = obs.shape[1] - n_actions - len(CONTEXT_FEATURES)
    idx = np.asarray(cca_index)
    for j in range(n_actions):  # column by column: numpy loops slowly over a trailing axis of 3
        obs[:, nz + j] = idx == j
    for j, col in enumerate(context.T if isinstance(context, np.ndarray) else context):
        obs[:, nz + n_actions + j] = np.clip(col, 0.0, 1.0)
    return obs


class WindowStore:
    """The per-slot state behind ObservationBuilder and the daemon's LiveObservations (which map flow ids to
    slots): each slot's last observation row, float32, and the tick it was last updated.

    A row holds the window of standardised BASE_FEATURES (W intervals of 6, oldest first), then the CCA
    one-hot and context of that tick.  Windows are kept standardised, rounded to float32 as the observation
    is, not raw: standardisation is elementwise, so this equals assemble() on the raw window bit for bit with
    a quarter of the arithmetic.  And since a row is laid out as the observation, the next tick's rows are
    the stored ones moved left by 6 values, one flat copy: each window drops its oldest interval, and what
    moves into the last interval and after it is overwritten.
    """

    def __init__(self, norm: Normalisation, window: int = WINDOW, n_actions: int = len(ACTIONS)) -> None:
        self.norm = norm
        self.window = window
        self.n_actions = n_actions
        self.rows = np.zeros((64, window * len(BASE_FEATURES) + n_actions + len(CONTEXT_FEATURES)), np.float32)
        self.last_seen = np.zeros(64, dtype=np.int64)
        self._group: np.ndarray | None = None  # the last netns_cookie column and its np.unique inverse
        self._group_inverse: np.ndarray | None = None
        self._slots_range: tuple[np.ndarray | None, slice | None] = (None, None)  # the last slots given, as a slice
        self._scratch = np.empty((len(BASE_FEATURES), 0))  # _tail's buffers, grown to the largest table
        self._tail_buf = np.empty((0, 0), np.float32)

    @property
    def capacity(self) -> int:
        return len(self.rows)

    def reserve(self, size: int) -> None:
        """Room for slots 0 .. size - 1 (grows at least twofold)."""
        if size > self.capacity:
            grow = max(size, 2 * self.capacity) - self.capacity
            self.rows = np.concatenate([self.rows, np.zeros((grow, self.rows.shape[1]), np.float32)])
            self.last_seen = np.concatenate([self.last_seen, np.zeros(grow, dtype=np.int64)])

    def _range(self, slots: np.ndarray) -> slice | None:
        """*slots* as a slice when they are consecutive and ascending, else None.  Remembered for the array
        object: the builders pass the same one again while a table lists the same flows."""
        if self._slots_range[0] is not slots:
            n, first = len(slots), int(slots[0]) if len(slots) else 0
            consecutive = n > 0 and int(slots[-1]) - first == n - 1 and (n == 1 or bool((np.diff(slots) == 1).all()))
            self._slots_range = (slots, slice(first, first + n) if consecutive else None)
        return self._slots_range[1]

    def update(self, cols: Mapping[str, np.ndarray], cca_index: np.ndarray, slots: np.ndarray, new: np.ndarray,
               tick: int) -> np.ndarray:
        """One tick of rows in *slots*: the observations [N, OBS_DIM] float32.  Each row's newest interval
        is appended to its slot's window (shifting out the oldest), or fills it if *new* (the slot's first tick).

        *cols*: BASE_COLUMNS, sndq_bytes and netns_cookie (the competition group); cca_index [N]: -1 for none."""
        k, nz = len(BASE_FEATURES), self.window * len(BASE_FEATURES)
        obs = np.empty((len(slots), self.rows.shape[1]), np.float32)
        flat = obs.reshape(-1)
        any_new = bool(new.any())
        run = None if any_new else self._range(slots)
        if run is not None:  # the steady state: the same flows in slot order, slices instead of gathers
            flat[:-k] = self.rows[run].reshape(-1)[k:]
        else:
            np.take(self.rows, slots, axis=0, out=obs)  # much faster than fancy indexing of rows
            flat[:-k] = flat[k:]  # overlapping: numpy copies through a buffer
        obs[:, nz - k:] = self._tail(cols, cca_index).T  # one strided copy (a column at a time costs twice that)
        if any_new:  # a new flow's window: its first interval throughout
            obs[new, :nz] = np.tile(obs[new, nz - k:nz], self.window)
        if run is not None:
            self.rows[run] = obs
            self.last_seen[run] = tick
            return obs
        if any_new:  # the known flows, then the new ones: a flow listed twice in a table ends as
            self.rows[slots[~new]] = obs[~new]  # ObservationBuilder's rule always left it ...
            self.rows[slots[new]] = obs[new]
        else:
            self.rows[slots] = obs
        self.last_seen[slots] = tick
        if len(slots) > 1 and np.bincount(slots).max() > 1:  # ... and every listing shows the stored window
            obs[:, :nz] = np.take(self.rows, slots, axis=0)[:, :nz]
        return obs

    def _tail(self, cols: Mapping[str, np.ndarray], cca_index: np.ndarray) -> np.ndarray:
        """What a tick writes after the shifted windows, feature-major float32 [6 + n_actions + 3, N]: the
        newest interval standardised, the CCA one-hot and the context clipped to [0, 1].  Each row is one
        contiguous pass, in buffers kept across ticks."""
        n, k = len(cca_index), len(BASE_FEATURES)
        if self._scratch.shape[1] < n:
            self._scratch = np.empty((k, n))
            self._tail_buf = np.empty((self.rows.shape[1] - self.window * k + k, n), np.float32)
        tail = self._tail_buf[:, :n]
        tail[:k] = self.norm.standardise(base_feature_rows(cols, out=self._scratch[:, :n]))  # float64 -> float32
        for j in range(self.n_actions):
            np.equal(cca_index, j, out=tail[k + j])
        thr = np.asarray(cols["throughput_bps"], dtype=np.float64)
        group = np.asarray(cols["netns_cookie"])
        if self._group is None or not np.array_equal(group, self._group):
            self._group, self._group_inverse = group.copy(), np.unique(group, return_inverse=True)[1]
        ctx = competition_columns(thr, group, is_active(thr, cols["sndq_bytes"]), group_inverse=self._group_inverse)
        for j, col in enumerate(ctx):
            np.clip(col, 0.0, 1.0, out=tail[k + self.n_actions + j])
        return tail


def short_string_index(array: object, values: Sequence[str]) -> np.ndarray | None:
    """Each row's index in *values* (the first if repeated; -1: none) for a pyarrow string array without
    nulls, as ``pc.index_in`` gives it; None when the values are not all of 8 bytes or less (UTF-8) or the
    array is of another kind.

    index_in hashes every string (about 20 ns a row); this reads each string's first 8 bytes as one integer
    and compares it, masked to a value's length, and the string's length with each value's: a few
    branch-free passes."""
    import pyarrow as pa

    if not isinstance(array, pa.Array) or array.null_count or not (
            pa.types.is_string(array.type) or pa.types.is_large_string(array.type)):
        return None
    encoded = [v.encode() for v in values]
    if any(len(e) > 8 for e in encoded):
        return None
    out = np.full(len(array), -1, dtype=np.int64)
    if not len(array):
        return out
    width = 8 if pa.types.is_large_string(array.type) else 4
    _, offsets_buf, data_buf = array.buffers()
    offsets = np.frombuffer(offsets_buf, f"<i{width}", len(array) + 1, array.offset * width)
    data = np.zeros((data_buf.size if data_buf is not None else 0) + 8, np.uint8)  # + 8: every read in bounds
    if data_buf is not None:
        data[:-8] = np.frombuffer(data_buf, np.uint8)
    words = np.ndarray((len(data) - 7,), np.dtype("<u8"), data, 0, (1,))  # words[i]: the 8 bytes from byte i
    start = offsets[:-1]
    keys, length = words.take(start), offsets[1:] - start
    for j, e in enumerate(encoded):
        if e in encoded[:j]:
            continue  # the first of repeated values wins: the matches below are then exclusive
        match = (keys & np.uint64((1 << 8 * len(e)) - 1)) == np.uint64(int.from_bytes(e, "little"))
        match &= length == len(e)
        out += match * (j + 1)  # arithmetic: np.where or a masked store mispredict on mixed rows
    return out


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
        self._store = WindowStore(norm, window, len(self.actions))
        self._free = list(range(self._store.capacity - 1, -1, -1))
        self._tick = 0
        self._cca_index = {a: i for i, a in enumerate(self.actions)}
        self._action_array: object | None = None  # the actions as a pyarrow array, for pyarrow tables
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
        old = self._store.capacity
        self._store.reserve(2 * old)
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
        cca = table.column("cca")  # type: ignore[attr-defined]
        cca = cca.combine_chunks() if isinstance(cca, pa.ChunkedArray) else cca
        idx = short_string_index(cca, self.actions)
        if idx is None:
            if self._action_array is None:
                self._action_array = pa.array(self.actions, pa.string())
            found = pc.index_in(cca, value_set=self._action_array)  # type: ignore[attr-defined]
            idx = found.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
        return self._update(cols, idx)

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
        obs = self._store.update(cols, cca_idx, slots, new, self._tick)
        self._expire()
        return ids, obs

    def _expire(self) -> None:
        if self._tick % 16 or not self._slot:
            return
        slots = np.fromiter(self._slot.values(), dtype=np.int64, count=len(self._slot))
        stale = (self._tick - self._store.last_seen[slots] >= self.forget_after).tolist()
        for fid in [fid for fid, old in zip(self._slot, stale, strict=True) if old]:
            self._free.append(self._slot.pop(fid))

    def __len__(self) -> int:
        return len(self._slot)
