"""The DQN's observations for live flows, vectorised: envs.features.ObservationBuilder's rules on slot arrays.

Same contract as ``ObservationBuilder.update_arrays`` (envs/features.py, the one
definition of the features): every update appends each flow's newest raw
BASE_FEATURES to its window (a new flow's window is padded with its first
sample), the observation is ``assemble(window, CCA one-hot, competition)``,
and a flow absent for ``forget_after`` updates is dropped (checked every 16
updates).  The windows and the observation rows come from the same
:class:`~ccswitch.envs.features.WindowStore`; only the bookkeeping differs:
flow ids map to slots through :class:`~ccswitch.daemon.flowindex.FlowIndex`
(no per-flow Python step for known flows, none at all when a table lists
the same flows as the last one) and the CCA column arrives as codes.  A unit
test feeds both builders the same tables, with flows coming and going, and
compares the observations.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ccswitch.daemon.flowindex import FlowIndex
from ccswitch.envs.features import ACTIONS, WINDOW, Normalisation, WindowStore

EXPIRE_EVERY = 16  # as ObservationBuilder._expire


class LiveObservations:
    def __init__(self, norm: Normalisation, *, window: int = WINDOW, actions: Sequence[str] = ACTIONS,
                 forget_after: int = 3) -> None:
        self.norm = norm
        self.window = window
        self.actions = tuple(actions)
        self.forget_after = forget_after
        self._index = FlowIndex()
        self._store = WindowStore(norm, window, len(self.actions))
        self._tick = 0
        self._action_of = {a: i for i, a in enumerate(self.actions)}
        self._prev: tuple[np.ndarray, np.ndarray] | None = None  # the last update's flow ids and their slots

    def __len__(self) -> int:
        return len(self._index)

    def update(self, cols: Mapping[str, np.ndarray], cca_codes: np.ndarray, cca_values: Sequence[str]
               ) -> tuple[np.ndarray, np.ndarray]:
        """*cols*: BASE_COLUMNS, flow_id, sndq_bytes, netns_cookie (the competition group); the CCA of row i
        is cca_values[cca_codes[i]].  Returns (flow ids, observations [N, D] float32)."""
        self._tick += 1
        ids = np.asarray(cols["flow_id"]).astype(np.uint64)
        if self._prev is not None and np.array_equal(ids, self._prev[0]):
            slots, new = self._prev[1], np.zeros(len(ids), dtype=bool)  # the same flows as last time
        else:
            slots, new = self._index.slots_for(ids)
            self._store.reserve(self._index.size)
        self._prev = ids, slots
        lut = np.array([self._action_of.get(v, -1) for v in cca_values] or [-1], dtype=np.int64)
        cca_idx = lut[np.asarray(cca_codes, dtype=np.int64)] if len(ids) else np.empty(0, dtype=np.int64)
        obs = self._store.update(cols, cca_idx, slots, new, self._tick)
        self._expire()
        return ids, obs

    def _expire(self) -> None:
        if self._tick % EXPIRE_EVERY:
            return
        stale = self._tick - self._store.last_seen[self._index.slots] >= self.forget_after
        if stale.any():
            self._index.remove(self._index.ids[stale])
            self._prev = None  # its slots may be among the freed ones
