"""Tick samples -> one sample per flow over a longer interval (the policy's decision interval).

The daemon reads the monitor every tick (200 ms by default) but the DQN was
trained on features of 1 s intervals (the policy file's ``interval_s``), so the
policy decides on the aggregate of the ticks since its last decision, with the
same meaning per column as a FlowSample taken over the whole interval:

* rates (throughput, goodput, sending, byte rate): total bits / total time;
* counters (segments, RTT samples): sums; loss_rate = retransmitted / sent;
* jitter: mean of the ticks' jitter weighted by their RTT-sample counts;
* state (RTT, min RTT, cwnd, queue, CCA, ...): the newest tick's value.

Vectorised: one np.unique over the flow ids of the concatenated ticks.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ccswitch.daemon.flowindex import take_rows
from ccswitch.schema import FLOW_SAMPLE_SCHEMA

RATE_COLUMNS = ("throughput_bps", "goodput_bps", "sending_rate_bps", "byte_rate_bps")
SUM_COLUMNS = ("rtt_samples", "lost_segs", "retrans_segs", "sent_segs", "delivered_segs")


class Aggregator:
    """Collects tick tables; :meth:`take` returns their per-flow aggregate and starts over."""

    def __init__(self) -> None:
        self._tables: list[pa.Table] = []
        self.elapsed_s = 0.0

    def add(self, table: pa.Table, tick_s: float) -> None:
        if table.num_rows:
            self._tables.append(table)
        self.elapsed_s += tick_s

    def __len__(self) -> int:
        return len(self._tables)

    def take(self) -> pa.Table:
        tables, self._tables, self.elapsed_s = self._tables, [], 0.0
        if not tables:
            return FLOW_SAMPLE_SCHEMA.empty_table()
        if len(tables) == 1:
            return tables[0]
        return aggregate(pa.concat_tables(tables))


def aggregate(t: pa.Table) -> pa.Table:
    """Per-flow aggregate of rows in time order (several rows per flow_id)."""
    ids = t.column("flow_id").to_numpy()
    uniq, _first, inv = np.unique(ids, return_index=True, return_inverse=True)
    n = len(uniq)
    if n == len(ids):
        return t
    # newest row of every flow: the last occurrence (rows are in time order)
    last = np.zeros(n, dtype=np.int64)
    np.maximum.at(last, inv, np.arange(len(ids)))
    out = take_rows(t, last)
    dt = t.column("interval_s").to_numpy()
    tot = np.bincount(inv, weights=dt, minlength=n)
    cols: dict[str, np.ndarray] = {"interval_s": tot}
    for c in RATE_COLUMNS:
        v = np.nan_to_num(t.column(c).to_numpy(), nan=0.0)
        cols[c] = np.bincount(inv, weights=v * dt, minlength=n) / np.maximum(tot, 1e-12)
    for c in SUM_COLUMNS:
        cols[c] = np.bincount(inv, weights=t.column(c).to_numpy().astype(np.float64), minlength=n)
    sent = cols["sent_segs"]
    with np.errstate(invalid="ignore", divide="ignore"):
        cols["loss_rate"] = np.clip(np.where(sent > 0, cols["retrans_segs"] / np.maximum(sent, 1), 0.0), 0, 1)
        jit = t.column("jitter_us").to_numpy()
        w = np.where(np.isnan(jit), 0.0, np.maximum(t.column("rtt_samples").to_numpy().astype(np.float64) - 1, 1))
        num = np.bincount(inv, weights=np.nan_to_num(jit, nan=0.0) * w, minlength=n)
        den = np.bincount(inv, weights=w, minlength=n)
        cols["jitter_us"] = np.where(den > 0, num / np.maximum(den, 1e-12), np.nan)
    for name, values in cols.items():
        i = out.schema.get_field_index(name)
        typ = out.schema.field(name).type
        arr = values.astype(np.uint32) if pa.types.is_uint32(typ) else values
        out = out.set_column(i, out.schema.field(name), pa.array(arr, typ))
    return out
