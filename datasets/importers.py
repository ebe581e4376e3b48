"""Import iperf3 JSON and tshark captures into the trace format, as paper 002 collected its data.

Both produce FlowSample rows (ccswitch/schema.py).  Neither tool sees
everything the monitor sees, so some columns are estimated and some unknown;
each capture's manifest lists them under ``notes`` (unknown floats are NaN,
unknown counters 0).

iperf3 (``iperf3 -c ... -J``, the sending side): one flow per stream, one row
per reporting interval.  iperf3's interval bytes are what the application
wrote, so goodput = byte rate = its bits_per_second; RTT and RTT variance
are the kernel's smoothed values at the end of the interval; the jitter is
the difference of successive interval RTTs (a coarse stand-in for the
monitor's per-ACK jitter); loss = retransmits / segments.

tshark (a pcap/pcapng, read with ``tshark -r``, or the output of ``tshark
-T fields`` with the FIELDS below, tab-separated with a header line): per TCP
stream, the direction that carries the payload is the flow; per interval:
acked bytes from the ACK numbers (goodput), payload sent including
retransmissions (sending rate), retransmissions / data segments (loss),
tshark's ACK RTTs (mean = rtt_us, mean |difference| = jitter_us, as the
monitor defines it), bytes in flight.  RTTs are only meaningful when the
capture point is the sender.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import shutil
import subprocess
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
import pyarrow as pa

from ccswitch.schema import FIELD_NAMES, FLOW_SAMPLE_SCHEMA

from .trace import TraceError, tool_versions, write_capture

__all__ = ["TSHARK_FIELDS", "import_iperf3", "import_tshark", "iperf3_samples", "tshark_samples"]

HEADER_BYTES = {4: 52, 6: 72}
"""IPv4/IPv6 + TCP + timestamp option bytes per segment (as ccswitch.sampler)."""
DEFAULT_MSS = 1448
TSHARK_FIELDS = (
    "frame.time_epoch", "frame.len", "ip.src", "ipv6.src", "ip.dst", "ipv6.dst", "tcp.stream", "tcp.srcport",
    "tcp.dstport", "tcp.len", "tcp.seq", "tcp.ack", "tcp.flags.ack", "tcp.analysis.ack_rtt",
    "tcp.analysis.retransmission", "tcp.analysis.fast_retransmission", "tcp.analysis.bytes_in_flight",
    "tcp.options.mss_val",
)
IPERF3_ESTIMATED = ("throughput_bps", "sending_rate_bps", "jitter_us", "loss_rate", "sent_segs", "delivered_segs",
                    "cwnd_segs", "min_rtt_us")
IPERF3_UNKNOWN = ("delivery_rate_bps", "pacing_rate_bps", "rtt_samples", "lost_segs", "ssthresh_segs",
                  "inflight_segs", "sndq_bytes", "netns_cookie", "cgroup_id", "ca_state")
TSHARK_ESTIMATED = ("throughput_bps", "delivered_segs", "inflight_segs")
TSHARK_UNKNOWN = ("delivery_rate_bps", "pacing_rate_bps", "rttvar_us", "lost_segs", "cwnd_segs", "ssthresh_segs",
                  "sndq_bytes", "netns_cookie", "cgroup_id", "ca_state")

Progress = Callable[[int, int | None, str], None]
"""progress(done, total or None, text)"""


def _flow_id(*parts: object) -> int:
    """A stable 63-bit id for a flow of an imported file (imports have no socket cookie)."""
    return int.from_bytes(hashlib.sha256("|".join(map(str, parts)).encode()).digest()[:8], "big") >> 1


def _empty_row() -> dict[str, Any]:
    nan = math.nan
    return {"netns_cookie": 0, "cgroup_id": 0, "delivery_rate_bps": nan, "pacing_rate_bps": nan,
            "rttvar_us": nan, "rtt_samples": 0, "lost_segs": 0, "cwnd_segs": 0, "ssthresh_segs": 0,
            "inflight_segs": 0, "sndq_bytes": 0, "state": 1, "ca_state": 0}


def _table(rows: list[dict[str, Any]]) -> pa.Table:
    if not rows:
        return FLOW_SAMPLE_SCHEMA.empty_table()
    return pa.Table.from_pylist([{k: r.get(k) for k in FIELD_NAMES} for r in rows],  # optional: null
                                schema=FLOW_SAMPLE_SCHEMA)


# ------------------------------------------------------------------ iperf3 ---


def iperf3_samples(data: dict[str, Any], where: str = "iperf3 JSON") -> tuple[pa.Table, list[dict[str, Any]]]:
    """FlowSample rows and the flow list of one decoded ``iperf3 -J`` report."""
    if not isinstance(data, dict) or "intervals" not in data or "start" not in data:
        raise TraceError(f"{where}: not an iperf3 JSON report (keys 'start' and 'intervals' missing)")
    if data.get("error"):
        raise TraceError(f"{where}: iperf3 reported an error: {data['error']}")
    start = data["start"]
    proto = str(start.get("test_start", {}).get("protocol", "TCP")).upper()
    if proto != "TCP":
        raise TraceError(f"{where}: protocol {proto}; only TCP reports carry congestion control data")
    t0 = float(start.get("timestamp", {}).get("timesecs", 0))
    mss = int(start.get("tcp_mss_default") or start.get("tcp_mss") or DEFAULT_MSS)
    cookie = start.get("cookie", "")
    end = data.get("end", {})
    sockets = {c.get("socket"): c for c in start.get("connected", [])}
    min_rtts = {s.get("sender", {}).get("socket"): s.get("sender", {}).get("min_rtt")
                for s in end.get("streams", []) if isinstance(s.get("sender"), dict)}
    rows: list[dict[str, Any]] = []
    flows: dict[int, dict[str, Any]] = {}
    state: dict[int, dict[str, float]] = {}
    for n, iv in enumerate(data["intervals"]):
        for st in iv.get("streams", []):
            sock = st.get("socket")
            conn = sockets.get(sock, {})
            sender = bool(st.get("sender", True))
            cca = end.get("sender_tcp_congestion" if sender else "receiver_tcp_congestion") or "unknown"
            src, dst = str(conn.get("local_host", "")), str(conn.get("remote_host", ""))
            fid = _flow_id(cookie, sock, src, conn.get("local_port"), dst, conn.get("remote_port"))
            flows.setdefault(fid, {"flow_id": fid, "name": f"{src}:{conn.get('local_port')}->{dst}:"
                                   f"{conn.get('remote_port')}", "role": "observed", "cca": cca, "local": True,
                                   "iperf3_socket": sock, "sender": sender})
            dt = float(st.get("seconds") or (float(st.get("end", 0)) - float(st.get("start", 0))))
            if dt <= 0:
                raise TraceError(f"{where}: intervals[{n}]: stream {sock} has an empty interval")
            nbytes = float(st.get("bytes", 0))
            bps = float(st.get("bits_per_second", nbytes * 8 / dt))
            segs = nbytes / mss
            retr = int(st.get("retransmits") or 0)
            rtt = float(st["rtt"]) if st.get("rtt") is not None and sender else math.nan
            s = state.setdefault(fid, {"prev_rtt": math.nan, "min_rtt": math.inf})
            if not math.isnan(rtt) and rtt > 0:
                s["min_rtt"] = min(s["min_rtt"], rtt)
            min_rtt = float(min_rtts.get(sock) or s["min_rtt"]) if sender else math.nan
            if math.isinf(min_rtt):
                min_rtt = math.nan
            row = _empty_row()
            row.update({
                "ts_s": t0 + float(st.get("end", 0)), "interval_s": dt, "flow_id": fid, "src": src,
                "sport": int(conn.get("local_port") or 0), "dst": dst, "dport": int(conn.get("remote_port") or 0),
                "cca": cca, "goodput_bps": bps, "byte_rate_bps": bps,
                "throughput_bps": bps + segs * HEADER_BYTES[6 if ":" in src else 4] * 8 / dt,
                "sending_rate_bps": (nbytes + retr * mss) * 8 / dt,
                "rtt_us": rtt,
                "rttvar_us": float(st["rttvar"]) if st.get("rttvar") is not None and sender else math.nan,
                "min_rtt_us": min_rtt, "rtt_ratio": rtt / min_rtt if min_rtt and min_rtt > 0 else math.nan,
                "jitter_us": abs(rtt - s["prev_rtt"]) if not math.isnan(s["prev_rtt"]) else math.nan,
                "loss_rate": min(1.0, retr / (segs + retr)) if segs + retr > 0 else 0.0,
                "retrans_segs": retr, "sent_segs": round(segs) + retr, "delivered_segs": round(segs),
                "cwnd_segs": round(float(st.get("snd_cwnd") or 0) / mss), "mss_bytes": mss,
            })
            s["prev_rtt"] = rtt
            rows.append(row)
    return _table(rows), list(flows.values())


def import_iperf3(paths: Iterable[str | Path], out_dir: str | Path, *, capture_id: str | None = None,
                  progress: Progress | None = None) -> Path:
    """One capture from one or more iperf3 JSON reports (e.g. the competing flows of one test)."""
    files = [Path(p) for p in paths]
    if not files:
        raise TraceError("no iperf3 JSON files given")
    tables, flows, versions = [], [], set()
    for i, p in enumerate(files):
        try:
            data = json.loads(p.read_text())
        except FileNotFoundError:
            raise TraceError(f"{p}: no such file") from None
        except (OSError, UnicodeDecodeError, ValueError) as e:
            raise TraceError(f"{p}: not valid JSON ({e})") from None
        t, f = iperf3_samples(data, str(p))
        tables.append(t)
        flows += f
        versions.add(str(data.get("start", {}).get("version", "?")))
        if progress:
            progress(i + 1, len(files), p.name)
    table = pa.concat_tables(tables)
    interval = round(float(np.median(table.column("interval_s").to_numpy())), 3) if table.num_rows else 1.0
    ts = table.column("ts_s").to_numpy()
    return write_capture(out_dir, table, {
        "id": capture_id or Path(out_dir).name, "source": "iperf3", "interval_s": interval,
        "t0_epoch": float(ts.min() - interval) if len(ts) else None, "flows": flows,
        "condition": None, "arm": None, "scenario": {"files": [str(p) for p in files]},
        "tools": tool_versions(iperf3_report=", ".join(sorted(versions))),
        "notes": {"estimated_columns": list(IPERF3_ESTIMATED), "unknown_columns": list(IPERF3_UNKNOWN)},
    })


# ------------------------------------------------------------------ tshark ---


@dataclass
class _Dir:
    """One direction of a TCP stream."""

    src: str
    sport: int
    dst: str
    dport: int
    payload: int = 0


@dataclass
class _Bin:
    seg: int = 0
    payload: int = 0
    new_payload: int = 0
    retr: int = 0
    ack_max: int = -1
    rtts: list[float] = field(default_factory=list)
    inflight: float = math.nan


@dataclass
class _Stream:
    dirs: dict[tuple[str, int], _Dir] = field(default_factory=dict)
    bins: dict[tuple[tuple[str, int], int], _Bin] = field(default_factory=dict)
    mss: int = 0
    """From the SYN's MSS option (minus 12 B of timestamps), else the largest payload seen."""
    syn_mss: int = 0
    v6: bool = False


def _iter_fields(lines: Iterable[str], where: str) -> Iterator[dict[str, str]]:
    it = iter(lines)
    try:
        header = next(it).rstrip("\n").split("\t")
    except StopIteration:
        raise TraceError(f"{where}: empty tshark output") from None
    need = ("frame.time_epoch", "tcp.stream", "tcp.srcport", "tcp.dstport", "tcp.len")
    missing = [f for f in need if f not in header]
    if missing:
        raise TraceError(f"{where}: missing column '{missing[0]}' (tshark fields; header: {' '.join(header[:6])} "
                         f"...; export with -T fields -E header=y -E separator=/t and the fields of TSHARK_FIELDS)")
    for line in it:
        vals = line.rstrip("\n").split("\t")
        yield dict(zip(header, vals, strict=False))


def tshark_samples(lines: Iterable[str], where: str, *, interval_s: float = 1.0, cca: str = "unknown",
                   t0: float | None = None, on_packet: Callable[[int], None] | None = None
                   ) -> tuple[pa.Table, list[dict[str, Any]], float]:
    """FlowSample rows, the flow list and t0 from tshark fields lines (header first)."""
    streams: dict[int, _Stream] = {}
    first_t: float | None = t0
    n = 0
    for n, f in enumerate(_iter_fields(lines, where), 1):
        if on_packet and n % 10_000 == 0:
            on_packet(n)
        try:
            t = float(f["frame.time_epoch"])
            sid = int(f["tcp.stream"])
            sport, dport = int(f["tcp.srcport"]), int(f["tcp.dstport"])
            plen = int(f.get("tcp.len") or 0)
        except (ValueError, KeyError):
            continue  # not TCP, or a truncated line
        if first_t is None:
            first_t = t
        src = f.get("ip.src") or f.get("ipv6.src") or ""
        dst = f.get("ip.dst") or f.get("ipv6.dst") or ""
        s = streams.setdefault(sid, _Stream())
        s.v6 = s.v6 or ":" in src
        d = s.dirs.setdefault((src, sport), _Dir(src, sport, dst, dport))
        k = max(0, math.ceil((t - first_t) / interval_s) - 1) if t > first_t else 0
        b = s.bins.setdefault(((src, sport), k), _Bin())
        if f.get("tcp.options.mss_val"):
            with contextlib.suppress(ValueError):
                s.syn_mss = int(f["tcp.options.mss_val"].split(",")[0]) - 12  # the timestamp option
        if plen > 0:
            d.payload += plen
            s.mss = max(s.mss, plen)
            b.seg += 1
            b.payload += plen
            if f.get("tcp.analysis.retransmission") or f.get("tcp.analysis.fast_retransmission"):
                b.retr += 1
            else:
                b.new_payload += plen
            if f.get("tcp.analysis.bytes_in_flight"):
                b.inflight = float(f["tcp.analysis.bytes_in_flight"])
        if f.get("tcp.ack") and f.get("tcp.flags.ack", "1") not in ("0", "False"):
            b.ack_max = max(b.ack_max, int(f["tcp.ack"]))
        if f.get("tcp.analysis.ack_rtt"):
            b.rtts.append(float(f["tcp.analysis.ack_rtt"]) * 1e6)
    if on_packet:
        on_packet(n)
    rows: list[dict[str, Any]] = []
    flows: list[dict[str, Any]] = []
    assert first_t is not None or not streams
    for sid, s in sorted(streams.items()):
        if not s.dirs:
            continue
        data_key, d = max(s.dirs.items(), key=lambda kv: kv[1].payload)
        if d.payload == 0:
            continue
        ack_key = (d.dst, d.dport)
        mss = s.syn_mss if s.syn_mss > 0 else (s.mss or DEFAULT_MSS)  # GSO captures show larger "segments"
        fid = _flow_id(where, sid, d.src, d.sport, d.dst, d.dport)
        flows.append({"flow_id": fid, "name": f"{d.src}:{d.sport}->{d.dst}:{d.dport}", "role": "observed",
                      "cca": cca, "local": True, "tcp_stream": sid})
        last = max(k for (key, k) in s.bins if key in (data_key, ack_key))
        prev_ack, prev_rtt, min_rtt = 1, math.nan, math.inf  # tshark's relative ACK numbers start at 1
        for k in range(last + 1):
            db = s.bins.get((data_key, k), _Bin())
            ab = s.bins.get((ack_key, k), _Bin())
            acked = 0
            if ab.ack_max >= 0:
                acked = max(0, ab.ack_max - prev_ack)
                prev_ack = max(prev_ack, ab.ack_max)
            rtts = ab.rtts
            diffs = np.abs(np.diff(([prev_rtt] if not math.isnan(prev_rtt) else []) + rtts))
            if rtts:
                min_rtt = min(min_rtt, min(rtts))
                prev_rtt = rtts[-1]
            rtt = float(np.mean(rtts)) if rtts else math.nan
            delivered = acked / mss
            row = _empty_row()
            row.update({
                "ts_s": first_t + (k + 1) * interval_s, "interval_s": interval_s, "flow_id": fid, "src": d.src,
                "sport": d.sport, "dst": d.dst, "dport": d.dport, "cca": cca,
                "goodput_bps": acked * 8 / interval_s,
                "throughput_bps": (acked + delivered * HEADER_BYTES[6 if s.v6 else 4]) * 8 / interval_s,
                "sending_rate_bps": db.payload * 8 / interval_s, "byte_rate_bps": db.new_payload * 8 / interval_s,
                "rtt_us": rtt, "min_rtt_us": min_rtt if rtts or not math.isinf(min_rtt) else math.nan,
                "rtt_ratio": rtt / min_rtt if rtts and min_rtt > 0 else math.nan,
                "jitter_us": float(diffs.mean()) if len(diffs) else math.nan, "rtt_samples": len(rtts),
                "loss_rate": db.retr / db.seg if db.seg else 0.0, "retrans_segs": db.retr, "sent_segs": db.seg,
                "delivered_segs": round(delivered),
                "inflight_segs": round(db.inflight / mss) if not math.isnan(db.inflight) else 0,
                "mss_bytes": mss,
            })
            if math.isinf(row["min_rtt_us"]):
                row["min_rtt_us"] = math.nan
            rows.append(row)
    return _table(rows), flows, float(first_t or 0.0)


def _tshark_reader(path: Path) -> tuple[IO[str], subprocess.Popen[str] | None]:
    with path.open("rb") as f:
        magic = f.read(4)
    pcap = magic in (b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4", b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d",
                     b"\x0a\x0d\x0d\x0a") or magic[:2] == b"\x1f\x8b"  # pcap, pcapng, gzipped (tshark reads it)
    if not pcap:
        return path.open(errors="replace"), None
    if shutil.which("tshark") is None:
        raise TraceError(f"{path}: a packet capture needs tshark to read it (apt-get install tshark), or give "
                         "the output of tshark -T fields")
    argv = ["tshark", "-r", str(path), "-n", "-Y", "tcp", "-T", "fields", "-E", "header=y", "-E", "separator=/t",
            "-E", "occurrence=f"]
    for fld in TSHARK_FIELDS:
        argv += ["-e", fld]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc.stdout, proc


def import_tshark(path: str | Path, out_dir: str | Path, *, interval_s: float = 1.0, cca: str = "unknown",
                  capture_id: str | None = None, progress: Progress | None = None) -> Path:
    """One capture from a pcap/pcapng (via tshark) or a tshark fields file."""
    p = Path(path)
    if not p.is_file():
        raise TraceError(f"{p}: no such file")
    if not interval_s > 0:
        raise TraceError(f"interval must be > 0 s, got {interval_s}")
    stream, proc = _tshark_reader(p)
    try:
        table, flows, t0 = tshark_samples(stream, str(p), interval_s=interval_s, cca=cca,
                                          on_packet=(lambda n: progress(n, None, f"{n} packets")) if progress else None)
    finally:
        stream.close()
        if proc is not None:
            err = proc.stderr.read() if proc.stderr else ""
            if proc.wait() != 0:
                last = err.strip().splitlines()[-1] if err.strip() else f"exit status {proc.returncode}"
                raise TraceError(f"{p}: tshark failed: {last}")
    if not flows:
        raise TraceError(f"{p}: no TCP flow with payload found")
    return write_capture(out_dir, table, {
        "id": capture_id or Path(out_dir).name, "source": "tshark", "interval_s": interval_s, "t0_epoch": t0,
        "flows": flows, "condition": None, "arm": None, "scenario": {"file": str(p), "cca": cca},
        "notes": {"estimated_columns": list(TSHARK_ESTIMATED), "unknown_columns": list(TSHARK_UNKNOWN),
                  "rtt": "tshark ACK RTTs: meaningful when the capture point is the sender"},
    })
