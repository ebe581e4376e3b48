"""Tick samples -> one sample per flow over a longer interval (the policy's decision interval).

The daemon reads the monitor every tick (200 ms by default) but the DQN was
trained on features of 1 s intervals (the policy file's ``interval_s``), so the
policy decides on the aggregate of the ticks since its last decision, with the
same meaning per column as a FlowSample taken over the whole interval:

* rates (throughput, goodput, sending, byte rate): total bits / total time;
* counters (segments, RTT samples): sums; loss_rate = retransmitted / sent;
* jitter: mean of the ticks' jitter weighted by their RTT-sample counts;
* state (RTT, min RTT, cwnd, queue, CCA, ...): the newest tick's value.

Vectorised: one np.unique over the flow ids of the concatenated ticks, on
FlowFrames (numpy columns, ccswitch/frame.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ccswitch.frame import FlowFrame, as_frame

if TYPE_CHECKING:
    import pyarrow as pa

RATE_COLUMNS = ("throughput_bps", "goodput_bps", "sending_rate_bps", "byte_rate_bps")
SUM_COLUMNS = ("rtt_samples", "lost_segs", "retrans_segs", "sent_segs", "delivered_segs")


class Aggregator:
    """Collects tick tables; :meth:`take` returns their per-flow aggregate and starts over."""

    def __init__(self) -> None:
        self._tables: list[FlowFrame] = []
        self.elapsed_s = 0.0

    def add(self, table: FlowFrame, tick_s: float) -> None:
        if table.num_rows:
            self._tables.append(table)
        self.elapsed_s += tick_s

    def __len__(self) -> int:
        return len(self._tables)

    def take(self) -> FlowFrame:
        tables, self._tables, self.elapsed_s = self._tables, [], 0.0
        if not tables:
            return FlowFrame.empty()
        if len(tables) == 1:
            return tables[0]
        return aggregate(FlowFrame.concat(tables))


def aggregate(t: FlowFrame | pa.Table) -> FlowFrame:
    """Per-flow aggregate of rows in time order (several rows per flow_id)."""
    t = as_frame(t)
    ids = t.column("flow_id")
    uniq, _first, inv = np.unique(ids, return_index=True, return_inverse=True)
    n = len(uniq)
    if n == len(ids):
        return t
    # newest row of every flow: the last occurrence (rows are in time order)
    last = np.zeros(n, dtype=np.int64)
    np.maximum.at(last, inv, np.arange(len(ids)))
    out = t.take(last)
    dt = t.column("interval_s")
    tot = np.bincount(inv, weights=dt, minlength=n)
    cols: dict[str, np.ndarray] = {"interval_s": tot}
    for c in RATE_COLUMNS:
        v = np.nan_to_num(t.column(c), nan=0.0)
        cols[c] = np.bincount(inv, weights=v * dt, minlength=n) / np.maximum(tot, 1e-12)
    for c in SUM_COLUMNS:
        cols[c] = np.bincount(inv, weights=t.column(c).astype(np.float64), minlength=n)
    sent = cols["sent_segs"]
    with np.errstate(invalid="ignore", divide="ignore"):
        cols["loss_rate"] = np.clip(np.where(sent > 0, cols["retrans_segs"] / np.maximum(sent, 1), 0.0), 0, 1)
        jit = t.column("jitter_us")
        w = np.where(np.isnan(jit), 0.0, np.maximum(t.column("rtt_samples").astype(np.float64) - 1, 1))
        num = np.bincount(inv, weights=np.nan_to_num(jit, nan=0.0) * w, minlength=n)
        den = np.bincount(inv, weights=w, minlength=n)
        cols["jitter_us"] = np.where(den > 0, num / np.maximum(den, 1e-12), np.nan)
    for c in SUM_COLUMNS:  # uint32 counters: the float sums truncated, as before
        cols[c] = cols[c].astype(np.uint32)
    return out.with_columns(cols)
