"""Sampler: kernel counters -> per-interval FlowSample rows.

Each tick runs the monitor's iterator once and differences every flow's
cumulative counters against the previous tick.  A flow established since the
last tick (the sockops hook saw it happen) is differenced against zero
counters at its establishment time; a flow that was already running when it
first appeared (e.g. before the monitor started) only primes it.  A flow that
vanished has closed.  Everything is vectorised over flows with numpy, so one tick over
10,000 sockets stays in the low milliseconds (bench/sampling_cost.py).
A tick is a FlowFrame (numpy columns: what ccswitchd decides on, without
pyarrow) from :meth:`Sampler.tick_frame`, or a pyarrow.Table from
:meth:`Sampler.tick` (the CLI, datasets, the testbed).
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from ccswitch.frame import FlowFrame, Strings

if TYPE_CHECKING:
    import pyarrow as pa

MIN_INTERVAL_S = 0.1
# Per delivered segment on the wire: IPv4 (20) or IPv6 (40) + TCP (20) + the
# timestamp option (12) that Linux negotiates by default.
HEADER_BYTES = {2: 52, 10: 72}
# tcp_sock.ecn_flags (include/net/tcp.h): the negotiated feedback mode
ECN_MODE_RFC3168 = 1 << 0
ECN_MODE_ACCECN = 1 << 4
_U32 = np.uint64(1 << 32)


def _fmt_addr(family: int, words: np.ndarray) -> str:
    raw = words.astype("<u4").tobytes()
    if family == 10:
        return str(ipaddress.IPv6Address(raw))
    return str(ipaddress.IPv4Address(raw[:4]))


def _take(records: np.ndarray, index: np.ndarray) -> np.ndarray:
    # index as opaque fixed-size rows: numpy's per-field copy of a structured
    # dtype with sub-arrays is ~10x slower than a plain row copy
    rows = records.view(np.dtype((np.void, records.dtype.itemsize)))
    return rows[index].view(records.dtype)


def _birth_records(new: np.ndarray) -> np.ndarray:
    """The state of newly established flows at establishment: counters at zero."""
    birth = np.zeros(len(new), dtype=new.dtype)
    birth["cookie"] = new["cookie"]
    birth["ts_ns"] = new["established_ns"]
    # write_seq starts at the random ISN: everything written so far is acked or queued
    birth["write_seq"] = (new["write_seq"].astype(np.int64) - new["bytes_acked"].astype(np.int64)
                          - new["sndq_bytes"].astype(np.int64)) % (1 << 32)
    return birth


def _delta(cur: np.ndarray, prev: np.ndarray, field: str) -> np.ndarray:
    return cur[field].astype(np.int64) - prev[field].astype(np.int64)


def _delta_u32(cur: np.ndarray, prev: np.ndarray, field: str) -> np.ndarray:
    # 32-bit kernel counters wrap; modular difference is right for any gap < 2^32
    return ((cur[field].astype(np.uint64) + _U32 - prev[field].astype(np.uint64)) % _U32).astype(
        np.int64)


class Sampler:
    """Turns successive monitor snapshots into FlowSample tables."""

    def __init__(self, snapshot: Callable[[], np.ndarray]):
        self._snapshot = snapshot
        self._prev: np.ndarray | None = None  # sorted by cookie
        # CLOCK_MONOTONIC (bpf_ktime_get_ns) -> wall clock
        self._mono_to_wall = time.time() - time.monotonic()

    def prime(self) -> None:
        self.tick()

    def tick(self) -> pa.Table:
        """Read the kernel once; return one sample per flow with a known interval start (FLOW_SAMPLE_SCHEMA)."""
        return self.tick_frame().to_arrow()

    def tick_frame(self) -> FlowFrame:
        """As :meth:`tick`, as numpy columns."""
        raw = self._snapshot()
        cur = _take(raw, np.argsort(raw["cookie"]))
        prev, self._prev = self._prev, cur
        if prev is None or len(cur) == 0:
            return FlowFrame.empty()
        if len(prev):
            idx = np.searchsorted(prev["cookie"], cur["cookie"])
            idx[idx >= len(prev)] = 0
            seen = prev["cookie"][idx] == cur["cookie"]
        else:
            idx, seen = np.zeros(len(cur), dtype=np.intp), np.zeros(len(cur), dtype=bool)
        c, p = _take(cur, np.flatnonzero(seen)), _take(prev, idx[seen]) if len(prev) else cur[:0]
        born = ~seen & (cur["established_ns"] > 0)
        if born.any():  # established since the last tick: its first interval starts there
            nc = _take(cur, np.flatnonzero(born))
            c, p = np.concatenate([c, nc]), np.concatenate([p, _birth_records(nc)])
        dt = (c["ts_ns"].astype(np.int64) - p["ts_ns"].astype(np.int64)) / 1e9
        if not (dt > 0).all():
            keep = np.flatnonzero(dt > 0)
            c, p, dt = _take(c, keep), _take(p, keep), dt[keep]
        return self._build(c, p, dt)

    @staticmethod
    def _addresses(c: np.ndarray, field: str) -> Strings:
        # few distinct addresses: format each once, expand with numpy
        keys = np.ascontiguousarray(c[field]).view(np.dtype((np.void, 16))).ravel()
        _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        return inverse.astype(np.int64).ravel(), [_fmt_addr(int(c["family"][i]), c[field][i]) for i in first]

    @staticmethod
    def _cca_names(c: np.ndarray) -> Strings:
        # a handful of distinct names: decode each once, expand with numpy
        uniq, inverse = np.unique(c["cca"], return_inverse=True)
        return inverse.astype(np.int64).ravel(), [u.decode() for u in uniq.tolist()]

    @staticmethod
    def _ecn_modes(c: np.ndarray) -> np.ndarray:
        """tcp_sock.ecn_flags -> schema ecn_mode code (0 none, 1 rfc3168, 2 accecn, 3 pending)."""
        flags = c["ecn_flags"]
        rfc, acc = (flags & ECN_MODE_RFC3168) != 0, (flags & ECN_MODE_ACCECN) != 0
        return np.where(acc, np.where(rfc, 3, 2), np.where(rfc, 1, 0)).astype(np.uint8)

    def _build(self, c: np.ndarray, p: np.ndarray, dt: np.ndarray) -> FlowFrame:
        acked = _delta(c, p, "bytes_acked")
        delivered = _delta_u32(c, p, "delivered")
        hdr = np.where(c["family"] == 10, HEADER_BYTES[10], HEADER_BYTES[2])
        sent_segs = _delta_u32(c, p, "data_segs_out")
        retrans = _delta_u32(c, p, "total_retrans")
        ce = _delta_u32(c, p, "delivered_ce")
        samples = _delta(c, p, "rtt_samples")
        diffs = np.where(p["rtt_samples"] > 0, samples, samples - 1)
        absdiff = _delta(c, p, "rtt_absdiff_sum_us")
        srtt = c["srtt_us"].astype(np.float64)
        min_rtt = c["min_rtt_us"].astype(np.float64)
        pacing = c["pacing_rate"].astype(np.float64) * 8
        pacing[c["pacing_rate"] >= np.uint64(0xFFFFFFFF)] = np.nan  # ~0UL / ~0U: unlimited
        with np.errstate(divide="ignore", invalid="ignore"):
            jitter = np.where(diffs > 0, absdiff / np.maximum(diffs, 1), np.nan)
            rtt_ratio = np.where(min_rtt > 0, srtt / min_rtt, np.nan)
            loss = np.where(sent_segs > 0, retrans / np.maximum(sent_segs, 1), 0.0)
            ce_fraction = np.where(delivered > 0, ce / np.maximum(delivered, 1), np.nan)
        cols = {
            "ts_s": c["ts_ns"] / 1e9 + self._mono_to_wall,
            "interval_s": dt,
            "flow_id": c["cookie"],
            "netns_cookie": c["netns_cookie"],
            "cgroup_id": c["cgroup_id"],
            "src": self._addresses(c, "saddr"),
            "sport": c["sport"],
            "dst": self._addresses(c, "daddr"),
            "dport": c["dport"],
            "cca": self._cca_names(c),
            "throughput_bps": (acked + delivered * hdr) * 8 / dt,
            "goodput_bps": acked * 8 / dt,
            "sending_rate_bps": _delta(c, p, "bytes_sent") * 8 / dt,
            "byte_rate_bps": _delta_u32(c, p, "write_seq") * 8 / dt,
            "delivery_rate_bps": c["delivery_rate"].astype(np.float64) * 8,
            "pacing_rate_bps": pacing,
            "rtt_us": srtt,
            "rttvar_us": c["rttvar_us"].astype(np.float64),
            "min_rtt_us": min_rtt,
            "rtt_ratio": rtt_ratio,
            "jitter_us": jitter,
            "rtt_samples": np.clip(samples, 0, None).astype(np.uint32),
            "loss_rate": np.clip(loss, 0.0, 1.0),
            "lost_segs": _delta_u32(c, p, "lost").astype(np.uint32),
            "retrans_segs": retrans.astype(np.uint32),
            "sent_segs": sent_segs.astype(np.uint32),
            "delivered_segs": delivered.astype(np.uint32),
            "cwnd_segs": c["snd_cwnd"],
            "ssthresh_segs": c["snd_ssthresh"],
            "inflight_segs": c["packets_out"],
            "sndq_bytes": c["sndq_bytes"],
            "mss_bytes": c["mss"],
            "state": c["state"],
            "ca_state": c["ca_state"],
            "ecn_mode": self._ecn_modes(c),
            "ce_segs": ce.astype(np.uint32),
            "ce_fraction": np.clip(ce_fraction, 0.0, 1.0),
            "received_ce_segs": _delta_u32(c, p, "received_ce").astype(np.uint32),
        }
        return FlowFrame(cols)


def check_interval(interval_s: float) -> float:
    if not interval_s >= MIN_INTERVAL_S:
        raise ValueError(
            f"sampling interval {interval_s} s is below the minimum {MIN_INTERVAL_S} s; "
            f"pass --interval {MIN_INTERVAL_S} or more")
    return interval_s
