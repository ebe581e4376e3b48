"""Fakes shared by the daemon's unit tests: a clock the test sets, flow-sample tables in the monitor's schema."""

from __future__ import annotations

import pyarrow as pa

from ccswitch.schema import FLOW_SAMPLE_SCHEMA


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def flow_table(rows: list[dict]) -> pa.Table:
    base = {f.name: (0.0 if pa.types.is_floating(f.type) else ("" if pa.types.is_string(f.type) else 0))
            for f in FLOW_SAMPLE_SCHEMA}
    return pa.Table.from_pylist([{**base, **r} for r in rows], schema=FLOW_SAMPLE_SCHEMA)
