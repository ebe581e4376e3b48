"""The DQN's observations for live flows, vectorised: envs.features.ObservationBuilder's rules on slot arrays.

Same contract as ``ObservationBuilder.update_arrays`` (envs/features.py, the one
definition of the features): every update appends each flow's newest raw
BASE_FEATURES to its window (a new flow's window is padded with its first
sample), the observation is ``assemble(window, CCA one-hot, competition)``,
and a flow absent for ``forget_after`` updates is dropped (checked every 16
updates).  The features themselves come from the same functions
(base_features, competition_features, is_active, assemble); only the
bookkeeping differs: flow ids map to window slots through
:class:`~ccswitch.daemon.flowindex.FlowIndex` (no per-flow Python step for
known flows) and the CCA column arrives as codes.  A unit test feeds both
builders the same tables, with flows coming and going, and compares the
observations.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ccswitch.daemon.flowindex import FlowIndex
from ccswitch.envs.features import (
    ACTIONS,
    BASE_FEATURES,
    WINDOW,
    Normalisation,
    assemble,
    base_features,
    competition_features,
    is_active,
    push_window,
)

EXPIRE_EVERY = 16  # as ObservationBuilder._expire


class LiveObservations:
    def __init__(self, norm: Normalisation, *, window: int = WINDOW, actions: Sequence[str] = ACTIONS,
                 forget_after: int = 3) -> None:
        self.norm = norm
        self.window = window
        self.actions = tuple(actions)
        self.forget_after = forget_after
        self._index = FlowIndex()
        self._buf = np.zeros((64, window, len(BASE_FEATURES)))
        self._last_seen = np.zeros(64, dtype=np.int64)
        self._tick = 0
        self._action_of = {a: i for i, a in enumerate(self.actions)}

    def __len__(self) -> int:
        return len(self._index)

    def update(self, cols: Mapping[str, np.ndarray], cca_codes: np.ndarray, cca_values: Sequence[str]
               ) -> tuple[np.ndarray, np.ndarray]:
        """*cols*: BASE_COLUMNS, flow_id, sndq_bytes, netns_cookie (the competition group); the CCA of row i
        is cca_values[cca_codes[i]].  Returns (flow ids, observations [N, D] float32)."""
        self._tick += 1
        ids = np.asarray(cols["flow_id"]).astype(np.uint64)
        slots, new = self._index.slots_for(ids)
        if self._index.size > len(self._buf):
            grow = max(self._index.size, 2 * len(self._buf)) - len(self._buf)
            self._buf = np.concatenate([self._buf, np.zeros((grow, *self._buf.shape[1:]))])
            self._last_seen = np.concatenate([self._last_seen, np.zeros(grow, dtype=np.int64)])
        buf = push_window(self._buf, slots, new, base_features(cols))
        self._last_seen[slots] = self._tick
        lut = np.array([self._action_of.get(v, -1) for v in cca_values] or [-1], dtype=np.int64)
        cca_idx = lut[np.asarray(cca_codes, dtype=np.int64)] if len(ids) else np.empty(0, dtype=np.int64)
        thr = np.asarray(cols["throughput_bps"], dtype=np.float64)
        ctx = competition_features(thr, np.asarray(cols["netns_cookie"]), is_active(thr, cols["sndq_bytes"]))
        obs = assemble(buf[slots], cca_idx, ctx, self.norm, len(self.actions))
        self._expire()
        return ids, obs

    def _expire(self) -> None:
        if self._tick % EXPIRE_EVERY:
            return
        stale = self._tick - self._last_seen[self._index.slots] >= self.forget_after
        if stale.any():
            self._index.remove(self._index.ids[stale])
