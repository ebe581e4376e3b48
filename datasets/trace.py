"""The trace format: one folder per capture, Parquet flow samples + a JSON manifest.

A *capture* is one recording (one testbed run, one live recording, one
imported iperf3/tshark file)::

    CAPTURE/
      manifest.json      what was recorded and how (below)
      samples.parquet    FlowSample rows, exactly ccswitch.schema.FLOW_SAMPLE_SCHEMA
      ...                anything else the producer keeps (iperf/*.json, the
                         runner's flows.parquet and summary.json, ...)

A *corpus* is a folder holding captures at any depth, plus ``corpus.json``
(the spec it was built from and an index of its captures).  Nothing is
pickled: the samples are plain Parquet (pyarrow, pandas, DuckDB, Spark read
them; ``SELECT * FROM 'corpus/**/samples.parquet'``) and the manifest is JSON.

Manifest (``format_version`` 1; keys marked * are required)::

    format*           "ccswitch-trace"
    format_version*   1
    schema_version*   FlowSample schema version of samples.parquet (ccswitch.schema)
    id*               capture name, unique in its corpus
    source*           "bottleneck" | "runner" | "monitor" | "iperf3" | "tshark" | "synthetic"
    interval_s*       sampling interval, s
    flows*            [{flow_id, name, role: "agent"|"competitor"|"observed", cca, local}]
                      ("local": the flow is on the agent's host, so the host sees it)
    condition         id of the link condition; captures sharing it are counterfactual
                      arms of each other (same link and competitors, another agent CCA)
    arm               {"start": CCA, "switches": [{"at_s", "cca", "inherit"}]}: the
                      agent flow's script
    link              link parameters (rate_mbit, queue_ms, delay_ms, loss, wifi, emulator)
    competitors       [{"cca", "local"}] the competing flows of the condition
    seed              repetition seed
    t0_epoch          wall-clock start of the run clock; sample k covers
                      (t0 + k*interval_s, t0 + (k+1)*interval_s]
    duration_s, created, scenario, tools (versions), files (rows, sha256), notes

Every reading error is a :class:`TraceError` whose one-line message names the
file and, where it applies, the column or key.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import platform
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ccswitch.schema import (
    FIELD_NAMES,
    FIELDS,
    FLOW_SAMPLE_SCHEMA,
    REQUIRED_FIELD_NAMES,
    SCHEMA_VERSION,
    complete,
)

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "MANIFEST",
    "REQUIRED_KEYS",
    "SAMPLES",
    "SOURCES",
    "Capture",
    "TraceError",
    "bin_flows",
    "find_captures",
    "read_manifest",
    "read_samples",
    "tool_versions",
    "write_capture",
    "write_samples",
]

FORMAT = "ccswitch-trace"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
SAMPLES = "samples.parquet"
CORPUS_INDEX = "corpus.json"
SOURCES = ("bottleneck", "runner", "monitor", "iperf3", "tshark", "synthetic")
REQUIRED_KEYS = ("format", "format_version", "schema_version", "id", "source", "interval_s", "flows")
ROLES = ("agent", "competitor", "observed")


class TraceError(ValueError):
    """A capture is missing, corrupt or does not match the format (one-line message)."""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


# ------------------------------------------------------------- samples ---

def _compatible(found: pa.DataType, want: pa.DataType) -> bool:
    """True if a column of type *found* can stand for FlowSample type *want* (checked cast)."""
    if found.equals(want):
        return True
    if pa.types.is_dictionary(found):
        found = found.value_type
    if pa.types.is_floating(want):
        return pa.types.is_floating(found)
    if pa.types.is_integer(want):  # Spark and pandas have no unsigned types: accept any int, cast checked
        return pa.types.is_integer(found)
    if pa.types.is_string(want):
        return pa.types.is_string(found) or pa.types.is_large_string(found)
    return False


def read_samples(path: str | Path) -> pa.Table:
    """Read and validate a samples.parquet; returns a table with exactly FLOW_SAMPLE_SCHEMA.

    Extra columns are dropped; compatible types (e.g. int64 for a uint32
    column, as Spark writes them) are cast with overflow checks.
    """
    p = Path(path)
    if not p.is_file():
        raise TraceError(f"{p}: no such file")
    try:
        pf = pq.ParquetFile(p)
        schema = pf.schema_arrow
    except (pa.ArrowException, OSError, ValueError) as e:
        raise TraceError(f"{p}: not a readable Parquet file ({_first_line(e)})") from None
    meta = schema.metadata or {}
    version = meta.get(b"ccswitch.schema_version")
    if version is not None and version.decode() != str(SCHEMA_VERSION):
        raise TraceError(f"{p}: FlowSample schema version {version.decode()}, this ccswitch reads "
                         f"version {SCHEMA_VERSION}")
    missing = [n for n in REQUIRED_FIELD_NAMES if n not in schema.names]  # optional ones: nulls
    if missing:
        more = f" (and {len(missing) - 1} more: {', '.join(missing[1:4])}{'...' if len(missing) > 4 else ''})" \
            if len(missing) > 1 else ""
        raise TraceError(f"{p}: missing column '{missing[0]}'{more}; FlowSample schema v{SCHEMA_VERSION} "
                         f"has {len(FIELDS)} columns (ccswitch/schema.py)")
    for f in FIELDS:
        if f.name not in schema.names:
            continue
        found = schema.field(f.name).type
        if not _compatible(found, f.type):
            raise TraceError(f"{p}: column '{f.name}' has type {found}, expected {f.type} "
                             f"(FlowSample schema v{SCHEMA_VERSION})")
    try:
        table = complete(pf.read(columns=[n for n in FIELD_NAMES if n in schema.names]))
    except (pa.ArrowException, OSError, ValueError) as e:
        raise TraceError(_locate_corruption(p, pf, e)) from None
    arrays = []
    for f in FIELDS:
        col = table.column(f.name)
        if col.null_count and not f.optional:
            raise TraceError(f"{p}: column '{f.name}' has {col.null_count} null value(s); FlowSample "
                             f"columns are non-nullable (NaN marks an unknown float)")
        if not col.type.equals(f.type):
            try:
                col = col.cast(f.type, safe=True)
            except (pa.ArrowException, ValueError) as e:
                raise TraceError(f"{p}: column '{f.name}': cannot convert {col.type} to {f.type} "
                                 f"({_first_line(e)})") from None
        arrays.append(col)
    return pa.Table.from_arrays(arrays, schema=FLOW_SAMPLE_SCHEMA)


def _locate_corruption(p: Path, pf: pq.ParquetFile, exc: BaseException) -> str:
    """Read column by column to name the one that fails."""
    for name in FIELD_NAMES:
        try:
            pf.read(columns=[name])
        except (pa.ArrowException, OSError, ValueError) as e:
            return f"{p}: column '{name}' is corrupt ({_first_line(e)})"
    return f"{p}: corrupt Parquet data ({_first_line(exc)})"


def write_samples(table: pa.Table, path: str | Path) -> int:
    """Write FlowSample rows (sorted by time, flow) as zstd Parquet; returns the row count."""
    missing = [n for n in REQUIRED_FIELD_NAMES if n not in table.column_names]
    if missing:
        raise TraceError(f"{path}: cannot write samples without column '{missing[0]}'")
    table = complete(table).cast(FLOW_SAMPLE_SCHEMA)
    if table.num_rows:
        table = table.sort_by([("ts_s", "ascending"), ("flow_id", "ascending")])
    pq.write_table(table, path, compression="zstd")
    return table.num_rows


# ------------------------------------------------------------ manifest ---


def read_manifest(path: str | Path) -> dict[str, Any]:
    """Read and check a manifest.json (path to the file or to its capture folder)."""
    p = Path(path)
    if p.is_dir():
        p = p / MANIFEST
    try:
        data = json.loads(p.read_text())
    except FileNotFoundError:
        raise TraceError(f"{p}: no such file") from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise TraceError(f"{p}: not valid JSON ({_first_line(e)})") from None
    if not isinstance(data, dict):
        raise TraceError(f"{p}: must hold a JSON object, got {type(data).__name__}")
    for key in REQUIRED_KEYS:
        if key not in data:
            raise TraceError(f"{p}: missing key '{key}'")
    if data["format"] != FORMAT:
        raise TraceError(f"{p}: key 'format' is {data['format']!r}, expected {FORMAT!r}")
    if data["format_version"] != FORMAT_VERSION:
        raise TraceError(f"{p}: key 'format_version' is {data['format_version']!r}; this ccswitch reads "
                         f"version {FORMAT_VERSION}")
    if str(data["schema_version"]) != str(SCHEMA_VERSION):
        raise TraceError(f"{p}: key 'schema_version' is {data['schema_version']!r}; this ccswitch reads "
                         f"FlowSample version {SCHEMA_VERSION}")
    if data["source"] not in SOURCES:
        raise TraceError(f"{p}: key 'source' is {data['source']!r}, expected one of {', '.join(SOURCES)}")
    iv = data["interval_s"]
    if isinstance(iv, bool) or not isinstance(iv, int | float) or not iv > 0:
        raise TraceError(f"{p}: key 'interval_s' must be a positive number, got {iv!r}")
    if not isinstance(data["flows"], list):
        raise TraceError(f"{p}: key 'flows' must be a list")
    for i, f in enumerate(data["flows"]):
        if not isinstance(f, dict) or "flow_id" not in f:
            raise TraceError(f"{p}: key 'flows[{i}].flow_id' is missing")
        if f.get("role", "observed") not in ROLES:
            raise TraceError(f"{p}: key 'flows[{i}].role' is {f.get('role')!r}, expected one of "
                             f"{', '.join(ROLES)}")
    arm = data.get("arm")
    if arm is not None and (not isinstance(arm, dict) or "start" not in arm):
        raise TraceError(f"{p}: key 'arm.start' is missing")
    return data


@cache
def _iperf3_version() -> str | None:
    if shutil.which("iperf3") is None:
        return None
    try:
        out = subprocess.run(["iperf3", "--version"], capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.splitlines()[0].strip() if out else None


@cache
def _git_commit() -> str | None:
    """The ccswitch checkout's commit (+ "-dirty" with local changes), if it is a git checkout."""
    repo = Path(__file__).resolve().parent.parent
    if shutil.which("git") is None or not (repo / ".git").exists():
        return None
    try:
        head = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return (head + ("-dirty" if dirty else "")) or None


def tool_versions(**extra: str | None) -> dict[str, str | None]:
    """Versions recorded in every manifest (reproducibility)."""
    from importlib.metadata import PackageNotFoundError, version

    def v(name: str) -> str | None:
        try:
            return version(name)
        except PackageNotFoundError:
            return None

    out: dict[str, str | None] = {
        "ccswitch": v("ccswitch"), "kernel": platform.release(), "python": platform.python_version(),
        "pyarrow": pa.__version__, "numpy": np.__version__, "iperf3": _iperf3_version(),
        "ccswitch_git": _git_commit(),
    }
    out.update(extra)
    return out


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _json_default(o: Any) -> Any:
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def write_capture(out_dir: str | Path, samples: pa.Table, manifest: Mapping[str, Any]) -> Path:
    """Write samples.parquet and manifest.json into *out_dir*; fills in the format keys.

    *manifest* needs at least ``id``, ``source``, ``interval_s`` and ``flows``.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = write_samples(samples, out / SAMPLES)
    doc: dict[str, Any] = {"format": FORMAT, "format_version": FORMAT_VERSION,
                           "schema": "FlowSample", "schema_version": SCHEMA_VERSION}
    doc.update(manifest)
    doc.setdefault("created", _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"))
    doc.setdefault("tools", tool_versions())
    doc["files"] = {**doc.get("files", {}), SAMPLES: {"rows": rows, "sha256": _sha256(out / SAMPLES)}}
    tmp = out / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2, default=_json_default) + "\n")
    tmp.replace(out / MANIFEST)  # the manifest last: a capture with a manifest is complete
    read_manifest(out)
    return out


# ------------------------------------------------------------- captures ---


@dataclass
class Capture:
    """A capture folder: its manifest (read eagerly) and samples (read on demand)."""

    path: Path
    manifest: dict[str, Any]
    _samples: pa.Table | None = field(default=None, repr=False)

    @classmethod
    def open(cls, path: str | Path) -> Capture:
        p = Path(path)
        if p.name == MANIFEST:
            p = p.parent
        return cls(p, read_manifest(p))

    @property
    def id(self) -> str:
        return str(self.manifest["id"])

    @property
    def condition(self) -> str | None:
        c = self.manifest.get("condition")
        return str(c) if c is not None else None

    @property
    def interval_s(self) -> float:
        return float(self.manifest["interval_s"])

    @property
    def flows(self) -> list[dict[str, Any]]:
        return list(self.manifest["flows"])

    def agent_flow(self) -> dict[str, Any] | None:
        return next((f for f in self.flows if f.get("role") == "agent"), None)

    def samples(self) -> pa.Table:
        if self._samples is None:
            self._samples = read_samples(self.path / SAMPLES)
        return self._samples

    def validate(self, *, check_sha: bool = True) -> None:
        """Read everything and cross-check the manifest against the samples."""
        table = self.samples()
        files = self.manifest.get("files", {}).get(SAMPLES, {})
        mpath = self.path / MANIFEST
        if check_sha and files.get("sha256") and files["sha256"] != _sha256(self.path / SAMPLES):
            raise TraceError(f"{self.path / SAMPLES}: sha256 differs from {mpath} key 'files.{SAMPLES}.sha256' "
                             "(the file changed after capture)")
        if "rows" in files and files["rows"] != table.num_rows:
            raise TraceError(f"{self.path / SAMPLES}: {table.num_rows} rows, {mpath} key "
                             f"'files.{SAMPLES}.rows' says {files['rows']}")
        present = set(table.column("flow_id").to_pylist())
        for i, f in enumerate(self.flows):
            if f.get("role") in ("agent", "competitor") and int(f["flow_id"]) not in present:
                raise TraceError(f"{mpath}: key 'flows[{i}].flow_id' = {f['flow_id']} has no rows in "
                                 f"{self.path / SAMPLES}")


def find_captures(root: str | Path) -> list[Capture]:
    """Every capture (folder with a manifest.json) at or below *root*, sorted by path."""
    r = Path(root)
    if not r.exists():
        raise TraceError(f"{r}: no such file or directory")
    if (r / MANIFEST).is_file():
        return [Capture.open(r)]
    if r.is_file():
        raise TraceError(f"{r}: not a capture folder (expected a folder with {MANIFEST})")
    found = sorted(Path(d) for d, _, files in os.walk(r, followlinks=True) if MANIFEST in files)
    return [Capture.open(d) for d in found]  # symlinked folders count: corpora can be assembled from links


# -------------------------------------------------------------- binning ---

# Resampling onto the capture's regular grid (the runner and the recorder add a short
# "discovery" row after a flow starts, and a loaded machine samples late or skips a tick).
RATE_COLUMNS = ("throughput_bps", "goodput_bps", "sending_rate_bps", "byte_rate_bps")
LAST_COLUMNS = ("rtt_us", "rttvar_us", "min_rtt_us", "delivery_rate_bps", "cwnd_segs", "inflight_segs",
                "sndq_bytes", "mss_bytes")
SUM_COLUMNS = ("retrans_segs", "sent_segs", "delivered_segs", "lost_segs", "rtt_samples")
MIN_COVERAGE = 0.5
"""A bin counts as present when rows of the flow cover at least this fraction of it."""
STATE_TOLERANCE = 0.1
"""A row ending at most this fraction of an interval after a bin still gives the bin its state."""


@dataclass
class FlowBins:
    """One flow's samples on the capture's regular time grid (index k = bin)."""

    flow_id: int
    present: np.ndarray  # bool[K]
    cca: list[str | None]
    cols: dict[str, np.ndarray]  # float64[K] each; NaN where absent

    def __getitem__(self, name: str) -> np.ndarray:
        return self.cols[name]


def bin_flows(table: pa.Table, t0_epoch: float, interval_s: float, n_bins: int | None = None,
              flow_ids: Iterable[int] | None = None) -> dict[int, FlowBins]:
    """Resample FlowSample rows onto bins k = 0..K-1 covering (t0 + k*dt, t0 + (k+1)*dt].

    Each row covers (ts_s - interval_s, ts_s].  Per bin: rates are averaged
    weighted by how much of the bin each row covers, counters are split in
    proportion to the overlap and summed, state (RTT, cwnd, CCA, ...) comes
    from the latest row ending in the bin (else the row overlapping it most);
    loss_rate is recomputed from the counters, rtt_ratio from RTT / min RTT,
    jitter is weighted by RTT samples.  A bin covered less than MIN_COVERAGE
    is absent (NaN).
    """
    ts = table.column("ts_s").to_numpy()
    dt = interval_s
    if n_bins is None:
        n_bins = int(np.ceil((ts.max() - t0_epoch) / dt - 1e-6)) if len(ts) else 0
    fid_all = table.column("flow_id").to_numpy()
    wanted = sorted(set(int(f) for f in flow_ids) if flow_ids is not None else set(np.unique(fid_all).tolist()))
    need = set(RATE_COLUMNS + LAST_COLUMNS + SUM_COLUMNS + ("interval_s", "jitter_us", "loss_rate"))
    raw = {c: table.column(c).to_numpy().astype(np.float64) for c in need}
    cca_all = table.column("cca").to_pylist()
    out: dict[int, FlowBins] = {}
    for fid in wanted:
        rows = np.flatnonzero(fid_all == fid)
        rows = rows[np.argsort(ts[rows], kind="stable")]
        cols = {c: np.zeros(n_bins) for c in (*RATE_COLUMNS, *SUM_COLUMNS)}
        cover = np.zeros(n_bins)
        jit_w = np.zeros(n_bins)
        jit_sum = np.zeros(n_bins)
        state_row = np.full(n_bins, -1)
        state_end = np.full(n_bins, -np.inf)
        for r in rows:
            end = ts[r] - t0_epoch
            start = end - max(raw["interval_s"][r], 1e-9)
            k_lo, k_hi = max(0, int(np.floor(start / dt))), min(n_bins - 1, int(np.ceil(end / dt)) - 1)
            for k in range(k_lo, k_hi + 1):
                w = min(end, (k + 1) * dt) - max(start, k * dt)
                if w <= 1e-6:
                    continue
                frac = w / raw["interval_s"][r]
                cover[k] += w
                for c in RATE_COLUMNS:
                    cols[c][k] += raw[c][r] * w
                for c in SUM_COLUMNS:
                    cols[c][k] += raw[c][r] * frac
                if not np.isnan(raw["jitter_us"][r]):
                    wj = max(raw["rtt_samples"][r] * frac, 1e-9)
                    jit_sum[k] += raw["jitter_us"][r] * wj
                    jit_w[k] += wj
                # state: the latest row ending in the bin (or just after it), else the longest overlap
                score = end + 1e6 if end <= (k + 1 + STATE_TOLERANCE) * dt else w
                if score >= state_end[k]:
                    state_end[k], state_row[k] = score, r
        present = cover >= MIN_COVERAGE * dt
        with np.errstate(invalid="ignore", divide="ignore"):
            for c in RATE_COLUMNS:
                cols[c] = np.where(present, cols[c] / cover, np.nan)
            for c in SUM_COLUMNS:
                cols[c] = np.where(present, cols[c], np.nan)
            sr = np.where(present, state_row, -1)
            for c in LAST_COLUMNS:
                cols[c] = np.where(sr >= 0, raw[c][np.maximum(sr, 0)], np.nan)
            cols["jitter_us"] = np.where(present & (jit_w > 0), jit_sum / np.maximum(jit_w, 1e-12), np.nan)
            sent = cols["sent_segs"]
            fallback = np.where(sr >= 0, raw["loss_rate"][np.maximum(sr, 0)], np.nan)
            cols["loss_rate"] = np.where(sent > 0, np.minimum(1.0, cols["retrans_segs"] / sent), fallback)
            mr = cols["min_rtt_us"]
            cols["rtt_ratio"] = np.where(mr > 0, cols["rtt_us"] / mr, np.nan)
        cca = [cca_all[int(i)] if i >= 0 else None for i in sr]
        out[fid] = FlowBins(fid, present, cca, cols)
    return out
