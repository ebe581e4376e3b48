"""Unit tests that need no kernel: schema, sampler arithmetic, metrics, CLI parsing."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest

from ccswitch.bpf.monitor import FLOW_RECORD_DTYPE
from ccswitch.dataplane import validate_request
from ccswitch.metrics import jain_index, throughput_ratios
from ccswitch.sampler import Sampler, check_interval
from ccswitch.schema import FIELD_NAMES, FLOW_SAMPLE_SCHEMA


def record(cookie: int, ts_s: float, **fields: int) -> np.ndarray:
    r = np.zeros(1, dtype=FLOW_RECORD_DTYPE)
    r["cookie"], r["ts_ns"], r["family"], r["cca"] = cookie, int(ts_s * 1e9), 2, b"cubic"
    for k, v in fields.items():
        r[k] = v
    return r


class FakeKernel:
    """Stands in for Monitor.snapshot; the real counterpart is tests/test_monitor.py."""

    def __init__(self, snapshots: list[np.ndarray]):
        self.snapshots = snapshots

    def __call__(self) -> np.ndarray:
        return self.snapshots.pop(0)


def test_sampler_differences_counters_into_rates() -> None:
    a0 = record(7, 10.0, bytes_acked=1_000_000, delivered=1000, data_segs_out=1000,
                total_retrans=0, rtt_samples=100, rtt_absdiff_sum_us=5_000, srtt_us=2000,
                min_rtt_us=1000, write_seq=4_294_967_000)
    a1 = record(7, 10.5, bytes_acked=1_625_000, delivered=1500, data_segs_out=1500,
                total_retrans=25, rtt_samples=150, rtt_absdiff_sum_us=15_000, srtt_us=2000,
                min_rtt_us=1000, write_seq=704)  # write_seq wrapped past 2^32
    new = record(9, 10.5, bytes_acked=10)  # first seen: primes only
    s = Sampler(FakeKernel([a0, np.concatenate([a1, new])]))
    assert s.tick().num_rows == 0
    row = s.tick().to_pylist()
    assert len(row) == 1 and row[0]["flow_id"] == 7
    r = row[0]
    assert r["interval_s"] == pytest.approx(0.5)
    assert r["goodput_bps"] == pytest.approx(625_000 * 8 / 0.5)
    assert r["throughput_bps"] == pytest.approx((625_000 + 500 * 52) * 8 / 0.5)
    assert r["loss_rate"] == pytest.approx(25 / 500)
    assert r["jitter_us"] == pytest.approx(10_000 / 50)
    assert r["rtt_ratio"] == pytest.approx(2.0)
    assert r["byte_rate_bps"] == pytest.approx(1000 * 8 / 0.5)
    assert r["cca"] == "cubic" and r["src"] == "0.0.0.0"


def test_sampler_without_rtt_samples_reports_nan_jitter() -> None:
    a0, a1 = record(1, 1.0), record(1, 2.0, bytes_acked=100)
    r = Sampler(FakeKernel([a0, a1]))
    r.tick()
    assert math.isnan(r.tick().to_pylist()[0]["jitter_us"])


def test_schema_is_one_definition() -> None:
    assert tuple(FLOW_SAMPLE_SCHEMA.names) == FIELD_NAMES
    assert FLOW_SAMPLE_SCHEMA.field("goodput_bps").type == pa.float64()
    assert all(f.metadata and b"doc" in f.metadata for f in FLOW_SAMPLE_SCHEMA)


def test_interval_floor() -> None:
    assert check_interval(0.1) == 0.1
    with pytest.raises(ValueError, match="below the minimum"):
        check_interval(0.05)


def test_request_validation() -> None:
    validate_request("bbr", "full", ["cubic", "bbr"])
    with pytest.raises(ValueError, match="available here: cubic bbr"):
        validate_request("pcc", "limited", ["cubic", "bbr"])


def test_jain_and_thratio() -> None:
    assert jain_index([10, 10]) == pytest.approx(1.0)
    assert jain_index([10, 0]) == pytest.approx(0.5)
    assert throughput_ratios([30, 10]) == pytest.approx([1.5, 0.5])


def test_new_flow_first_interval_counts_from_establishment() -> None:
    old = record(7, 10.0)
    born = record(9, 10.5, established_ns=int(10.2e9), bytes_acked=300_000, write_seq=1_000_000,
                  sndq_bytes=50_000)
    s = Sampler(FakeKernel([old, np.concatenate([record(7, 10.5), born])]))
    s.tick()
    rows = {r["flow_id"]: r for r in s.tick().to_pylist()}
    assert rows[9]["interval_s"] == pytest.approx(0.3)
    assert rows[9]["goodput_bps"] == pytest.approx(300_000 * 8 / 0.3)
    assert rows[9]["byte_rate_bps"] == pytest.approx(350_000 * 8 / 0.3)
