"""Per-flow state in arrays: flow id -> dense slot for whole columns at once, and string columns as codes.

The daemon keeps per-flow numbers (first seen, running reward, observation
windows, the heuristic's memory) in numpy arrays indexed by a slot.  A Python
dict lookup per flow per decision cost milliseconds at 1,000 flows, so
:class:`FlowIndex` keeps the known ids sorted next to their slots and maps a
whole column with one ``np.searchsorted``; only flows seen for the first time
take a Python step (a slot from the free list).  Freed slots are reused, so
the arrays stay as large as the peak number of flows.

:func:`string_codes` turns a pyarrow string column into integer codes and the
list of distinct values without Arrow compute kernels (for Arrow tables; the
daemon's FlowFrames keep string columns as codes already, FlowFrame.codes).

:class:`RowFinder` finds the rows of given flows in a table's flow-id column
(sorted once, one searchsorted); :class:`Ccas` reads a CCA column kept as codes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

from ccswitch.frame import arrow_string_codes

if TYPE_CHECKING:
    import pyarrow as pa


class FlowIndex:
    def __init__(self) -> None:
        self.ids = np.empty(0, dtype=np.uint64)  # known ids, sorted
        self.slots = np.empty(0, dtype=np.int64)  # slot of each id in self.ids
        self.size = 0  # slots handed out so far (free ones included)
        self._free: list[int] = []

    def __len__(self) -> int:
        return len(self.ids)

    def lookup(self, ids: np.ndarray) -> np.ndarray:
        """Slot of every id (-1: unknown)."""
        ids = np.asarray(ids, dtype=np.uint64)
        if not len(self.ids) or not len(ids):
            return np.full(len(ids), -1, dtype=np.int64)
        pos = np.minimum(np.searchsorted(self.ids, ids), len(self.ids) - 1)
        return np.where(self.ids[pos] == ids, self.slots[pos], -1)

    def slots_for(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(slots, new): the slot of every id (unique ids), adding the unknown ones (new = True)."""
        ids = np.asarray(ids, dtype=np.uint64)
        slots = self.lookup(ids)
        new = slots < 0
        if new.any():
            fresh = ids[new]
            got = np.empty(len(fresh), dtype=np.int64)
            for k in range(len(fresh)):
                if self._free:
                    got[k] = self._free.pop()
                else:
                    got[k] = self.size
                    self.size += 1
            slots[new] = got
            all_ids = np.concatenate([self.ids, fresh])
            order = np.argsort(all_ids, kind="stable")
            self.ids, self.slots = all_ids[order], np.concatenate([self.slots, got])[order]
        return slots, new

    def remove(self, ids: np.ndarray) -> np.ndarray:
        """Forget *ids* (unknown ones are ignored); returns the freed slots."""
        drop = np.isin(self.ids, np.asarray(ids, dtype=np.uint64))
        return self._drop(drop)

    def retain(self, ids: np.ndarray) -> np.ndarray:
        """Forget every id not in *ids*; returns the freed slots."""
        drop = ~np.isin(self.ids, np.asarray(ids, dtype=np.uint64))
        return self._drop(drop)

    def _drop(self, drop: np.ndarray) -> np.ndarray:
        if not drop.any():
            return np.empty(0, dtype=np.int64)
        freed = self.slots[drop]
        self._free.extend(freed.tolist()[::-1])
        self.ids, self.slots = self.ids[~drop], self.slots[~drop]
        return freed


class RowFinder:
    """Rows of a table's flow ids holding given flows; sorts the ids on first use only."""

    def __init__(self, ids: np.ndarray):
        self.ids = ids
        self._order: np.ndarray | None = None

    def rows(self, flows: Iterable[int], mask: np.ndarray | None = None) -> list[int]:
        """Ascending rows of *flows* (absent ones skipped; with *mask*, only rows where it is set)."""
        want = np.fromiter(flows, np.uint64)
        if not len(want) or not len(self.ids):
            return []
        if self._order is None:
            self._order = np.argsort(self.ids, kind="stable")
        srt = self.ids[self._order]
        pos = np.minimum(np.searchsorted(srt, want), len(srt) - 1)
        rows = self._order[pos[srt[pos] == want]]
        if mask is not None:
            rows = rows[mask[rows]]
        return np.unique(rows).tolist()


class Ccas:
    """The CCA of row i of a table whose CCA column came as codes (flowindex.string_codes)."""

    def __init__(self, codes: np.ndarray, names: list[str]):
        self.codes, self.names = codes, names

    def __getitem__(self, i: int) -> str:
        return self.names[self.codes[i]]


def string_codes(col: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, list[str]]:
    """(codes, values) of a pyarrow string column: values[codes[i]] == col[i] (nulls read as ""), values
    sorted, no Arrow compute (ccswitch.frame.arrow_string_codes).  The daemon itself reads string
    columns of FlowFrames (FlowFrame.codes); this is for Arrow tables (tests, tools)."""
    import pyarrow as pa

    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    return arrow_string_codes(arr)
