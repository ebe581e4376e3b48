"""The corpus: a matrix of link conditions x agent arms, captured on the testbed.

A corpus spec (TOML; ``datasets/specs/``) names the matrix::

    name = "sample"
    backend = "bottleneck"      # "bottleneck": routed tbf (datasets/capture.py), rate + queue only;
                                # "runner": the testbed runner (testbed/runs/runner.py), which adds
                                # delay, loss and WiFi through linkemu
    duration_s = 24             # per run
    interval_s = 1.0            # sampling interval = the agent's decision interval
    seeds = [1]                 # repetitions
    ccas = ["cubic", "bbr", "pcc"]   # the agent's choices: one static arm each ...
    switch_at_s = [12]          # ... plus one arm per ordered pair (a -> b) per time here
    inherit = "limited"

    [matrix]                    # cross product of the lists
    rate_mbit = [10, 40]
    queue_ms = [5, 50]
    competitors = [[], ["cubic"], ["bbr"]]    # CCAs of competing flows on the agent's host
    remote_competitors = [[]]   # runner: competing flows on other clients (not visible locally)
    delay_ms = [0]              # runner + linkemu
    loss = [0]                  # runner + linkemu
    wifi = [""]                 # runner + linkemu: a WIFI_PRESETS name

    [[conditions]]              # optional extra blocks (same keys; a scalar or a list each,
                                # crossed like the matrix)

So for every condition and time the trace of each CCA exists (the static
arms), and the switch arms record what a switch does.  `build_corpus` runs
what is missing (a capture with a manifest counts as done, so an interrupted
build resumes), shows progress, and keeps ``corpus.json`` (the spec and an
index) at the top of the output folder.  With ``ray_address`` each run is a
Ray task on a cluster node that captures into a node-local folder and sends it
back packed; it lands where a local capture writes it (docs/cluster.md).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import itertools
import json
import math
import shutil
import time
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .capture import AGENT, Arm, CaptureError, Condition, Switch, capture_bottleneck
from .trace import CORPUS_INDEX, MANIFEST, Capture, TraceError, read_samples, write_capture

__all__ = ["BACKENDS", "WIFI_PRESETS", "CorpusSpec", "Run", "SpecError", "build_corpus", "load_spec",
           "parse_spec"]

BACKENDS = ("bottleneck", "runner")
MAX_COMPETITORS = 4
WIFI_PRESETS: dict[str, dict[str, Any]] = {
    # linkemu's WiFi model (testbed/linkemu/README.md): the station entry of every client
    # and the [link.wifi] keys of the scenario.
    "ax": {"station": {"phy_rate_mbit": 300}, "wifi": {}},
    "ax-jitter": {"station": {"phy_rate_mbit": 300},
                  "wifi": {"access_delay_us": {"extra": {"dist": "exponential", "mean_us": 500}}}},
    # paper 002's WiFi link as the end-to-end scenarios emulate it (testbed/scenarios/default.toml)
    "ax-light": {"station": {"phy_rate_mbit": 300},
                 "wifi": {"access_delay_us": {"extra": {"dist": "exponential", "mean_us": 100}}}},
    "n-slow": {"station": {"phy_rate_mbit": 65},
               "wifi": {"access_delay_us": {"extra": {"dist": "exponential", "mean_us": 200}}}},
}
_MATRIX_KEYS = ("rate_mbit", "queue_ms", "competitors", "remote_competitors", "delay_ms", "loss", "wifi")


class SpecError(ValueError):
    """A corpus spec is invalid; the message names the file and the key."""


@dataclass(frozen=True)
class Run:
    condition: Condition
    arm: Arm
    seed: int

    @property
    def rel_dir(self) -> str:
        return f"{self.condition.id}/{self.arm.id}--s{self.seed}"


@dataclass(frozen=True)
class CorpusSpec:
    name: str
    backend: str
    duration_s: float
    interval_s: float
    seeds: tuple[int, ...]
    ccas: tuple[str, ...]
    switch_at_s: tuple[float, ...]
    inherit: str
    conditions: tuple[Condition, ...]
    description: str = ""
    text: str = ""
    source: str = ""
    runs: tuple[Run, ...] = field(default=(), repr=False)

    def arms(self) -> list[Arm]:
        arms = [Arm(c) for c in self.ccas]
        for t in self.switch_at_s:
            arms += [Arm(a, (Switch(t, b, self.inherit),)) for a in self.ccas for b in self.ccas if a != b]
        return arms


def _err(where: str, key: str, msg: str) -> SpecError:
    return SpecError(f"{where}: {key}: {msg}")


def _num_list(v: Any, where: str, key: str, lo: float, hi: float) -> list[float]:
    if not isinstance(v, list) or not v:
        raise _err(where, key, "must be a non-empty array of numbers")
    out = []
    for x in v:
        if isinstance(x, bool) or not isinstance(x, int | float) or not lo <= x <= hi:
            raise _err(where, key, f"values must be numbers in [{lo:g}, {hi:g}], got {x!r}")
        out.append(float(x))
    return out


def _cca_lists(v: Any, where: str, key: str, ccas: Sequence[str]) -> list[tuple[str, ...]]:
    if not isinstance(v, list) or not v or not all(isinstance(x, list) for x in v):
        raise _err(where, key, 'must be an array of arrays of CCA names, e.g. [[], ["cubic"], ["bbr", "bbr"]]')
    out = []
    for lst in v:
        if len(lst) > MAX_COMPETITORS:
            raise _err(where, key, f"at most {MAX_COMPETITORS} competing flows per condition, got {len(lst)}")
        for c in lst:
            if c not in ccas:
                raise _err(where, key, f"unknown congestion control {c!r} (known: {', '.join(ccas)})")
        out.append(tuple(lst))
    return out


def _condition_lists(t: dict[str, Any], where: str, prefix: str, known_ccas: Sequence[str],
                     scalars: bool) -> dict[str, list[Any]]:
    unknown = sorted(set(t) - set(_MATRIX_KEYS))
    if unknown:
        raise _err(where, f"{prefix}{unknown[0]}", f"unknown key (known: {', '.join(_MATRIX_KEYS)})")

    def lst(key: str) -> Any:
        v = t[key]
        if not scalars:
            return v
        if key in ("competitors", "remote_competitors"):  # one set ["a", "b"] or several [["a"], ["b"]]
            return v if isinstance(v, list) and v and all(isinstance(x, list) for x in v) else [v]
        return v if isinstance(v, list) else [v]

    vals: dict[str, list[Any]] = {}
    if "rate_mbit" not in t:
        raise _err(where, f"{prefix}rate_mbit", "missing")
    vals["rate_mbit"] = _num_list(lst("rate_mbit"), where, prefix + "rate_mbit", 0.1, 10_000)
    vals["queue_ms"] = _num_list(lst("queue_ms"), where, prefix + "queue_ms", 0.1, 10_000) \
        if "queue_ms" in t else [20.0]
    vals["delay_ms"] = _num_list(lst("delay_ms"), where, prefix + "delay_ms", 0, 10_000) if "delay_ms" in t else [0.0]
    vals["loss"] = _num_list(lst("loss"), where, prefix + "loss", 0, 0.5) if "loss" in t else [0.0]
    for key in ("competitors", "remote_competitors"):
        vals[key] = _cca_lists(lst(key), where, prefix + key, known_ccas) if key in t else [()]
    if "wifi" in t:
        w = lst("wifi")
        if not isinstance(w, list) or not all(isinstance(x, str) and (x == "" or x in WIFI_PRESETS) for x in w):
            raise _err(where, prefix + "wifi", f"values must be \"\" or one of {', '.join(WIFI_PRESETS)}")
        vals["wifi"] = w
    else:
        vals["wifi"] = [""]
    return vals


def parse_spec(text: str, where: str = "spec") -> CorpusSpec:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"{where}: invalid TOML: {e}") from None
    known = ("name", "description", "backend", "duration_s", "interval_s", "seeds", "ccas", "switch_at_s",
             "inherit", "matrix", "conditions")
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise _err(where, unknown[0], f"unknown key (known: {', '.join(known)})")
    name = data.get("name", Path(where).stem)
    if not isinstance(name, str) or not name:
        raise _err(where, "name", "must be a non-empty string")
    backend = data.get("backend", "bottleneck")
    if backend not in BACKENDS:
        raise _err(where, "backend", f"must be one of {', '.join(BACKENDS)}, got {backend!r}")
    duration = data.get("duration_s", 30)
    if isinstance(duration, bool) or not isinstance(duration, int | float) or not 4 <= duration <= 3600:
        raise _err(where, "duration_s", f"must be a number in [4, 3600], got {duration!r}")
    interval = data.get("interval_s", 1.0)
    if isinstance(interval, bool) or not isinstance(interval, int | float) or not 0.1 <= interval <= duration / 4:
        raise _err(where, "interval_s", f"must be a number in [0.1, duration_s/4], got {interval!r}")
    ccas = data.get("ccas", ["cubic", "bbr", "pcc"])
    if not isinstance(ccas, list) or len(ccas) < 2 or not all(isinstance(c, str) and c for c in ccas) \
            or len(set(ccas)) != len(ccas):
        raise _err(where, "ccas", "must be an array of at least two distinct CCA names")
    seeds = data.get("seeds", [1])
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) and not isinstance(s, bool)
                                                          and s >= 0 for s in seeds):
        raise _err(where, "seeds", "must be a non-empty array of non-negative integers")
    switch_at = data.get("switch_at_s", [])
    if not isinstance(switch_at, list) or not all(isinstance(x, int | float) and not isinstance(x, bool)
                                                  and interval <= x <= duration - interval for x in switch_at):
        raise _err(where, "switch_at_s", f"must be an array of times in [interval_s, duration_s - interval_s], "
                                         f"got {switch_at!r}")
    inherit = data.get("inherit", "limited")
    if inherit not in ("limited", "full"):
        raise _err(where, "inherit", f"must be \"limited\" or \"full\", got {inherit!r}")
    known_ccas = sorted(set(ccas) | {"cubic", "bbr", "pcc", "reno"})
    conds: list[Condition] = []
    blocks: list[tuple[str, dict[str, Any], bool]] = []
    if "matrix" in data:
        if not isinstance(data["matrix"], dict):
            raise _err(where, "matrix", "must be a table")
        blocks.append(("matrix.", data["matrix"], False))
    extra = data.get("conditions", [])
    if not isinstance(extra, list):
        raise _err(where, "conditions", "must be an array of tables ([[conditions]])")
    blocks += [(f"conditions[{i}].", c, True) for i, c in enumerate(extra)]
    if not blocks:
        raise _err(where, "matrix", "missing (give [matrix] and/or [[conditions]])")
    for prefix, t, scalars in blocks:
        if not isinstance(t, dict):
            raise _err(where, prefix.rstrip("."), "must be a table")
        vals = _condition_lists(t, where, prefix, known_ccas, scalars)
        for combo in itertools.product(*(vals[k] for k in _MATRIX_KEYS)):
            cond = Condition(**dict(zip(_MATRIX_KEYS, combo, strict=True)))
            if cond not in conds:
                conds.append(cond)
    if backend == "bottleneck":
        for c in conds:
            for what in ("delay_ms", "loss", "wifi", "remote_competitors"):
                if getattr(c, what):
                    raise _err(where, f"matrix.{what}", f"condition {c.id} needs backend = \"runner\" "
                                                        "(the tbf bottleneck has rate and queue only)")
    spec = CorpusSpec(name=name, backend=backend, duration_s=float(duration), interval_s=float(interval),
                      seeds=tuple(seeds), ccas=tuple(ccas), switch_at_s=tuple(float(x) for x in switch_at),
                      inherit=inherit, conditions=tuple(conds), description=str(data.get("description", "")),
                      text=text, source=where)
    runs = tuple(Run(c, a, s) for c in spec.conditions for a in spec.arms() for s in spec.seeds)
    return replace(spec, runs=runs)


def load_spec(path: str | Path) -> CorpusSpec:
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise SpecError(f"{p}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError(f"{p}: cannot read: {e}") from None
    return parse_spec(text, str(p))


# ---------------------------------------------------------------- runner ---


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


# ----------------------------------------------------------------- build ---


def _done(run_dir: Path) -> bool:
    if not (run_dir / MANIFEST).is_file():
        return False
    try:
        Capture.open(run_dir).validate()
    except TraceError:
        return False
    return True


def _write_index(out: Path, spec: CorpusSpec) -> dict[str, Any]:
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


def _slim(run_dir: Path) -> None:
    for p in sorted(run_dir.iterdir()):
        if p.name not in SLIM_KEEP:
            shutil.rmtree(p) if p.is_dir() else p.unlink()


CAPTURE_FAILURES = (CaptureError, TraceError, OSError, RuntimeError)
"""What a failed capture raises (the run failed; the corpus goes on with --keep-going)."""


def _capture(run_dir: Path, spec: CorpusSpec, run: Run, backend: str, slim: bool,
             progress: Callable[[float, float, dict[str, tuple[str, float]]], None] | None) -> None:
    """One run into *run_dir* (a capture folder with its manifest), slimmed with *slim*."""
    if backend == "bottleneck":
        capture_bottleneck(run_dir, run.condition, run.arm, seed=run.seed, duration_s=spec.duration_s,
                           interval_s=spec.interval_s, progress=progress)
    else:
        capture_runner(run_dir, spec, run, progress=False)
    if slim:
        _slim(run_dir)


def build_corpus(spec: CorpusSpec, out_dir: str | Path, *, backend: str | None = None,
                 only: Callable[[Run], bool] | None = None, keep_going: bool = False, slim: bool = False,
                 progress: bool = True, log: Callable[[str], None] = print, ray_address: str | None = None,
                 runs_per_node: int | None = None) -> dict[str, Any]:
    """Capture every run of *spec* that *out_dir* does not hold yet; returns the corpus index.

    *slim* keeps only the manifest, the samples and the scenario of each capture.
    *ray_address* ("auto" or a Ray address): each run is a Ray task on a cluster node
    (:func:`_capture_on_ray`), *runs_per_node* at once per node; the folder is the same.
    """
    backend = backend or spec.backend
    if backend not in BACKENDS:
        raise SpecError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if backend == "runner" and (why := runner_available()):
        raise CaptureError(why)
    if ray_address is not None:  # before anything is written: a wrong address leaves no corpus folder
        from ccswitch.testbed.runs.raypool import check_address

        check_address(ray_address, CaptureError)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    runs = [r for r in spec.runs if only is None or only(r)]
    todo = [r for r in runs if not _done(out / r.rel_dir)]
    log(f"corpus {spec.name}: {len(spec.conditions)} conditions x {len(spec.arms())} arms x {len(spec.seeds)} "
        f"seeds = {len(spec.runs)} runs; {len(runs) - len(todo)} done, {len(todo)} to capture "
        f"(~{len(todo) * (spec.duration_s + 3) / 60:.0f} min, backend {backend}"
        + (f", on the Ray cluster {ray_address})" if ray_address is not None and todo else ")"))
    failures: list[str] = []
    t_start = time.monotonic()
    bar = _Bar(len(todo), enabled=progress)
    with bar:
        if ray_address is not None and todo:
            _capture_on_ray(todo, spec, out, backend, slim, keep_going, ray_address, runs_per_node, bar, log,
                            failures)
        for i, run in enumerate(todo if ray_address is None else ()):
            run_dir = out / run.rel_dir
            if run_dir.exists():
                shutil.rmtree(run_dir)  # an interrupted attempt
            bar.start_run(i, run, spec.duration_s)
            try:
                _capture(run_dir, spec, run, backend, slim, bar.update)
            except CAPTURE_FAILURES as e:
                failures.append(f"{run.rel_dir}: {e}")
                log(f"corpus {spec.name}: FAILED {run.rel_dir}: {e}")
                shutil.rmtree(run_dir, ignore_errors=True)
                if not keep_going:
                    _write_index(out, spec)
                    raise
            else:
                if not bar.enabled:
                    log(f"corpus {spec.name}: [{i + 1}/{len(todo)}] {run.rel_dir} done "
                        f"({(time.monotonic() - t_start) / 60:.1f} min)")
            _write_index(out, spec)
    index = _write_index(out, spec)
    log(f"corpus {spec.name}: {index['runs_done']}/{index['runs_planned']} runs in {out} "
        f"({(time.monotonic() - t_start) / 60:.1f} min this time" + (f", {len(failures)} failed)" if failures else ")"))
    return index


# ------------------------------------------------------------------- ray ---


def capture_remote(spec_text: str, source: str, rel_dir: str, backend: str, slim: bool) -> dict[str, Any]:
    """The body of one Ray task (on its node): the run captured into a node-local folder, packed.

    The capture is a child process (``python -m ccswitch.datasets.corpus one``), not the
    Ray worker itself: the namespace set-up forks (pyroute2), and a fork of a Ray worker
    that receives a SIGTERM takes the worker down with it.  A cancelled task (Ctrl-C, a
    failed run without --keep-going) stops the child's process group like a stopped
    matrix run, and namespaces whose owner died are removed (never those of live runs)."""
    import socket
    import subprocess
    import sys
    import tempfile

    from ccswitch.testbed.runs.matrix import _cleanup_namespaces, _kill, _last_error
    from ccswitch.testbed.runs.raypool import pack

    t0 = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="ccswitch-corpus-"))
    result: dict[str, Any] = {"ok": False, "error": "", "node": socket.gethostname(), "tar": b""}
    try:
        (tmp / "spec.toml").write_text(spec_text)
        argv = [sys.executable, "-m", "ccswitch.datasets.corpus", "one", str(tmp / "spec.toml"), rel_dir, str(tmp),
                "--source", source, "--backend", backend, *(["--slim"] if slim else [])]
        log = tmp / "capture.log"
        with log.open("w") as fh:
            proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
            try:
                while True:
                    try:
                        rc = proc.wait(timeout=1.0)
                        break
                    except subprocess.TimeoutExpired:
                        continue
            except BaseException:  # the task was cancelled
                _kill(proc)
                raise
            finally:
                _cleanup_namespaces()
        if rc == 0 and _done(tmp / rel_dir):
            result.update(ok=True, tar=pack(tmp, [rel_dir]))
        else:
            result["error"] = f"exit {rc}: {_last_error(log)}"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result["wall_s"] = time.monotonic() - t0
    return result


def capture_one(spec_file: Path, rel_dir: str, root: Path, source: str, backend: str, slim: bool) -> None:
    """The child of :func:`capture_remote`: run *rel_dir* of the spec into ROOT/*rel_dir*."""
    from ccswitch.dataplane import install_signal_handlers

    install_signal_handlers()
    spec = parse_spec(spec_file.read_text(), source)
    run = next((r for r in spec.runs if r.rel_dir == rel_dir), None)
    if run is None:
        raise SpecError(f"{source}: no run {rel_dir}")
    _capture(root / rel_dir, spec, run, backend, slim, None)


def main(argv: Sequence[str] | None = None) -> None:
    """The child process of one Ray task (``one``); the user-facing CLI is ``ccswitch dataset corpus``."""
    import argparse
    import sys

    ap = argparse.ArgumentParser(prog="python -m ccswitch.datasets.corpus")
    sub = ap.add_subparsers(dest="cmd", required=True)
    one = sub.add_parser("one", help="one run of a corpus (what `dataset corpus --ray` starts per task)")
    one.add_argument("spec", type=Path)
    one.add_argument("rel_dir")
    one.add_argument("root", type=Path)
    one.add_argument("--source", default="")
    one.add_argument("--backend", choices=BACKENDS, required=True)
    one.add_argument("--slim", action="store_true")
    args = ap.parse_args(argv)
    try:
        capture_one(args.spec, args.rel_dir, args.root, args.source or str(args.spec), args.backend, args.slim)
    except Exception as e:  # the task reads the last error line of the log
        print(f"corpus run: error: {type(e).__name__}: {' '.join(str(e).split())}", file=sys.stderr)
        sys.exit(1)


def _capture_on_ray(todo: Sequence[Run], spec: CorpusSpec, out: Path, backend: str, slim: bool, keep_going: bool,
                    address: str, runs_per_node: int | None, bar: _Bar, log: Callable[[str], None],
                    failures: list[str]) -> None:
    """*todo* as Ray tasks; each capture comes back packed and lands at OUT/CONDITION/ARM--sSEED."""
    from ccswitch.testbed.runs.raypool import run_tasks, unpack

    t_start = time.monotonic()
    done = 0

    def finish(run: Run, r: dict[str, Any] | None, why: str) -> None:
        nonlocal done
        done += 1
        run_dir = out / run.rel_dir
        if r is not None and r["ok"]:
            try:
                if run_dir.exists():
                    shutil.rmtree(run_dir)  # an interrupted attempt
                unpack(r["tar"], out, f"capture archive of {run.rel_dir}", under=run.rel_dir, error=CaptureError)
                Capture.open(run_dir).validate()
            except (CaptureError, TraceError, OSError) as e:
                why = f"the capture from node {r['node']} did not unpack: {' '.join(str(e).split())}"
        elif r is not None:
            why = f"{r['error']} (node {r['node']})"
        if why:
            failures.append(f"{run.rel_dir}: {why}")
            log(f"corpus {spec.name}: FAILED {run.rel_dir}: {why}")
            shutil.rmtree(run_dir, ignore_errors=True)
            if not keep_going:
                _write_index(out, spec)
                raise CaptureError(f"{run.rel_dir}: {why}")
        elapsed = time.monotonic() - t_start
        eta = elapsed / done * (len(todo) - done)
        eta_text = f"ETA {int(eta // 3600)}:{int(eta % 3600 // 60):02d}:{int(eta % 60):02d}"
        bar.finish_run(done, run, eta_text, ok=not why)
        if not why and not bar.enabled:
            log(f"corpus {spec.name}: [{done}/{len(todo)}] {run.rel_dir} done on {r['node'] if r else '?'} "
                f"({elapsed / 60:.1f} min, {eta_text})")
        _write_index(out, spec)

    bar.start_ray(len(todo))
    run_tasks(capture_remote, todo, lambda run: (spec.text, spec.source, run.rel_dir, backend, slim), address=address,
              runs_per_node=runs_per_node, on_done=finish, error=CaptureError, force_cancel=False,
              cancel_wait_s=60.0)


class _Bar:
    """rich progress: one bar over the runs, the current run's clock and flow rates in its text."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.enabled = enabled and total > 0
        self.total = total
        self._p: Any = None
        self._task: Any = None
        self._label = ""
        self._i = 0

    def __enter__(self) -> _Bar:
        if self.enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._p = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                               TimeRemainingColumn(), transient=False)
            self._p.__enter__()
            self._task = self._p.add_task("corpus", total=self.total)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._p is not None:
            self._p.__exit__(None, None, None)

    def start_run(self, i: int, run: Run, duration_s: float) -> None:
        self._i = i
        self._label = f"{run.condition.id} {run.arm.id} s{run.seed}"
        if self._p is not None:
            self._p.update(self._task, completed=i, description=self._label)

    def start_ray(self, total: int) -> None:
        if self._p is not None:
            self._p.update(self._task, completed=0, description=f"{total} runs on the Ray cluster")

    def finish_run(self, done: int, run: Run, eta: str, ok: bool = True) -> None:
        """Ray: *done* runs have come back, the last one *run*; *eta* from the mean time per run so far
        (the ETA column needs two completions, and runs come back in bursts)."""
        if self._p is not None:
            self._p.update(self._task, completed=done, description=f"{run.condition.id} {run.arm.id} s{run.seed} "
                                                                   f"{'back' if ok else 'FAILED'}, {eta}")

    def update(self, elapsed: float, total: float, latest: dict[str, tuple[str, float]]) -> None:
        if self._p is None:
            return
        rates = " ".join(f"{n}:{c} {b / 1e6:.1f}" for n, (c, b) in sorted(latest.items()))
        self._p.update(self._task, completed=self._i + min(elapsed / total, 1.0),
                       description=f"{self._label} [{elapsed:4.0f}/{total:g} s] {rates}")


if __name__ == "__main__":
    main()
