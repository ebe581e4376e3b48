"""A replay corpus from matrix runs of the generated scenario space (issue 11).

``ccswitch testbed matrix run TRAIN_DIR --arms daemon-static-cubic,daemon-static-bbr,daemon-static-pcc``
runs every scenario of the *train* split three times: each time ccswitchd on every managed
client puts all of that client's flows on one CCA, while unmanaged clients (hosts the user
does not control) keep the CCA the scenario gives them.  This module turns those run folders
into captures the replay env (envs/replay.py) reads:

* one **condition** per managed bulk flow F of a scenario S (id ``S~F``): the link, the
  unmanaged competitors and the other managed flows;
* one **capture** per arm X: F is the agent, every other bulk flow a competitor (``local``
  when it is on F's client), web-like flows ``observed`` (not in the fairness terms, as in
  the matrix report); the arm is ``{"start": X, "switches": []}``.
* with ``self_play``, one more capture per run of the ``dqn`` arm (capture name
  ``selfplay-<policy sha8>--s<seed>``): every managed client ran ccswitchd with that policy,
  so the other managed flows are the policy itself, deciding on their own and disagreeing
  at times.  Its arm is ``{"start": CCA at the first decision, "switches": [what the daemon
  did, from the samples], "policy": {"sha256": ...}}``; the replay treats it as the
  policy's trace, never as a static counterfactual (envs/replay.py).  This is iterated
  self-play: capture with the shipped policy on every managed client, retrain, repeat.
* runs of the ``daemon-deviate-K-X`` arms (testbed/scenario/arms.py: the K-th managed
  client on X, every other managed client on CUBIC) become the **unilateral** conditions
  ``S~F.solo`` of the deviating client's bulk flows F: capture X from the deviation run,
  capture ``cubic`` from the population-on-CUBIC run (everyone on CUBIC is also "nobody
  deviates"; taken from this corpus or from *results*).  Its counterfactual is "the agent
  switches, the other daemons do not": the other end of the coordination problem from the
  population reading, and the states with managed clients on different CCAs.

So the env's counterfactual "the agent runs X from here" is "the managed population runs
X": the other managed flows moved with the agent because they ran the same daemon and
policy.  That is the self-play reading of the problem (every competitor that runs
ccswitchd decides like the agent; see docs/learning.md, "The space corpus"), and the
captures of unmanaged competitors are the other half.  The first bins of each run hold the
scenario's own CCA until the daemon's first decision; the env's warm-up skips them.

A run folder is read through its ``summary.json`` (flows, clients under the daemon,
t0), ``flows.parquet`` (flow ids) and ``samples.parquet`` (FlowSample rows); a missing or
failed run leaves its condition incomplete, and the replay loader skips conditions that
lack a CCA.  The conversion is idempotent: a capture that exists is kept.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from ccswitch.testbed.scenario.arms import DEVIATE, DEVIATION_BASE, deviation

from .trace import CORPUS_INDEX, MANIFEST, Capture, TraceError, read_samples, write_capture

__all__ = ["ARM_PREFIX", "SELF_PLAY_ARM", "MatrixCorpus", "corpus_from_matrix"]

ARM_PREFIX = "daemon-static-"
"""Matrix arms whose runs become captures: daemon-static-X is the population on X."""
SELF_PLAY_ARM = "dqn"
"""The matrix arm whose runs become self-play captures (ccswitchd with a policy file on every managed client)."""
SOLO_SUFFIX = ".solo"
"""Condition ids of the unilateral conditions end with it: S~F.solo."""
_PARAMS = re.compile(r"^# params = (\{.*\})\s*$", re.M)


@dataclass
class MatrixCorpus:
    """What :func:`corpus_from_matrix` wrote or found."""

    out: Path
    scenarios: int
    conditions: int
    captures: int
    written: int
    incomplete: list[str]
    """Conditions that miss a run of one of the arms (the replay skips them)."""
    self_play: int = 0
    """Self-play captures among *captures* (runs of the dqn arm)."""


def _scenario_params(run_dir: Path) -> dict[str, Any]:
    sc = run_dir / "scenario.toml"
    m = _PARAMS.search(sc.read_text()) if sc.is_file() else None
    return json.loads(m.group(1)) if m else {}


def _seed_of(run_dir: Path) -> int | None:
    """The seed of a run folder ``seed-N``; None for anything else (``seed-N.failed-M``: an attempt the
    matrix runner set aside)."""
    tail = run_dir.name.removeprefix("seed-")
    return int(tail) if tail.isdigit() else None


def _read_run(run_dir: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
        flows = pq.read_table(run_dir / "flows.parquet").to_pylist()
    except (OSError, ValueError) as e:
        raise TraceError(f"{run_dir}: not a finished testbed run ({e})") from None
    return summary, flows


def _capture_manifest(scenario: str, flow: str, cca: str, seed: int, summary: dict[str, Any],
                      flows: list[dict[str, Any]], params: dict[str, Any],
                      arm: dict[str, Any] | None = None) -> dict[str, Any]:
    meta = summary["meta"]
    kinds = {f["name"]: f.get("kind", "bulk") for f in meta["flows"]}
    client_of = {r["flow"]: int(r["client"]) for r in flows}
    managed = set(meta.get("daemon", {}).get("clients") or [])
    entries = []
    for r in flows:
        name = r["flow"]
        role = "agent" if name == flow else ("observed" if kinds.get(name) == "web" else "competitor")
        entries.append({"flow_id": int(r["flow_id"]), "name": name, "role": role, "cca": r["cca_start"],
                        "local": client_of[name] == client_of[flow], "client": client_of[name],
                        "managed": client_of[name] in managed, "kind": kinds.get(name, "bulk"),
                        "port": r["port"], "cport": r["cport"]})
    link = {k: params[k] for k in ("rate_mbit", "bottleneck", "rtt_base_ms", "loss", "queue", "wifi",
                                   "rate_anomaly") if k in params}
    link["emulator"] = meta.get("emulator") or "?"
    return {
        "id": f"{scenario}~{flow}--{cca}--s{seed}", "source": "runner",
        "interval_s": float(meta["sample_interval_s"]), "t0_epoch": float(meta["t0_epoch"]),
        "duration_s": float(meta["duration_s"]), "seed": seed,
        "condition": f"{scenario}~{flow}", "arm": arm or {"start": cca, "switches": []},
        "link": link,
        "competitors": [{"cca": e["cca"], "local": e["local"], "managed": e["managed"]}
                        for e in entries if e["role"] == "competitor"],
        "flows": entries,
        "notes": (f"matrix run {SELF_PLAY_ARM} of scenario {scenario}: every managed client's daemon ran "
                  f"the policy {arm['policy']['sha256'][:8]} (self-play); unmanaged clients kept their CCA"
                  if arm and "policy" in arm else
                  f"matrix run {ARM_PREFIX}{cca} of scenario {scenario}: every managed client's daemon "
                  f"put its flows on {cca}; unmanaged clients kept their CCA"),
        "space_params": params,
    }


def _space_of(results: Path) -> str | None:
    """'SPACE (generator vN), SPLIT split' from the matrix's scenario files, if they say."""
    try:
        folder = Path(json.loads((results / "matrix.json").read_text())["scenarios"])
        head = next(iter(sorted(folder.glob("*.toml")))).read_text().splitlines()[0]
    except (OSError, ValueError, KeyError, StopIteration):
        return None
    m = re.match(r"# Drawn from space '([^']+)' \(generator v(\d+), seed (\d+).*split (\w+)", head)
    return f"{m.group(1)} (generator v{m.group(2)}, seed {m.group(3)}), {m.group(4)} split" if m else None


def corpus_from_matrix(results: str | Path, out: str | Path, *, ccas: Sequence[str] = ("cubic", "bbr", "pcc"),
                       self_play: bool = False, extends: str | Path | None = None,
                       log: Callable[[str], None] = print) -> MatrixCorpus:
    """Write a capture per (managed bulk flow, daemon-static arm, seed) of *results* into *out*.

    *self_play*: also one per (managed bulk flow, run of the dqn arm): the policy's own trace.
    *extends*: *out* adds captures to the conditions of this corpus folder (its corpus.json
    says so, and envs/replay.py then reads them into the same conditions): the way to add
    self-play and deviation captures without changing the corpus a shipped policy was
    trained on."""
    root, dest = Path(results), Path(out)
    if not root.is_dir():
        raise TraceError(f"{root}: no such folder (give the --out folder of `ccswitch testbed matrix run`)")
    base_corpus = Path(extends) if extends is not None else None
    if base_corpus is not None and not (base_corpus / CORPUS_INDEX).is_file():
        raise TraceError(f"--extends {base_corpus}: not a corpus folder (no {CORPUS_INDEX})")
    dest.mkdir(parents=True, exist_ok=True)
    arms = {f"{ARM_PREFIX}{c}": c for c in ccas}
    if self_play:
        arms[SELF_PLAY_ARM] = None
    scenarios = sorted(p for p in root.iterdir()
                       if p.is_dir() and (any((p / a).is_dir() for a in arms) or any(p.glob(f"{DEVIATE}-*"))))
    sha = _policy_sha(root) if self_play else ""
    written = total = played = 0
    have: dict[str, set[str]] = {}
    """Conditions with static captures here, and their CCAs."""
    touched: set[str] = set()
    """Conditions with only self-play captures here (their static arms are in the corpus extended)."""
    for sdir in scenarios:
        for arm_dir, cca in arms.items():
            for run_dir in sorted((sdir / arm_dir).glob("seed-*")):
                seed = _seed_of(run_dir)
                if seed is None or not (run_dir / "summary.json").is_file():
                    continue  # unfinished, or an attempt set aside (seed-N.failed-M): matrix run resumes it
                summary, flows = _read_run(run_dir)
                managed = set(summary["meta"].get("daemon", {}).get("clients") or [])
                kinds = {f["name"]: f.get("kind", "bulk") for f in summary["meta"]["flows"]}
                samples = None
                params = _scenario_params(run_dir)
                for r in flows:
                    if int(r["client"]) not in managed or kinds.get(r["flow"]) == "web":
                        continue
                    cond = f"{sdir.name}~{r['flow']}"
                    name = f"{cca}--s{seed}" if cca else f"selfplay-{sha[:8]}--s{seed}"
                    if cca:
                        have.setdefault(cond, set()).add(cca)
                    else:
                        touched.add(cond)
                    cap = dest / sdir.name / r["flow"] / name
                    if (cap / MANIFEST).is_file():
                        total += 1
                        played += cca is None
                        continue
                    if samples is None:
                        samples = read_samples(run_dir / "samples.parquet")
                    arm = None if cca else _played_arm(samples, int(r["flow_id"]), summary, sha)
                    if arm is None and not cca:
                        log(f"{run_dir}: flow {r['flow']} has no samples; no self-play capture")
                        continue
                    total += 1
                    played += cca is None
                    write_capture(cap, samples, _capture_manifest(sdir.name, r["flow"], cca or arm["start"], seed,
                                                                  summary, flows, params, arm))
                    written += 1
    # after the population captures: a unilateral condition's "nobody deviates" capture is one of them
    bases = [dest] + ([base_corpus] if base_corpus is not None else [])
    solo_total, solo_written = (_deviation_captures(root, dest, bases, have, log) if DEVIATION_BASE in ccas
                                else (0, 0))
    total, written = total + solo_total, written + solo_written
    index = _write_index(dest, root, ccas, have, touched, base_corpus, sha if played else None)
    incomplete = index["incomplete"]
    on_disk = index["captures"]
    log(f"{dest}: {total} captures of {len(scenarios)} scenarios in {root} ({written} new"
        + (f", {played} self-play of policy {sha[:8]}" if self_play else "")
        + f"); the folder now holds {on_disk} captures of {len(index['conditions'])} conditions, "
        f"{len(incomplete)} miss an arm")
    return MatrixCorpus(dest, len(scenarios), len(index["conditions"]), total, written, incomplete, played)


def _write_index(dest: Path, root: Path, ccas: Sequence[str], have: dict[str, set[str]], touched: set[str],
                 base_corpus: Path | None, policy_sha: str | None) -> dict[str, Any]:
    """Write dest/corpus.json for what the folder holds now and return it.

    The folder may hold captures of earlier conversions (the static arms' runs, then a
    self-play or deviation pass of a later session): what its index said is merged in."""
    try:
        before = json.loads((dest / CORPUS_INDEX).read_text())
    except (OSError, ValueError):
        before = {}
    for cond in before.get("conditions", []):
        if cond in before.get("self_play_only", ()):
            touched.add(cond)
        else:
            have.setdefault(cond, set()).update(() if cond in before.get("incomplete", ()) else before.get("ccas", ()))
    touched -= set(have)
    sources = before.get("source_results", [])
    sources = [sources] if isinstance(sources, str) else list(sources)
    conditions = sorted({*have, *touched})
    index: dict[str, Any] = {
        "format": "ccswitch-corpus", "format_version": 1, "name": dest.name, "backend": "matrix",
        "source_results": sorted({*sources, str(root)}), "space": _space_of(root) or before.get("space"),
        "ccas": list(ccas), "scenarios": len({c.split("~")[0] for c in conditions}), "conditions": conditions,
        "incomplete": sorted(c for c, got in have.items() if set(ccas) - got),
        "captures": sum(1 for _ in dest.rglob(MANIFEST))}
    if base_corpus is not None:
        index["extends"] = json.loads((base_corpus / CORPUS_INDEX).read_text()).get("name", base_corpus.name)
    elif before.get("extends"):
        index["extends"] = before["extends"]
    played_total = sum(1 for _ in dest.rglob(f"selfplay-*/{MANIFEST}"))
    if played_total:
        policies = {*before.get("self_play", {}).get("policies", []), *([policy_sha] if policy_sha else [])}
        index["self_play"] = {"captures": played_total, "policies": sorted(policies)}
        index["self_play_only"] = sorted(touched)
    (dest / CORPUS_INDEX).write_text(json.dumps(index, indent=2) + "\n")
    return index


def _deviation_captures(root: Path, dest: Path, bases: Sequence[Path], have: dict[str, set[str]],
                        log: Callable[[str], None]) -> tuple[int, int]:
    """The unilateral conditions S~F.solo from the daemon-deviate runs of *root*: (captures, written).

    The "nobody deviates" capture is the population-on-CUBIC one, looked up in *bases* in order."""
    total = written = 0
    for run_dir in sorted(root.glob(f"*/{DEVIATE}-*/seed-*")):
        dev, seed = deviation(run_dir.parent.name), _seed_of(run_dir)
        if dev is None or seed is None or not (run_dir / "summary.json").is_file():
            continue  # not a deviation arm, unfinished or an attempt set aside: matrix run resumes it
        k, cca = dev
        scenario = run_dir.parent.parent.name
        summary, flows = _read_run(run_dir)
        kinds = {f["name"]: f.get("kind", "bulk") for f in summary["meta"]["flows"]}
        managed = set(summary["meta"].get("daemon", {}).get("clients") or [])
        clients = sorted({int(r["client"]) for r in flows if int(r["client"]) in managed
                          and kinds.get(r["flow"]) == "bulk"})  # as arms.managed_clients numbers them
        params = _scenario_params(run_dir)
        samples = None
        for r in flows:
            if k > len(clients) or int(r["client"]) != clients[k - 1] or kinds.get(r["flow"]) != "bulk":
                continue
            cond = f"{scenario}~{r['flow']}{SOLO_SUFFIX}"
            folder = dest / scenario / f"{r['flow']}{SOLO_SUFFIX}"
            arm = {"start": cca, "switches": [], "others": DEVIATION_BASE}
            # the deviation itself
            have.setdefault(cond, set()).add(cca)
            total += 1
            if not (folder / f"{cca}--s{seed}" / MANIFEST).is_file():
                man = _capture_manifest(scenario, r["flow"], cca, seed, summary, flows, params, arm)
                man.update(condition=cond, id=f"{cond}--{cca}--s{seed}",
                           notes=f"matrix run {run_dir.parent.name} of scenario {scenario}: client "
                                 f"{clients[k - 1]} on {cca}, every other managed client on {DEVIATION_BASE}; "
                                 f"unmanaged clients kept their CCA")
                samples = samples if samples is not None else read_samples(run_dir / "samples.parquet")
                write_capture(folder / f"{cca}--s{seed}", samples, man)
                written += 1
            # nobody deviates: the population-on-CUBIC capture of the same flow and seed
            base = next((b / scenario / r["flow"] / f"{DEVIATION_BASE}--s{seed}" for b in bases
                         if (b / scenario / r["flow"] / f"{DEVIATION_BASE}--s{seed}" / MANIFEST).is_file()), None)
            if base is None:
                continue
            have[cond].add(DEVIATION_BASE)
            total += 1
            if not (folder / f"{DEVIATION_BASE}--s{seed}" / MANIFEST).is_file():
                src = Capture.open(base)
                man = {key: v for key, v in src.manifest.items() if key not in ("files", "created", "tools")}
                man.update(condition=cond, id=f"{cond}--{DEVIATION_BASE}--s{seed}",
                           arm={"start": DEVIATION_BASE, "switches": [], "others": DEVIATION_BASE})
                write_capture(folder / f"{DEVIATION_BASE}--s{seed}", src.samples(), man)
                written += 1
    if total:
        log(f"{dest}: {total} unilateral captures ({written} new) from the {DEVIATE} runs of {root}")
    return total, written


def _policy_sha(results: Path) -> str:
    """sha256 of the policy the dqn arm ran: recorded by the matrix runner, else the file it names now."""
    try:
        meta = json.loads((results / "matrix.json").read_text())
    except (OSError, ValueError):
        meta = {}
    if meta.get("policy_sha256"):
        return str(meta["policy_sha256"])
    from ccswitch.models.policy import DEFAULT_POLICY

    path = Path(meta["policy_file"]) if meta.get("policy_file") else DEFAULT_POLICY
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as e:
        raise TraceError(f"{results}/matrix.json: the dqn arm's policy {path} cannot be read ({e.strerror}); "
                         f"self-play captures are named by it") from None


def _played_arm(samples: Any, flow_id: int, summary: dict[str, Any], sha: str) -> dict[str, Any] | None:
    """The agent's arm in a self-play run: its CCA at the first sample and every change after, as
    the daemon made them (seconds from the run's t0)."""
    t0 = float(summary["meta"]["t0_epoch"])
    rows = sorted((float(ts), c) for f, ts, c in zip(samples.column("flow_id").to_pylist(),
                                                      samples.column("ts_s").to_pylist(),
                                                      samples.column("cca").to_pylist(), strict=True)
                  if f == flow_id and c)
    if not rows:
        return None
    switches = [{"at_s": round(ts - t0, 3), "cca": c, "inherit": None}
                for (_, prev), (ts, c) in itertools.pairwise(rows) if c != prev]
    return {"start": rows[0][1], "switches": switches, "policy": {"sha256": sha}}
