"""What the daemon writes for later analysis: FlowSample Parquet and a decisions JSONL.

* ``--record FILE.parquet``: every tick's FlowSample rows (ccswitch/schema.py,
  unchanged: any FlowSample reader takes the file), one Parquet row group per
  non-empty tick, written with pyarrow's ParquetWriter (the tick's FlowFrame
  converted with to_arrow(); pyarrow is imported only when recording).  The footer is
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

A write that fails (disk full, I/O error) never stops the daemon: that
output is paused with one warning, what comes meanwhile is dropped, and
every RETRY_S the recorder tries again: the decisions file is reopened for
appending; the record continues in a new file FILE.partN.parquet (the
interrupted one keeps the row groups written before, without a footer
unless closing it still worked).  One info line when writing resumes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from ccswitch.frame import FlowFrame
from ccswitch.schema import flow_sample_schema

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger("ccswitchd")
RETRY_S = 5.0  # after a failed write, how often writing is tried again


class RecordError(ValueError):
    pass


class Recorder:
    def __init__(self, record: str | Path | None = None, decisions: str | Path | None = None):
        self._writer: Any = None  # pyarrow.parquet.ParquetWriter, imported only when recording (~50 MB)
        self._dec: IO[str] | None = None
        self.rows = 0
        self.decisions = 0
        self.record_path = Path(record) if record else None
        self.decisions_path = Path(decisions) if decisions else None
        self.paused: dict[str, float] = {}  # output ("record"/"decisions") -> when to try writing again
        self.dropped = {"record": 0, "decisions": 0}
        self._part = 0
        try:
            if self.record_path:
                if self.record_path.exists() and self.record_path.stat().st_size > 0:
                    raise RecordError(f"--record {self.record_path}: the file exists (Parquet cannot be appended "
                                      "to); remove it or choose another path")
                self.record_path.parent.mkdir(parents=True, exist_ok=True)
                import pyarrow.parquet as pq

                self._writer = pq.ParquetWriter(str(self.record_path), flow_sample_schema(), compression="zstd")
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
        return self.record_path is not None

    def samples(self, table: FlowFrame | pa.Table) -> None:
        if self.record_path is None or not table.num_rows:
            return
        if "record" in self.paused and not self._resume_record():
            self.dropped["record"] += table.num_rows
            return
        try:
            self._writer.write_table(table.to_arrow() if isinstance(table, FlowFrame) else table)
            self.rows += table.num_rows
        except OSError as e:
            self._pause("record", self.record_path, e)
            with contextlib.suppress(Exception):
                self._writer.close()
            self._writer = None

    def decision(self, rec: dict[str, Any]) -> None:
        if self.decisions_path is None:
            return
        if "decisions" in self.paused and not self._resume_decisions():
            self.dropped["decisions"] += 1
            return
        try:
            self._dec.write(json.dumps(_clean(rec), separators=(",", ":")) + "\n")
            self.decisions += 1
        except OSError as e:
            self._pause_decisions(e)

    def flush(self) -> None:
        if self._dec is not None and "decisions" not in self.paused:
            try:
                self._dec.flush()
            except OSError as e:
                self._pause_decisions(e)

    # -- failed writes -------------------------------------------------------
    def _pause(self, what: str, path: Path, e: OSError) -> None:
        self.paused[what] = time.monotonic() + RETRY_S
        log.warning(f"recorder: cannot write {what} file; paused, the daemon goes on",
                    extra={"fields": {"path": str(path), "error": e.strerror or str(e), "retry_s": RETRY_S}})

    def _pause_decisions(self, e: OSError) -> None:
        assert self.decisions_path is not None
        self._pause("decisions", self.decisions_path, e)
        if self._dec is not None:
            with contextlib.suppress(OSError):
                self._dec.close()  # what was buffered is lost with the space
            self._dec = None

    def _resumed(self, what: str, path: Path) -> None:
        del self.paused[what]
        log.info(f"recorder: writing the {what} file again",
                 extra={"fields": {"path": str(path), "dropped": self.dropped[what]}})

    def _resume_record(self) -> bool:
        assert self.record_path is not None
        if time.monotonic() < self.paused["record"]:
            return False
        self._part += 1
        path = self.record_path.with_suffix(f".part{self._part}{self.record_path.suffix}")
        try:
            import pyarrow.parquet as pq

            self._writer = pq.ParquetWriter(str(path), flow_sample_schema(), compression="zstd")
        except OSError:
            self.paused["record"] = time.monotonic() + RETRY_S
            return False
        self._resumed("record", path)
        return True

    def _resume_decisions(self) -> bool:
        assert self.decisions_path is not None
        if time.monotonic() < self.paused["decisions"]:
            return False
        try:
            self._dec = self.decisions_path.open("a", buffering=1 << 16)
        except OSError:
            self.paused["decisions"] = time.monotonic() + RETRY_S
            return False
        self._resumed("decisions", self.decisions_path)
        return True

    def close(self) -> None:
        if self._writer is not None:
            try:
                self._writer.close()
            except OSError as e:  # the footer did not fit: the file keeps its row groups, unreadable
                log.warning("recorder: closing the record file failed", extra={"fields": {"error": str(e)}})
            self._writer = None
        if self._dec is not None:
            with contextlib.suppress(OSError):
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
