"""ECN columns of FlowSample without the kernel: sampler arithmetic, old files, input checks.

The sampler is fed hand-made flow_records (a stand-in for Monitor.snapshot);
the real counterpart, with CE marks on the wire, is tests/test_prague.py.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from ccswitch.bpf.cemark import prob_to_u32
from ccswitch.bpf.monitor import FLOW_RECORD_DTYPE
from ccswitch.bpf.prague import refuse_without_ecn
from ccswitch.datasets.trace import read_samples, write_samples
from ccswitch.sampler import Sampler
from ccswitch.schema import (
    ECN_MODES,
    FIELD_NAMES,
    FLOW_SAMPLE_SCHEMA,
    OPTIONAL_FIELD_NAMES,
    REQUIRED_FIELD_NAMES,
    complete,
)

REPO = Path(__file__).resolve().parents[1]


def recs(ts_s: float, rows: list[dict[str, int]]) -> np.ndarray:
    r = np.zeros(len(rows), dtype=FLOW_RECORD_DTYPE)
    for i, fields in enumerate(rows):
        r[i]["ts_ns"], r[i]["family"], r[i]["cca"] = int(ts_s * 1e9), 2, b"prague"
        for k, v in fields.items():
            r[i][k] = v
    return r


def test_sampler_ecn_columns() -> None:
    before = [dict(cookie=1, delivered=100, delivered_ce=10, ecn_flags=0x10 | 0x08, received_ce=0),
              dict(cookie=2, delivered=50, delivered_ce=0, ecn_flags=0x01),
              dict(cookie=3, delivered=7, ecn_flags=0x11, received_ce=4),
              dict(cookie=4, delivered=(1 << 32) - 10, delivered_ce=(1 << 32) - 1)]
    after = [dict(cookie=1, delivered=300, delivered_ce=30, ecn_flags=0x18),
             dict(cookie=2, delivered=150, delivered_ce=100, ecn_flags=0x01),
             dict(cookie=3, delivered=7, ecn_flags=0x11, received_ce=9),
             dict(cookie=4, delivered=10, delivered_ce=4)]  # both counters wrapped
    snaps = [recs(1.0, before), recs(2.0, after)]
    s = Sampler(lambda: snaps.pop(0))
    s.tick()
    rows = {r["flow_id"]: r for r in s.tick().to_pylist()}
    assert [ECN_MODES[rows[i]["ecn_mode"]] for i in (1, 2, 3, 4)] == ["accecn", "rfc3168", "pending", "none"]
    assert rows[1]["ce_segs"] == 20 and rows[1]["ce_fraction"] == pytest.approx(0.1)
    assert rows[2]["ce_fraction"] == 1.0  # RFC 3168: all segments acked under ECE count
    assert math.isnan(rows[3]["ce_fraction"]) and rows[3]["received_ce_segs"] == 5
    assert rows[4]["ce_segs"] == 5 and rows[4]["ce_fraction"] == pytest.approx(5 / 20)


def test_optional_columns_are_nullable_and_last() -> None:
    assert FIELD_NAMES[-len(OPTIONAL_FIELD_NAMES):] == OPTIONAL_FIELD_NAMES
    assert set(OPTIONAL_FIELD_NAMES) == {"ecn_mode", "ce_segs", "ce_fraction", "received_ce_segs"}
    for name in FIELD_NAMES:
        assert FLOW_SAMPLE_SCHEMA.field(name).nullable == (name in OPTIONAL_FIELD_NAMES)


def test_old_files_without_ecn_columns_read_as_nulls(tmp_path: Path) -> None:
    """The shipped corpus predates the ECN columns: it reads, with nulls there."""
    shipped = sorted((REPO / "datasets" / "sample").rglob("samples.parquet"))
    assert shipped, "datasets/sample has no samples.parquet"
    t = read_samples(shipped[0])
    assert t.schema.equals(FLOW_SAMPLE_SCHEMA) and t.num_rows > 0
    assert all(t.column(n).null_count == t.num_rows for n in OPTIONAL_FIELD_NAMES)
    old = t.select(list(REQUIRED_FIELD_NAMES))  # as a writer before the ECN columns
    redone = complete(old).cast(FLOW_SAMPLE_SCHEMA)
    assert redone.schema.equals(t.schema, check_metadata=True)
    assert redone.select(["ts_s", "flow_id", "cca", "ce_fraction"]).equals(
        t.select(["ts_s", "flow_id", "cca", "ce_fraction"]))  # (NaN != NaN in the float columns)
    write_samples(old, tmp_path / "s.parquet")
    assert read_samples(tmp_path / "s.parquet").column("ce_fraction").null_count == t.num_rows
    with pytest.raises(KeyError):
        complete(old.drop_columns(["rtt_us"]))  # required columns are not invented


def test_cemark_probability_checked() -> None:
    assert prob_to_u32(0.0) == 0 and prob_to_u32(1.0) == (1 << 32) - 1
    assert prob_to_u32(0.5) == 1 << 31
    with pytest.raises(ValueError, match=r"outside 0\.\.1"):
        prob_to_u32(1.5)


def test_refuse_without_ecn() -> None:
    r = recs(1.0, [dict(cookie=1, ecn_flags=0x10), dict(cookie=2, ecn_flags=0x08), dict(cookie=3, ecn_flags=1)])
    refused = refuse_without_ecn(r, [1, 2, 3, 99])
    assert list(refused) == [2] and "negotiated no ECN" in refused[2]
    assert pa.types.is_uint8(FLOW_SAMPLE_SCHEMA.field("ecn_mode").type)
