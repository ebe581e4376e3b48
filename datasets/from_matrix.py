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

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from .trace import CORPUS_INDEX, MANIFEST, TraceError, read_samples, write_capture

__all__ = ["ARM_PREFIX", "MatrixCorpus", "corpus_from_matrix"]

ARM_PREFIX = "daemon-static-"
"""Matrix arms whose runs become captures: daemon-static-X is the population on X."""
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


def _scenario_params(run_dir: Path) -> dict[str, Any]:
    sc = run_dir / "scenario.toml"
    m = _PARAMS.search(sc.read_text()) if sc.is_file() else None
    return json.loads(m.group(1)) if m else {}


def _read_run(run_dir: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
        flows = pq.read_table(run_dir / "flows.parquet").to_pylist()
    except (OSError, ValueError) as e:
        raise TraceError(f"{run_dir}: not a finished testbed run ({e})") from None
    return summary, flows


def _capture_manifest(scenario: str, flow: str, cca: str, seed: int, summary: dict[str, Any],
                      flows: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
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
        "condition": f"{scenario}~{flow}", "arm": {"start": cca, "switches": []},
        "link": link,
        "competitors": [{"cca": e["cca"], "local": e["local"], "managed": e["managed"]}
                        for e in entries if e["role"] == "competitor"],
        "flows": entries,
        "notes": (f"matrix run {ARM_PREFIX}{cca} of scenario {scenario}: every managed client's daemon "
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
                       log: Callable[[str], None] = print) -> MatrixCorpus:
    """Write a capture per (managed bulk flow, daemon-static arm, seed) of *results* into *out*."""
    root, dest = Path(results), Path(out)
    if not root.is_dir():
        raise TraceError(f"{root}: no such folder (give the --out folder of `ccswitch testbed matrix run`)")
    dest.mkdir(parents=True, exist_ok=True)
    scenarios = sorted(p for p in root.iterdir() if p.is_dir() and any((p / f"{ARM_PREFIX}{c}").is_dir()
                                                                         for c in ccas))
    written = total = 0
    have: dict[str, set[str]] = {}
    for sdir in scenarios:
        for cca in ccas:
            for run_dir in sorted((sdir / f"{ARM_PREFIX}{cca}").glob("seed-*")):
                if not (run_dir / "summary.json").is_file():
                    continue  # unfinished or failed: matrix run resumes it
                seed = int(run_dir.name.removeprefix("seed-"))
                summary, flows = _read_run(run_dir)
                managed = set(summary["meta"].get("daemon", {}).get("clients") or [])
                kinds = {f["name"]: f.get("kind", "bulk") for f in summary["meta"]["flows"]}
                samples = None
                params = _scenario_params(run_dir)
                for r in flows:
                    if int(r["client"]) not in managed or kinds.get(r["flow"]) == "web":
                        continue
                    cond = f"{sdir.name}~{r['flow']}"
                    have.setdefault(cond, set()).add(cca)
                    cap = dest / sdir.name / r["flow"] / f"{cca}--s{seed}"
                    total += 1
                    if (cap / MANIFEST).is_file():
                        continue
                    if samples is None:
                        samples = read_samples(run_dir / "samples.parquet")
                    write_capture(cap, samples, _capture_manifest(sdir.name, r["flow"], cca, seed, summary,
                                                                  flows, params))
                    written += 1
    incomplete = sorted(c for c, got in have.items() if set(ccas) - got)
    space = _space_of(root)
    index = {"format": "ccswitch-corpus", "format_version": 1, "name": dest.name, "backend": "matrix",
             "source_results": str(root), "space": space, "ccas": list(ccas), "scenarios": len(scenarios),
             "conditions": sorted(have), "incomplete": incomplete, "captures": total}
    (dest / CORPUS_INDEX).write_text(json.dumps(index, indent=2) + "\n")
    log(f"{dest}: {total} captures of {len(have)} conditions from {len(scenarios)} scenarios "
        f"({written} new; {len(incomplete)} conditions miss an arm)")
    return MatrixCorpus(dest, len(scenarios), len(have), total, written, incomplete)
