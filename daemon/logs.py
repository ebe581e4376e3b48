"""Structured logs: one line per event with key=value fields (logfmt) or one JSON object.

Under systemd (the unit's stdout/stderr is the journal: $JOURNAL_STREAM is
set and matches stderr's device:inode) each line starts with the syslog
priority prefix ``<N>`` that journald's stream reader turns into the
PRIORITY field, so `journalctl -p warning -u ccswitchd` works without any
journal library.  Otherwise plain lines on stderr with a timestamp.

Callers attach fields with ``log.info("event", extra={"fields": {...}})``.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import Any

PRIORITY = {logging.DEBUG: 7, logging.INFO: 6, logging.WARNING: 4, logging.ERROR: 3, logging.CRITICAL: 2}


def under_journald(stream: Any = None) -> bool:
    js = os.environ.get("JOURNAL_STREAM", "")
    if not js:
        return False
    try:
        dev, ino = (int(x) for x in js.split(":"))
        st = os.fstat((stream or sys.stderr).fileno())
    except (ValueError, OSError):
        return False
    return st.st_dev == dev and st.st_ino == ino


def _logfmt_value(v: Any) -> str:
    s = v if isinstance(v, str) else json.dumps(v, default=str)
    if s == "" or any(c in s for c in ' ="\\') or any(ord(c) < 32 for c in s):
        return json.dumps(s)
    return s


class StructuredFormatter(logging.Formatter):
    def __init__(self, fmt: str = "logfmt", journald: bool = False):
        super().__init__()
        self.kind = fmt
        self.journald = journald

    def format(self, record: logging.LogRecord) -> str:
        fields: dict[str, Any] = {"level": record.levelname.lower(), "msg": record.getMessage()}
        fields.update(getattr(record, "fields", {}) or {})
        if record.exc_info:
            fields["exc"] = self.formatException(record.exc_info).replace("\n", " | ")
        if not self.journald:  # the journal stamps its own time
            fields = {"ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(record.created))
                      + f".{int(record.msecs):03d}", **fields}
        if self.kind == "json":
            line = json.dumps(fields, default=str, separators=(",", ":"))
        else:
            line = " ".join(f"{k}={_logfmt_value(v)}" for k, v in fields.items())
        if self.journald:
            line = f"<{PRIORITY.get(record.levelno, 6)}>{line}"
        return line


def setup(fmt: str = "logfmt", level: str = "info") -> logging.Logger:
    log = logging.getLogger("ccswitchd")
    for h in list(log.handlers):
        log.removeHandler(h)
    h = logging.StreamHandler(sys.stderr)
    h.setFormatter(StructuredFormatter(fmt, journald=under_journald()))
    log.addHandler(h)
    log.setLevel(level.upper())
    log.propagate = False
    return log
