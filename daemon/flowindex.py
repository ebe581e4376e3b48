"""Per-flow state in arrays: flow id -> dense slot for whole columns at once, and string columns as codes.

The daemon keeps per-flow numbers (first seen, running reward, observation
windows, the heuristic's memory) in numpy arrays indexed by a slot.  A Python
dict lookup per flow per decision cost milliseconds at 1,000 flows, so
:class:`FlowIndex` keeps the known ids sorted next to their slots and maps a
whole column with one ``np.searchsorted``; only flows seen for the first time
take a Python step (a slot from the free list).  Freed slots are reused, so
the arrays stay as large as the peak number of flows.

:func:`string_codes` turns a string column (CCA names, remote addresses) into
integer codes and the list of distinct values without Arrow compute kernels:
their first use loads pyarrow.compute and Arrow's function registry (~10 MB
resident, half a second), which the daemon otherwise does not need.  The
strings are read from the column's offset and data buffers into a fixed-width
byte matrix, and ``np.unique`` over its rows gives the codes.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ccswitch.sampler import expand_strings


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


_MEMO: list[tuple[pa.Array, tuple[np.ndarray, list[str]]]] = []
MEMO_SIZE = 4  # a decision reads the CCA column in the controller and the decider, and the remote addresses


def string_codes(col: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, list[str]]:
    """(codes, values): values[codes[i]] == col[i] (nulls read as ""), values sorted, no Arrow compute.

    The last MEMO_SIZE results are kept with their arrays (so their buffers stay alive and an
    address can only match the same buffer): the same column asked for again costs nothing.
    """
    if isinstance(col, pa.ChunkedArray) and col.num_chunks == 1:
        col = col.chunk(0)
    if isinstance(col, pa.Array):
        for arr_, res in _MEMO:
            if arr_ is col or (arr_.type == col.type and len(arr_) == len(col) and arr_.offset == col.offset
                               and [b.address if b else 0 for b in arr_.buffers()]
                               == [b.address if b else 0 for b in col.buffers()]):
                return res
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    res = _string_codes(arr)
    _MEMO.insert(0, (arr, res))
    del _MEMO[MEMO_SIZE:]
    return res


def _string_codes(arr: pa.Array) -> tuple[np.ndarray, list[str]]:
    n = len(arr)
    if n == 0:
        return np.empty(0, dtype=np.int64), []
    if pa.types.is_large_string(arr.type):
        off_type: type[np.signedinteger] = np.int64
    elif pa.types.is_string(arr.type):
        off_type = np.int32
    else:
        raise TypeError(f"string_codes: a string column is needed, got {arr.type}")
    _, off_buf, data_buf = arr.buffers()
    off = np.frombuffer(off_buf, dtype=off_type, count=n + 1, offset=arr.offset * np.dtype(off_type).itemsize)
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None and data_buf.size else np.zeros(1, np.uint8)
    lens = np.diff(off).astype(np.int64)
    width = max(int(lens.max()), 1)
    col_i = np.arange(width)
    pos = np.minimum(off[:-1, None].astype(np.int64) + col_i, len(data) - 1)
    if width <= 8:  # CCA names, IPv4 up to 8 characters: one integer per row
        width = 8
        col_i = np.arange(width)
        pos = np.minimum(off[:-1, None].astype(np.int64) + col_i, len(data) - 1)
    mat = np.where(col_i < lens[:, None], data[pos], 0).astype(np.uint8)
    keys = np.ascontiguousarray(mat).view(np.dtype(">u8") if width == 8 else np.dtype((np.void, width))).ravel()
    _, first, codes = np.unique(keys, return_index=True, return_inverse=True)
    values = [bytes(data[off[i]:off[i] + lens[i]]).decode() for i in first.tolist()]
    return codes.astype(np.int64).ravel(), values


def take_rows(t: pa.Table, rows: np.ndarray) -> pa.Table:
    """t.take(rows) without Arrow compute (numpy per column; a column with nulls falls back to Arrow)."""
    cols = []
    for name, field in zip(t.column_names, t.schema, strict=True):
        col = t.column(name)
        if col.null_count:
            cols.append(col.take(pa.array(rows)))
        elif pa.types.is_string(field.type):
            codes, values = string_codes(col)
            cols.append(expand_strings(values, codes[rows]))
        else:
            cols.append(pa.array(col.to_numpy()[rows], field.type))
    return pa.Table.from_arrays(cols, schema=t.schema)
