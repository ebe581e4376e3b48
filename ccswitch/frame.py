"""FlowFrame: a batch of FlowSample rows as numpy columns (the daemon's in-memory form).

ccswitchd decides on FlowSample rows (ccswitch/schema.py) every interval.  Holding them
as a pyarrow.Table cost ~40 MB of resident memory for Arrow's shared libraries alone
(docs/daemon.md, "Costs"), so inside the daemon a batch is a FlowFrame: one numpy
array per column, in FIELDS order, with

* numeric columns as arrays of the field's dtype (``column(name)``);
* string columns (src, dst, cca) as codes into a list of values (``codes(name)``
  gives them with the values sorted and unused ones dropped, the form the daemon
  groups by; ``column(name)`` expands them to an object array);
* an optional null mask per column (True = null), for the nullable optional
  columns of tables read from files written before those columns existed.

Arrow only at the boundaries: ``to_arrow()`` / ``from_arrow()`` convert losslessly to
and from a pyarrow.Table with FLOW_SAMPLE_SCHEMA (the recorder's Parquet, the CLI,
datasets), importing pyarrow on first use.  ``as_frame`` accepts either.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Union

import numpy as np

from ccswitch.schema import FIELD_BY_NAME, FIELD_NAMES, FIELDS, flow_sample_schema

if TYPE_CHECKING:
    import pyarrow as pa

Strings = tuple[np.ndarray, Sequence[str]]
"""A string column: (codes [N] int, values); row i is values[codes[i]]."""
ColumnLike = Union[np.ndarray, Strings, Sequence[Any]]  # noqa: UP007 (a runtime alias)


class FlowFrame:
    """FlowSample rows as numpy columns; see the module docstring."""

    __slots__ = ("_canon", "_cols", "_nulls", "num_rows")

    def __init__(self, columns: Mapping[str, ColumnLike], nulls: Mapping[str, np.ndarray] | None = None):
        """*columns*: every FlowSample column (numeric: array-like, cast to the field's dtype; string:
        (codes, values) or a sequence of str).  *nulls*: per column, a bool mask (True = null)."""
        cols: dict[str, Any] = {}
        n: int | None = None
        for f in FIELDS:
            v = columns[f.name]
            if f.is_string:
                if isinstance(v, tuple):
                    codes, values = v
                    v = (np.asarray(codes, dtype=np.int64).ravel(), list(values))
                else:  # plain strings: one code per distinct value
                    values, codes = np.unique(np.asarray(list(v), dtype=object).astype(str), return_inverse=True)
                    v = (codes.astype(np.int64).ravel(), values.tolist())
                m = len(v[0])
            else:
                v = np.asarray(v, dtype=f.dtype)
                m = len(v)
            if n is None:
                n = m
            elif m != n:
                raise ValueError(f"FlowFrame: column {f.name!r} has {m} rows, the others {n}")
            cols[f.name] = v
        self._cols = cols
        self.num_rows = n or 0
        self._nulls = {k: np.asarray(m, dtype=bool) for k, m in (nulls or {}).items() if np.any(m)}
        self._canon: dict[str, tuple[np.ndarray, list[str]]] = {}

    # ------------------------------------------------------------------ construction
    @classmethod
    def empty(cls) -> FlowFrame:
        return cls({f.name: (np.empty(0, np.int64), []) if f.is_string else np.empty(0, f.dtype) for f in FIELDS})

    @classmethod
    def concat(cls, frames: Sequence[FlowFrame]) -> FlowFrame:
        """The rows of *frames*, in order."""
        if len(frames) == 1:
            return frames[0]
        if not frames:
            return cls.empty()
        cols: dict[str, ColumnLike] = {}
        for f in FIELDS:
            if f.is_string:
                codes, values, base = [], [], 0
                for fr in frames:
                    c, v = fr._cols[f.name]
                    codes.append(c + base)
                    values.extend(v)
                    base += len(v)
                cols[f.name] = (np.concatenate(codes), values)
            else:
                cols[f.name] = np.concatenate([fr._cols[f.name] for fr in frames])
        names = {k for fr in frames for k in fr._nulls}
        nulls = {k: np.concatenate([fr.null_mask(k) for fr in frames]) for k in names}
        return cls(cols, nulls)

    # ------------------------------------------------------------------ access
    def __len__(self) -> int:
        return self.num_rows

    @property
    def column_names(self) -> list[str]:
        return list(FIELD_NAMES)

    def column(self, name: str) -> np.ndarray:
        """The column as a numpy array (a string column as an object array of str; nulls read as 0 / "")."""
        v = self._cols[name]
        if isinstance(v, tuple):
            codes, values = v
            return np.array(list(values) or [""], dtype=object)[codes] if len(codes) else np.empty(0, dtype=object)
        return v

    def codes(self, name: str) -> tuple[np.ndarray, list[str]]:
        """A string column as (codes, values): values sorted and distinct, values[codes[i]] is row i."""
        res = self._canon.get(name)
        if res is None:
            codes, values = self._cols[name]
            res = self._canon[name] = _canonical(codes, values)
        return res

    def value_counts(self, name: str) -> dict[str, int]:
        """Rows per value of a string column, in order of first appearance (as Arrow's value_counts)."""
        codes, values = self.codes(name)
        if not len(codes):
            return {}
        uniq, first, counts = np.unique(codes, return_index=True, return_counts=True)
        return {values[uniq[k]]: int(counts[k]) for k in np.argsort(first, kind="stable").tolist()}

    def null_mask(self, name: str) -> np.ndarray:
        """True where the column is null (only optional columns read from older files have nulls)."""
        m = self._nulls.get(name)
        return m if m is not None else np.zeros(self.num_rows, dtype=bool)

    def take(self, rows: np.ndarray | Sequence[int]) -> FlowFrame:
        """The given rows, in that order."""
        idx = np.asarray(rows, dtype=np.intp)
        cols: dict[str, ColumnLike] = {}
        for name, v in self._cols.items():
            cols[name] = (v[0][idx], v[1]) if isinstance(v, tuple) else v[idx]
        return FlowFrame(cols, {k: m[idx] for k, m in self._nulls.items()})

    def with_columns(self, columns: Mapping[str, ColumnLike]) -> FlowFrame:
        """A copy with *columns* replaced (their nulls cleared)."""
        cols = {**self._cols, **columns}
        return FlowFrame(cols, {k: m for k, m in self._nulls.items() if k not in columns})

    def to_pylist(self) -> list[dict[str, Any]]:
        """One dict per row, as pyarrow.Table.to_pylist() gives it (None for nulls)."""
        lists = []
        for name in FIELD_NAMES:
            vals = self.column(name).tolist()
            m = self._nulls.get(name)
            if m is not None:
                vals = [None if null else x for x, null in zip(vals, m.tolist(), strict=True)]
            lists.append(vals)
        return [dict(zip(FIELD_NAMES, row, strict=True)) for row in zip(*lists, strict=True)]

    def row(self, i: int) -> dict[str, Any]:
        return self.take([i]).to_pylist()[0]

    # ------------------------------------------------------------------ Arrow boundary
    def to_arrow(self) -> pa.Table:
        """The rows as a pyarrow.Table with FLOW_SAMPLE_SCHEMA (imports pyarrow)."""
        import pyarrow as pa

        arrays = []
        for f in FIELDS:
            v, m = self._cols[f.name], self._nulls.get(f.name)
            if isinstance(v, tuple):
                arrays.append(expand_strings(v[1], v[0], m))
            else:
                arrays.append(pa.array(v, f.type, mask=m))
        return pa.Table.from_arrays(arrays, schema=flow_sample_schema())

    @classmethod
    def from_arrow(cls, table: pa.Table) -> FlowFrame:
        """A FlowSample table (optional columns may be missing or null) as a FlowFrame (no Arrow compute)."""
        import pyarrow as pa

        cols: dict[str, ColumnLike] = {}
        nulls: dict[str, np.ndarray] = {}
        n = table.num_rows
        for f in FIELDS:
            if f.name not in table.column_names:
                if not f.optional:
                    raise KeyError(f"FlowSample column {f.name!r} missing")
                cols[f.name] = (np.zeros(n, np.int64), [""]) if f.is_string else np.zeros(n, f.dtype)
                nulls[f.name] = np.ones(n, dtype=bool)
                continue
            col = table.column(f.name)
            arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
            if not arr.type.equals(f.type):
                arr = arr.cast(f.type)
            if arr.null_count:
                nulls[f.name] = ~_validity(arr)
            if f.is_string:
                cols[f.name] = arrow_string_codes(arr)
            else:
                data = arr.buffers()[1]
                cols[f.name] = (np.frombuffer(data, dtype=f.dtype, count=len(arr), offset=arr.offset * f.dtype.itemsize)
                                if len(arr) and data is not None else np.zeros(len(arr), f.dtype))
        return cls(cols, nulls)


def as_frame(table: FlowFrame | pa.Table) -> FlowFrame:
    """*table* as a FlowFrame (a pyarrow.Table is converted: test fakes, tables read from files)."""
    return table if isinstance(table, FlowFrame) else FlowFrame.from_arrow(table)


def _canonical(codes: np.ndarray, values: Sequence[str]) -> tuple[np.ndarray, list[str]]:
    """(codes, values) with the values used, distinct and sorted (UTF-8 byte order = str order)."""
    if not len(codes):
        return np.empty(0, dtype=np.int64), []
    used, inv = np.unique(codes, return_inverse=True)
    names = [values[i] for i in used.tolist()]
    uniq = sorted(set(names))
    inv = inv.astype(np.int64).ravel()
    if uniq == names:
        return inv, names
    pos = {v: i for i, v in enumerate(uniq)}
    return np.array([pos[v] for v in names], dtype=np.int64)[inv], uniq


def _validity(arr: pa.Array) -> np.ndarray:
    buf = arr.buffers()[0]
    if buf is None:
        return np.ones(len(arr), dtype=bool)
    bits = np.unpackbits(np.frombuffer(buf, dtype=np.uint8), bitorder="little")
    return bits[arr.offset:arr.offset + len(arr)].astype(bool)


def expand_strings(names: Sequence[str], index: np.ndarray, nulls: np.ndarray | None = None) -> pa.Array:
    """names[index] as a pyarrow string array, gathered from the names' bytes with numpy.

    (A DictionaryArray.cast(pa.string()) does the same but loads pyarrow.compute and Arrow's
    kernel registry on first use, ~13 MB.)  *nulls*: True where the row is null.
    """
    import pyarrow as pa

    enc = [n.encode() for n in names]
    lens = np.array([len(b) for b in enc], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64) if len(enc) else lens
    blob = np.frombuffer(b"".join(enc) or b"\0", dtype=np.uint8)
    idx = np.asarray(index, dtype=np.intp).ravel()
    row_lens = lens[idx] if len(idx) else np.empty(0, dtype=np.int64)
    if nulls is not None:
        row_lens = np.where(nulls, 0, row_lens)
    offsets = np.zeros(len(idx) + 1, dtype=np.int64)
    np.cumsum(row_lens, out=offsets[1:])
    pos = np.repeat(starts[idx] - offsets[:-1], row_lens) + np.arange(offsets[-1])
    bitmap, n_null = None, 0
    if nulls is not None and nulls.any():
        bitmap, n_null = pa.py_buffer(np.packbits(~nulls, bitorder="little").tobytes()), int(nulls.sum())
    return pa.StringArray.from_buffers(len(idx), pa.py_buffer(offsets.astype(np.int32)),
                                       pa.py_buffer(blob[pos].tobytes()), bitmap, n_null)


def arrow_string_codes(arr: pa.Array) -> tuple[np.ndarray, list[str]]:
    """(codes, values) of a pyarrow string array (nulls read as ""), values sorted, no Arrow compute.

    The strings are read from the array's offset and data buffers into a fixed-width byte
    matrix, and np.unique over its rows gives the codes.
    """
    import pyarrow as pa

    n = len(arr)
    if n == 0:
        return np.empty(0, dtype=np.int64), []
    if pa.types.is_large_string(arr.type):
        off_type: type[np.signedinteger[Any]] = np.int64
    elif pa.types.is_string(arr.type):
        off_type = np.int32
    else:
        raise TypeError(f"a string column is needed, got {arr.type}")
    _, off_buf, data_buf = arr.buffers()
    off = np.frombuffer(off_buf, dtype=off_type, count=n + 1, offset=arr.offset * np.dtype(off_type).itemsize)
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None and data_buf.size else np.zeros(1, np.uint8)
    lens = np.diff(off).astype(np.int64)
    width = max(int(lens.max()), 8)  # up to 8 bytes (CCA names, short IPv4): one integer per row
    col_i = np.arange(width)
    pos = np.minimum(off[:-1, None].astype(np.int64) + col_i, len(data) - 1)
    mat = np.where(col_i < lens[:, None], data[pos], 0).astype(np.uint8)
    keys = np.ascontiguousarray(mat).view(np.dtype(">u8") if width == 8 else np.dtype((np.void, width))).ravel()
    _, first, codes = np.unique(keys, return_index=True, return_inverse=True)
    values = [bytes(data[off[i]:off[i] + lens[i]]).decode() for i in first.tolist()]
    return codes.astype(np.int64).ravel(), values


def frame_from_rows(rows: Iterable[Mapping[str, Any]]) -> FlowFrame:
    """A FlowFrame from row dicts (every column given; None = null in an optional column)."""
    rows = list(rows)
    cols: dict[str, ColumnLike] = {}
    nulls: dict[str, np.ndarray] = {}
    for name in FIELD_NAMES:
        f = FIELD_BY_NAME[name]
        vals = [r[name] for r in rows]
        null = np.array([v is None for v in vals], dtype=bool)
        if null.any():
            nulls[name] = null
            vals = [("" if f.is_string else 0) if v is None else v for v in vals]
        cols[name] = vals if f.is_string else np.array(vals, dtype=f.dtype)
    return FlowFrame(cols, nulls)
