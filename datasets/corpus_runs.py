"""One run of a corpus captured into its folder (OUT/CONDITION/ARM--sSEED), and the corpus index.

A run is captured by the tbf bottleneck (datasets/capture.py) or by the
testbed runner, for which :func:`scenario_text` writes the run as a testbed
scenario (linkemu adds delay, loss and WiFi).  A folder whose manifest
validates counts as done (:func:`is_captured`), so an interrupted build
resumes; ``corpus.json`` (:func:`write_index`) holds the spec and an index
of the captures.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .capture import AGENT, CaptureError, Condition, capture_bottleneck
from .corpus_spec import WIFI_PRESETS, CorpusSpec, Run
from .trace import CORPUS_INDEX, MANIFEST, Capture, TraceError, read_samples, write_capture

__all__ = ["CAPTURE_FAILURES", "SLIM_KEEP", "capture_run", "capture_runner", "is_captured", "runner_available",
           "scenario_text", "slim_capture", "write_index"]


def _pfifo_packets(cond: Condition) -> int:
    return max(2, math.ceil(cond.queue_bytes / 1514))


def scenario_text(spec: CorpusSpec, run: Run) -> str:
    """The testbed scenario (testbed/scenario/ format) of one run of the runner backend."""
    cond, arm = run.condition, run.arm
    linkemu = bool(cond.delay_ms or cond.loss or cond.wifi)
    clients = 1 + len(cond.remote_competitors)
    digest = hashlib.sha256(run.rel_dir.encode()).hexdigest()[:10]
    lines = [
        f'name = "corpus-{digest}"',
        f'description = "{spec.name}: {cond.id} arm {arm.id} seed {run.seed}"',
        f"duration_s = {spec.duration_s:g}",
        f"clients = {clients}",
        f"seeds = [{run.seed}]",
        f"sample_interval_s = {spec.interval_s:g}",
        "",
        "[link]",
        f'emulator = "{"linkemu" if linkemu else "kernel"}"',
        "",
        "[link.uplink]",
        f"rate_mbit = {cond.rate_mbit:g}",
        f'qdisc = {{ kind = "pfifo", limit_pkts = {_pfifo_packets(cond)} }}',
    ]
    if cond.delay_ms:
        lines.append(f"delay_ms = {cond.delay_ms:g}")
    if cond.loss:
        lines.append(f'loss = {{ model = "bernoulli", p = {cond.loss:g} }}')
    if linkemu:
        lines += ["", "[link.downlink]", f"rate_mbit = {max(cond.rate_mbit, 100.0):g}"]
        if cond.delay_ms:
            lines.append(f"delay_ms = {cond.delay_ms:g}")
    if cond.wifi:
        preset = WIFI_PRESETS[cond.wifi]
        station = _inline_toml(preset["station"])
        lines += ["", "[link.wifi]", "clients = [" + ", ".join([station] * clients) + "]"]
        lines += [f"{k} = {_inline_toml(v)}" for k, v in preset["wifi"].items()]
    lines += ["", "[[flows]]", f'name = "{AGENT}"', "client = 1", f'cca = "{arm.start}"']
    for i, c in enumerate(cond.competitors):
        lines += ["", "[[flows]]", f'name = "L{i + 1}"', "client = 1", f'cca = "{c}"']
    for i, c in enumerate(cond.remote_competitors):
        lines += ["", "[[flows]]", f'name = "R{i + 1}"', f"client = {i + 2}", f'cca = "{c}"']
    for sw in arm.switches:
        lines += ["", "[[switches]]", f"at_s = {sw.at_s:g}", f'flow = "{AGENT}"', f'cca = "{sw.cca}"',
                  f'inherit = "{sw.inherit}"']
    lines += ["", "[capture]", "tshark = false"]
    return "\n".join(lines) + "\n"


def _inline_toml(d: dict[str, Any]) -> str:
    items = []
    for k, v in d.items():
        if isinstance(v, dict):
            items.append(f"{k} = {_inline_toml(v)}")
        elif isinstance(v, str):
            items.append(f'{k} = "{v}"')
        else:
            items.append(f"{k} = {v}")
    return "{ " + ", ".join(items) + " }"


def runner_available() -> str | None:
    """None if the testbed runner can be driven, else why not."""
    try:
        from ccswitch.testbed import scenario  # noqa: F401
        from ccswitch.testbed.runs import runner  # noqa: F401
    except ImportError as e:
        return f"the testbed runner is not available ({e})"
    return None


def capture_runner(out_dir: Path, spec: CorpusSpec, run: Run, progress: bool) -> Path:
    """One run through the testbed runner, then a manifest over its run folder."""
    import pyarrow.parquet as pq

    from ccswitch.testbed.runs.runner import RunError, run_once
    from ccswitch.testbed.scenario import ScenarioError, parse_scenario

    text = scenario_text(spec, run)
    try:
        sc = parse_scenario(text, f"{run.rel_dir}/scenario.toml")
        summary = run_once(sc, out_dir, seed=run.seed, label=run.rel_dir, progress=progress)
    except (RunError, ScenarioError, NotImplementedError) as e:
        raise CaptureError(f"{run.rel_dir}: {e}") from None
    samples = read_samples(out_dir / "samples.parquet")
    flows_tbl = pq.read_table(out_dir / "flows.parquet").to_pylist()
    cond = run.condition
    flows = []
    for r in flows_tbl:
        role = "agent" if r["flow"] == AGENT else "competitor"
        flows.append({"flow_id": r["flow_id"], "name": r["flow"], "role": role, "cca": r["cca_start"],
                      "local": r["client"] == 1, "port": r["port"], "cport": r["cport"], "client": r["client"]})
    meta = summary["meta"]
    return write_capture(out_dir, samples, {
        "id": f"{cond.id}--{run.arm.id}--s{run.seed}", "source": "runner", "interval_s": spec.interval_s,
        "t0_epoch": meta["t0_epoch"], "duration_s": spec.duration_s, "seed": run.seed,
        "condition": cond.id, "arm": run.arm.as_dict(),
        "link": cond.as_link(meta.get("emulator") or "?"), "competitors": cond.competitor_list(),
        "flows": flows, "switch_results": summary.get("switches", []), "iperf3": summary.get("iperf3", {}),
        "scenario": {"backend": "runner", "text": text},
    })


def is_captured(run_dir: Path) -> bool:
    """The run's folder holds a capture whose manifest validates (an interrupted one has none)."""
    if not (run_dir / MANIFEST).is_file():
        return False
    try:
        Capture.open(run_dir).validate()
    except TraceError:
        return False
    return True


def write_index(out: Path, spec: CorpusSpec) -> dict[str, Any]:
    """OUT/corpus.json: the spec and an index of the captures done so far; returns it."""
    captures = []
    for run in spec.runs:
        d = out / run.rel_dir
        if (d / MANIFEST).is_file():
            m = json.loads((d / MANIFEST).read_text())
            captures.append({"path": run.rel_dir, "condition": run.condition.id, "arm": run.arm.id,
                             "seed": run.seed, "rows": m.get("files", {}).get("samples.parquet", {}).get("rows")})
    index = {"format": "ccswitch-corpus", "format_version": 1, "name": spec.name, "backend": spec.backend,
             "updated": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
             "conditions": [c.id for c in spec.conditions], "arms": [a.id for a in spec.arms()],
             "seeds": list(spec.seeds), "runs_planned": len(spec.runs), "runs_done": len(captures),
             "spec": spec.text, "captures": captures}
    (out / CORPUS_INDEX).write_text(json.dumps(index, indent=2) + "\n")
    return index


SLIM_KEEP = ("manifest.json", "samples.parquet", "scenario.toml")
"""What ``slim`` keeps of a capture folder (the runner also leaves iperf3 JSON, emulator
config, flows.parquet, summary.json; the manifest already summarises them)."""


def slim_capture(run_dir: Path) -> None:
    """Everything but :data:`SLIM_KEEP` removed from a capture folder."""
    for p in sorted(run_dir.iterdir()):
        if p.name not in SLIM_KEEP:
            shutil.rmtree(p) if p.is_dir() else p.unlink()


CAPTURE_FAILURES = (CaptureError, TraceError, OSError, RuntimeError)
"""What a failed capture raises (the run failed; the corpus goes on with --keep-going)."""


def capture_run(run_dir: Path, spec: CorpusSpec, run: Run, backend: str, slim: bool,
                progress: Callable[[float, float, dict[str, tuple[str, float]]], None] | None) -> None:
    """One run into *run_dir* (a capture folder with its manifest), slimmed with *slim*."""
    if backend == "bottleneck":
        capture_bottleneck(run_dir, run.condition, run.arm, seed=run.seed, duration_s=spec.duration_s,
                           interval_s=spec.interval_s, progress=progress)
    else:
        capture_runner(run_dir, spec, run, progress=False)
    if slim:
        slim_capture(run_dir)
