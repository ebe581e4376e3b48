"""One run folder's report: its metrics, tables and plots (see runs/runner.py for the folder's layout).

:func:`report_run` reads the folder (``run_folder``), computes the metrics
(``run_metrics``: per flow and phase in the layout of paper 002's Table 5,
fairness per phase, issue 5's last-half targets), and writes ``table.md``
(the tables), ``table.csv`` (per flow and phase), ``fairness.csv`` (per
phase; ``run_tables``) and ``plots/{throughput,rtt,jitter,loss}.png`` (over
time with switch markers, and before/after box plots, like paper 002 figures
5-16; ``run_plots``); the metrics also go into ``summary.json`` under
``"metrics"``.  :func:`report_dir` does so for every run under a folder, with
a mean ± sd table over them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# Re-exported: this module's public names before the split (runs/run_monitors.py imports rebin_samples from here).
from .run_folder import Phase, RunData, json_default, load_run, merge_runs, rebin_samples, run_dirs
from .run_metrics import METRICS, fairness_rows, flow_phase_rows, last_half
from .run_plots import plot_run
from .run_tables import aggregate_markdown, table_markdown, write_csv

__all__ = ["METRICS", "Phase", "RunData", "load_run", "merge_runs", "rebin_samples", "report_dir", "report_run"]


def report_run(run_dir: Path, *, plots: bool = True) -> dict[str, Any]:
    """Compute the metrics of one run folder and write its tables (and plots)."""
    run = load_run(run_dir)
    rows = flow_phase_rows(run)
    fair = fairness_rows(run, rows)
    lh = last_half(run)
    (run_dir / "table.md").write_text(table_markdown(run, rows, fair, lh))
    write_csv(run_dir / "table.csv", rows)
    write_csv(run_dir / "fairness.csv", fair)
    if plots:
        plot_run(run, run_dir / "plots")
    metrics = {"per_flow_phase": rows, "fairness": fair, "last_half": lh}
    summary = dict(run.summary)
    summary["metrics"] = metrics
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=json_default) + "\n")
    return metrics


def report_dir(path: Path, *, plots: bool = True) -> list[Path]:
    """Report every run under *path*; with several, also an aggregate ``path/table.md``."""
    runs = run_dirs(path)
    if not runs:
        raise FileNotFoundError(f"{path}: no run folder (summary.json + samples.parquet) here or below")
    all_rows = []
    for r in runs:
        report_run(r, plots=plots)
        all_rows.append((r.name, json.loads((r / "summary.json").read_text())["metrics"]))
    if len(runs) > 1:
        (path / "table.md").write_text(aggregate_markdown(path, all_rows))
    return runs
