"""Coordination between daemons: do the managed clients of a run end up on the same CCA?

The daemons on different clients act on one bottleneck without talking (issue 11).  The
policy is trained on the population reading of the corpus (datasets/from_matrix.py: every
managed client on the same CCA), so what matters end to end is whether they agree and how
often a flow goes back to a CCA it left (two daemons chasing each other).  Per run, over
the last half (the metrics' window):

    agreement   share of the seconds in which every active managed bulk flow ran the same
                CCA (runs with one managed bulk flow: 1 by definition, and not counted in
                the means below)
    switches    CCA changes of managed bulk flows, per flow
    returns     changes back to the CCA the flow left at its previous change (A -> B -> A)

from the run's samples.parquet (the CCA of every flow every second), flows.parquet and
summary.json (which clients ran ccswitchd, which flows are web-like).
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

__all__ = ["Coordination", "coordination", "summarise_arm"]


@dataclass(frozen=True)
class Coordination:
    managed_flows: int
    agreement: float
    switches_per_flow: float
    returns: int


def coordination(run_dir: Path) -> Coordination | None:
    """The run's coordination numbers; None if it is unfinished or has no daemon."""
    try:
        meta = json.loads((run_dir / "summary.json").read_text())["meta"]
        flows = pq.read_table(run_dir / "flows.parquet").to_pylist()
        samples = pq.read_table(run_dir / "samples.parquet", columns=["ts_s", "flow_id", "cca"]).to_pylist()
    except (OSError, ValueError, KeyError):
        return None
    clients = set((meta.get("daemon") or {}).get("clients") or [])
    if not clients:
        return None
    web = {f["name"] for f in meta["flows"] if f.get("kind") == "web"}
    managed = {int(r["flow_id"]) for r in flows if int(r["client"]) in clients and r["flow"] not in web}
    t0, dur = float(meta["t0_epoch"]), float(meta["duration_s"])
    per_second: dict[int, dict[int, str]] = {}
    changes: dict[int, list[str]] = {f: [] for f in managed}
    for r in sorted(samples, key=lambda r: r["ts_s"]):
        f = int(r["flow_id"])
        if f not in managed or r["cca"] is None:
            continue
        t = float(r["ts_s"]) - t0
        if t >= dur / 2:
            per_second.setdefault(int(t), {})[f] = r["cca"]
            seq = changes[f]
            if not seq or seq[-1] != r["cca"]:
                seq.append(r["cca"])
        else:
            changes[f][:] = [r["cca"]]  # the CCA at the start of the window
    seconds = [s for s in per_second.values() if s]
    agree = (sum(len(set(s.values())) == 1 for s in seconds) / len(seconds)) if seconds else math.nan
    n_sw = sum(max(0, len(seq) - 1) for seq in changes.values())
    returns = sum(1 for seq in changes.values() for i in range(2, len(seq)) if seq[i] == seq[i - 2])
    return Coordination(len(managed), agree, n_sw / max(1, len(managed)), returns)


def summarise_arm(results: Path, arm: str, scenarios: set[str] | None = None) -> dict[str, float]:
    """Means over the arm's runs with two or more managed bulk flows."""
    rows = []
    for summary in sorted(results.glob(f"*/{arm}/seed-*/summary.json")):
        run = summary.parent
        if scenarios is not None and run.parent.parent.name not in scenarios:
            continue
        c = coordination(run)
        if c is not None and c.managed_flows >= 2 and not math.isnan(c.agreement):
            rows.append(c)
    if not rows:
        return {"runs": 0}
    return {"runs": len(rows), "agreement": statistics.fmean(c.agreement for c in rows),
            "all_agree_runs": sum(c.agreement >= 0.999 for c in rows) / len(rows),
            "switches_per_flow": statistics.fmean(c.switches_per_flow for c in rows),
            "returns_per_run": statistics.fmean(c.returns for c in rows)}
