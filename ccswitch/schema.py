"""FlowSample: the one per-flow, per-interval record of ccswitch.

The monitor's sampler produces it, datasets store it (Parquet), the Gym
environment replays it and the daemon decides on it.  Every consumer takes
its column names, types and units from `FIELDS` here; units are part of the
names.  Metrics follow paper 002, Tables 2 and 3:

  Thratio      -> computed across flows from throughput_bps (not per flow)
  tau, tau_min -> rtt_us, min_rtt_us;  tau_rate -> rtt_ratio
  P_rate       -> loss_rate;  Jitter -> jitter_us;  Goodput -> goodput_bps
  S_qsize      -> sndq_bytes;  byte_rate -> byte_rate_bps
  Th_max       -> delivery_rate_bps (kernel's delivery-rate estimate)
  CCA_name     -> cca

Optional columns (nullable): added after version 1 was first written, at
the end.  Files written before them lack the columns; readers fill them with
nulls (`complete()`), so every reader must accept null in these columns and
nothing else.  ECN columns (issue 6): ecn_mode, ce_segs, ce_fraction,
received_ce_segs.

pyarrow-free at import: a Field names its Arrow type ("float64", "string", ...)
and gives the numpy dtype of its in-memory column (ccswitch/frame.py, what the
daemon decides on).  The Arrow side (`Field.type`, `FLOW_SAMPLE_SCHEMA`,
`complete()`) imports pyarrow on first use, so ccswitchd never loads it
(~40 MB resident) unless it records Parquet.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pyarrow as pa

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Field:
    name: str
    kind: str  # Arrow type name: float64, uint64, uint32, uint16, uint8, string
    doc: str
    optional: bool = False  # nullable; may be absent from files written before it existed

    @property
    def is_string(self) -> bool:
        return self.kind == "string"

    @property
    def dtype(self) -> np.dtype[Any]:
        """numpy dtype of the column in memory (strings: object; ccswitch.frame keeps them as codes)."""
        return np.dtype(object) if self.is_string else np.dtype(self.kind)

    @property
    def type(self) -> pa.DataType:
        """The Arrow type (imports pyarrow)."""
        import pyarrow as pa

        return getattr(pa, self.kind)()


FIELDS: tuple[Field, ...] = (
    Field("ts_s", "float64", "end of the interval, seconds since the Unix epoch"),
    Field("interval_s", "float64", "length of the interval the rates are averaged over, s"),
    Field("flow_id", "uint64", "socket cookie (unique per socket while the host is up)"),
    Field("netns_cookie", "uint64", "network namespace cookie of the socket"),
    Field("cgroup_id", "uint64", "cgroup v2 id of the socket's owning cgroup"),
    Field("src", "string", "local address"),
    Field("sport", "uint16", "local port"),
    Field("dst", "string", "remote address"),
    Field("dport", "uint16", "remote port"),
    Field("cca", "string", "congestion control at the end of the interval"),
    Field("throughput_bps", "float64",
          "data delivered to the peer incl. TCP/IP header overhead, bit/s"),
    Field("goodput_bps", "float64",
          "payload delivered to the peer (bytes acked), bit/s; what iperf3 reports"),
    Field("sending_rate_bps", "float64", "payload sent incl. retransmissions, bit/s"),
    Field("byte_rate_bps", "float64", "payload the application wrote, bit/s"),
    Field("delivery_rate_bps", "float64", "kernel's latest delivery-rate sample, bit/s"),
    Field("pacing_rate_bps", "float64", "sk_pacing_rate, bit/s (NaN when unlimited)"),
    Field("rtt_us", "float64", "smoothed RTT at the end of the interval, us"),
    Field("rttvar_us", "float64", "RTT mean deviation, us"),
    Field("min_rtt_us", "float64", "minimum RTT over the kernel's window, us"),
    Field("rtt_ratio", "float64", "rtt_us / min_rtt_us (paper 002 tau_rate)"),
    Field("jitter_us", "float64",
          "mean |difference| of successive per-ACK RTT samples in the interval, us "
          "(NaN when fewer than two samples)"),
    Field("rtt_samples", "uint32", "per-ACK RTT samples in the interval"),
    Field("loss_rate", "float64",
          "retransmitted / sent data segments in the interval (paper 002 P_rate), 0..1"),
    Field("lost_segs", "uint32", "segments the stack marked lost in the interval"),
    Field("retrans_segs", "uint32", "segments retransmitted in the interval"),
    Field("sent_segs", "uint32", "data segments sent in the interval"),
    Field("delivered_segs", "uint32", "segments delivered in the interval"),
    Field("cwnd_segs", "uint32", "congestion window, segments"),
    Field("ssthresh_segs", "uint32", "slow-start threshold, segments (2^31-1 = infinite)"),
    Field("inflight_segs", "uint32", "segments in flight"),
    Field("sndq_bytes", "uint32", "bytes written but not yet acked (paper 002 S_qsize)"),
    Field("mss_bytes", "uint32", "sender MSS, bytes"),
    Field("state", "uint8", "TCP state (1 = ESTABLISHED)"),
    Field("ca_state", "uint8", "congestion-avoidance state (0 Open ... 4 Loss)"),
    # ---- optional (nullable) columns, appended ----
    Field("ecn_mode", "uint8",
          "ECN feedback negotiated on the connection: 0 none, 1 RFC 3168 (classic ECE/CWR), "
          "2 AccECN (Accurate ECN, RFC 9768), 3 AccECN requested, handshake not finished "
          "(ECN_MODES)",
          optional=True),
    Field("ce_segs", "uint32",
          "delivered segments the peer reported CE-marked in the interval (tcp_sock.delivered_ce); "
          "exact with AccECN, with rfc3168 every segment acked while ECE is echoed counts",
          optional=True),
    Field("ce_fraction", "float64",
          "ce_segs / delivered_segs in the interval, 0..1 (NaN when nothing was delivered); "
          "for full-sized segments the fraction of CE-marked bytes",
          optional=True),
    Field("received_ce_segs", "uint32",
          "segments this socket received CE-marked in the interval (receiver side; "
          "tcp_sock.received_ce)",
          optional=True),
)

FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in FIELDS)
ECN_MODES: tuple[str, ...] = ("none", "rfc3168", "accecn", "pending")
"""Names of the ecn_mode codes, by code."""
REQUIRED_FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in FIELDS if not f.optional)
OPTIONAL_FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in FIELDS if f.optional)


FIELD_BY_NAME: dict[str, Field] = {f.name: f for f in FIELDS}
_ARROW: dict[str, Any] = {}


def flow_sample_schema() -> pa.Schema:
    """The FlowSample Arrow schema (built once; imports pyarrow)."""
    if "schema" not in _ARROW:
        import pyarrow as pa

        _ARROW["schema"] = pa.schema(
            [pa.field(f.name, f.type, nullable=f.optional, metadata={"doc": f.doc}) for f in FIELDS],
            metadata={"ccswitch.schema": "FlowSample", "ccswitch.schema_version": str(SCHEMA_VERSION)},
        )
    return _ARROW["schema"]


def __getattr__(name: str) -> Any:
    # FLOW_SAMPLE_SCHEMA stays importable as a constant (`from ccswitch.schema import FLOW_SAMPLE_SCHEMA`)
    # but is built, and pyarrow loaded, only when someone asks for it
    if name == "FLOW_SAMPLE_SCHEMA":
        return flow_sample_schema()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def complete(table: pa.Table) -> pa.Table:
    """`table` with every optional column it lacks added as nulls, in FIELD_NAMES order.

    For readers of files written before an optional column existed.  Extra
    columns are dropped; a missing required column raises KeyError.
    """
    import pyarrow as pa

    n = table.num_rows
    cols = [table.column(f.name) if f.name in table.column_names
            else (pa.nulls(n, f.type) if f.optional else table.column(f.name)) for f in FIELDS]
    return pa.Table.from_arrays(cols, names=list(FIELD_NAMES))
