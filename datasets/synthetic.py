"""A small synthetic corpus in the real on-disk format (tests, examples, quick experiments).

Its manifests say ``"source": "synthetic"``; nothing in it was measured.  Each
condition has a base RTT (2, 10 or 40 ms, cycling) and one *good* CCA that
depends on it (bbr, pcc, cubic respectively), so the best choice can be read
from the observation.  The agent shares the link with one local CUBIC flow:
on the good CCA it gets half of the rate at the base RTT with 0.05 % loss, on
any other a fifth at 1.6 x the RTT with 2 % loss (the competitor takes the
rest, so Jain's index drops too).  Switch arms switch at mid-run.  Values get
+-5 % noise (seeded).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa

from ccswitch.schema import FIELD_NAMES, FLOW_SAMPLE_SCHEMA, complete

from .trace import write_capture

__all__ = ["GOOD_CCA", "make_corpus"]

GOOD_CCA = {2.0: "bbr", 10.0: "pcc", 40.0: "cubic"}
"""Base RTT (ms) of a synthetic condition -> its best CCA."""
RTTS = tuple(GOOD_CCA)
T0 = 1_700_000_000.0


def _rows(flow_id: int, cookie: int, sport: int, ccas: Sequence[str], thr: np.ndarray, rtt_ms: np.ndarray,
          loss: np.ndarray, base_rtt_ms: float, t0: float, dt: float) -> dict[str, list]:
    k = len(ccas)
    mss = 1448
    sent = np.maximum((thr * dt / 8 / mss).astype(np.int64), 1)
    retr = (sent * loss).astype(np.int64)
    cols: dict[str, list] = {
        "ts_s": [t0 + (i + 1) * dt for i in range(k)], "interval_s": [dt] * k, "flow_id": [flow_id] * k,
        "netns_cookie": [cookie] * k, "cgroup_id": [1] * k, "src": ["10.0.0.1"] * k, "sport": [sport] * k,
        "dst": ["10.0.0.2"] * k, "dport": [5201] * k, "cca": list(ccas),
        "throughput_bps": thr.tolist(), "goodput_bps": (thr * 0.965).tolist(),
        "sending_rate_bps": (thr * (1 + loss)).tolist(), "byte_rate_bps": thr.tolist(),
        "delivery_rate_bps": thr.tolist(), "pacing_rate_bps": (thr * 1.2).tolist(),
        "rtt_us": (rtt_ms * 1e3).tolist(), "rttvar_us": (rtt_ms * 100).tolist(),
        "min_rtt_us": [base_rtt_ms * 1e3] * k, "rtt_ratio": (rtt_ms / base_rtt_ms).tolist(),
        "jitter_us": (rtt_ms * 50).tolist(), "rtt_samples": sent.tolist(), "loss_rate": (retr / sent).tolist(),
        "lost_segs": retr.tolist(), "retrans_segs": retr.tolist(), "sent_segs": sent.tolist(),
        "delivered_segs": (sent - retr).tolist(), "cwnd_segs": [40] * k, "ssthresh_segs": [30] * k,
        "inflight_segs": [20] * k, "sndq_bytes": [100_000] * k, "mss_bytes": [mss] * k, "state": [1] * k,
        "ca_state": [0] * k,
    }
    return cols


def make_corpus(out_dir: str | Path, *, n_conditions: int = 6, duration_s: int = 20, interval_s: float = 1.0,
                ccas: Sequence[str] = ("cubic", "bbr", "pcc"), rate_mbit: float = 20.0, seed: int = 0,
                switches: bool = True) -> Path:
    """Write a synthetic corpus of n_conditions x (static + switch arms) captures; returns its folder."""
    out = Path(out_dir)
    rng = np.random.default_rng(seed)
    k = round(duration_s / interval_s)
    mid = k // 2
    for c in range(n_conditions):
        base = RTTS[c % len(RTTS)]
        good = GOOD_CCA[base]
        if good not in ccas:
            good = ccas[c % len(ccas)]
        cond = f"syn{c}-rtt{base:g}-good-{good}"
        arms: list[tuple[str, str | None]] = [(a, None) for a in ccas]
        if switches:
            arms += [(a, b) for a in ccas for b in ccas if a != b]
        for n_arm, (start, to) in enumerate(arms):
            per_bin = [start if (to is None or i < mid) else to for i in range(k)]
            is_good = np.array([x == good for x in per_bin])
            noise = lambda: 1 + 0.05 * rng.standard_normal(k)  # noqa: E731
            rate = rate_mbit * 1e6
            thr = np.where(is_good, 0.5, 0.2) * rate * noise()
            comp = np.clip(rate * 0.95 - thr, 0.05 * rate, None) * noise()
            rtt = base * np.where(is_good, 1.0, 1.6) * noise()
            loss = np.clip(np.where(is_good, 0.0005, 0.02) * noise(), 0, 1)
            fid = 1_000_000 + c * 100 + n_arm * 2
            t0 = T0 + 1000 * (c * 100 + n_arm)
            a_rows = _rows(fid, 42, 61001, per_bin, thr, rtt, loss, base, t0, interval_s)
            c_rows = _rows(fid + 1, 42, 61002, ["cubic"] * k, comp, rtt * 1.02, loss, base, t0, interval_s)
            table = pa.concat_tables([complete(pa.Table.from_pydict(a_rows)).cast(FLOW_SAMPLE_SCHEMA),
                                      complete(pa.Table.from_pydict(c_rows)).cast(FLOW_SAMPLE_SCHEMA)])
            assert table.column_names == list(FIELD_NAMES)
            arm_id = start if to is None else f"{start}-{to}@{mid * interval_s:g}"
            write_capture(out / cond / f"{arm_id}--s1", table, {
                "id": f"{cond}--{arm_id}--s1", "source": "synthetic", "interval_s": interval_s, "t0_epoch": t0,
                "duration_s": k * interval_s, "seed": 1, "condition": cond,
                "arm": {"start": start, "switches": [] if to is None else
                        [{"at_s": mid * interval_s, "cca": to, "inherit": "limited"}]},
                "link": {"emulator": "synthetic", "rate_mbit": rate_mbit, "base_rtt_ms": base},
                "competitors": [{"cca": "cubic", "local": True}],
                "flows": [{"flow_id": fid, "name": "agent", "role": "agent", "cca": start, "local": True},
                          {"flow_id": fid + 1, "name": "comp1", "role": "competitor", "cca": "cubic",
                           "local": True}],
                "notes": {"synthetic": f"good CCA {good} at base RTT {base:g} ms (datasets/synthetic.py)"},
            })
    return out
