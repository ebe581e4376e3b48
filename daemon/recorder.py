"""What the daemon writes for later analysis: FlowSample Parquet and a decisions JSONL.

* ``--record FILE.parquet``: every tick's FlowSample rows (ccswitch/schema.py,
  unchanged: any FlowSample reader takes the file), one Parquet row group per
  non-empty tick, written with pyarrow's ParquetWriter.  The footer is
  written on close, which SIGTERM reaches (the daemon unwinds through its
  ``with`` blocks); after a SIGKILL the file has no footer and is not
  readable, which is why the testbed stops daemons with SIGTERM.
* ``--decisions FILE.jsonl``: one JSON object per line and decision, flushed
  every tick (readable after any kind of stop, the last line at most cut):
  ``{"ts": epoch s, "flow": cookie, "from": cca, "to": cca, "action":
  "keep"|"switch"|"revert"|"manual"|"restore"|..., "reason": text,
  "q": {cca: score or null}, "verdict": "applied"|"failed: ..."|"observe-only"|
  "confirmed"|"reverted"|"blocked"|"kept", "policy": kind}``.
  By default only decisions that change or wanted to change something are
  written; log.all_decisions adds every "keep".

An existing record file is refused (Parquet cannot be appended to);
the decisions file is appended to.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import IO, Any

import pyarrow as pa

from ccswitch.schema import FLOW_SAMPLE_SCHEMA


class RecordError(ValueError):
    pass


class Recorder:
    def __init__(self, record: str | Path | None = None, decisions: str | Path | None = None):
        self._writer: Any = None  # pyarrow.parquet.ParquetWriter, imported only when recording (~9 MB)
        self._dec: IO[str] | None = None
        self.rows = 0
        self.decisions = 0
        self.record_path = Path(record) if record else None
        self.decisions_path = Path(decisions) if decisions else None
        try:
            if self.record_path:
                if self.record_path.exists() and self.record_path.stat().st_size > 0:
                    raise RecordError(f"--record {self.record_path}: the file exists (Parquet cannot be appended "
                                      "to); remove it or choose another path")
                self.record_path.parent.mkdir(parents=True, exist_ok=True)
                import pyarrow.parquet as pq

                self._writer = pq.ParquetWriter(str(self.record_path), FLOW_SAMPLE_SCHEMA, compression="zstd")
            if self.decisions_path:
                self.decisions_path.parent.mkdir(parents=True, exist_ok=True)
                self._dec = self.decisions_path.open("a", buffering=1 << 16)
        except OSError as e:
            self.close()
            raise RecordError(f"cannot write {e.filename}: {e.strerror}") from None
        except BaseException:
            self.close()
            raise

    @property
    def recording(self) -> bool:
        """--record is on (the controller then reads the monitor on every tick)."""
        return self._writer is not None

    def samples(self, table: pa.Table) -> None:
        if self._writer is not None and table.num_rows:
            self._writer.write_table(table)
            self.rows += table.num_rows

    def decision(self, rec: dict[str, Any]) -> None:
        if self._dec is not None:
            self._dec.write(json.dumps(_clean(rec), separators=(",", ":")) + "\n")
            self.decisions += 1

    def flush(self) -> None:
        if self._dec is not None:
            self._dec.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._dec is not None:
            self._dec.close()
            self._dec = None

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _clean(v: Any) -> Any:
    if isinstance(v, float):
        return None if math.isnan(v) or math.isinf(v) else v
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_clean(x) for x in v]
    return v
