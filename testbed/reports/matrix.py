"""The matrix report: one Markdown page with PNG plots from a matrix results folder.

    ccswitch testbed matrix report RESULTS [--doc FILE]

Reads ``RESULTS/<scenario>/<arm>/seed-<s>/summary.json`` (the last-half
metrics of :func:`ccswitch.testbed.reports.run_metrics.last_half`, the same as every
run's ``table.md``) and the scenario folder's ``index.csv`` (category tags),
and writes:

* per arm: the share of scenarios meeting all three targets, with a 95 %
  confidence interval (Student t over the per-seed shares with >= 2 seeds;
  Wilson over the scenarios with one seed), and the same among the scenarios
  some arm can meet;
* CDFs over runs of min share, Jain, utilisation and p95 RTT, per arm
  (``matrix-cdfs.png``);
* a breakdown by category tag (``matrix-tags.png`` and a table);
* one row per scenario and arm, and the scenarios no arm makes fair with the
  best arm's numbers (the best: most targets met, then highest min share);
* the runs that failed (``failures.jsonl``) and are not finished;
* the runs not scored because the flow monitor fell behind (a harness fault:
  :func:`ccswitch.testbed.reports.run_metrics.monitor_check`), left out of
  everything above.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..scenario.arms import ARMS
from ..scenario.generate import read_index
from .run_metrics import MONITOR_MAX_GAP_INTERVALS, TARGET_JAIN, TARGET_MIN_SHARE, TARGET_UTILISATION, run_monitor

T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}
"""Two-sided 95 % Student t quantiles by degrees of freedom (1.96 beyond)."""
METRICS = (("min_share", "min share of fair share", TARGET_MIN_SHARE, False),
           ("jain", "Jain's index", TARGET_JAIN, False),
           ("utilisation", "utilisation", TARGET_UTILISATION, False),
           ("rtt_p95_ms", "p95 RTT (ms)", None, True))


@dataclass(frozen=True)
class RunResult:
    scenario: str
    arm: str
    seed: int
    met: bool
    min_share: float
    jain: float
    utilisation: float
    rtt_p95_ms: float
    switches: int
    scored: bool = True
    """False: the flow monitor fell behind in the run (run_metrics.monitor_check), a harness fault."""
    monitor_gap_s: float = math.nan


def load_results(results: Path) -> list[RunResult]:
    """Every finished run under *results* (``<scenario>/<arm>/seed-<s>/summary.json``)."""
    out = []
    for path in sorted(results.glob("*/*/seed-*/summary.json")):
        run_dir = path.parent
        try:
            seed = int(run_dir.name.removeprefix("seed-"))
            lh = json.loads(path.read_text())["metrics"]["last_half"]
        except (ValueError, KeyError):
            continue
        monitor = run_monitor(run_dir, lh)
        out.append(RunResult(run_dir.parent.parent.name, run_dir.parent.name, seed, bool(lh["targets_met"]),
                             _num(lh["min_share"]), _num(lh["jain"]), _num(lh["utilisation"]),
                             _num(lh["rtt_p95_ms"]), sum(len(v) for v in lh.get("cca_changes", {}).values()),
                             bool(monitor["scored"]), _num(monitor["max_gap_s"])))
    return out


def _num(v: Any) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def wilson(k: float, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return math.nan, math.nan
    p = k / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return max(0.0, mid - half), min(1.0, mid + half)


def met_share(runs: Sequence[RunResult], scenarios: Sequence[str]) -> tuple[float, float, float, str]:
    """(mean, lo, hi, method) of the share of *scenarios* whose runs meet all targets.

    Per seed, the share of the scenarios run with that seed that met them; the
    mean over seeds with a t interval (>= 2 seeds), else a Wilson interval over
    the scenarios."""
    wanted = set(scenarios)
    by_seed: dict[int, list[bool]] = defaultdict(list)
    for r in runs:
        if r.scenario in wanted:
            by_seed[r.seed].append(r.met)
    if not by_seed:
        return math.nan, math.nan, math.nan, "-"
    shares = [sum(v) / len(v) for v in by_seed.values()]
    mean = statistics.fmean(shares)
    if len(shares) >= 2:
        half = T95.get(len(shares) - 1, 1.96) * statistics.stdev(shares) / math.sqrt(len(shares))
        return mean, max(0.0, mean - half), min(1.0, mean + half), f"t over {len(shares)} seeds"
    only = next(iter(by_seed.values()))
    lo, hi = wilson(sum(only), len(only))
    return mean, lo, hi, f"Wilson over {len(only)} scenarios"


def _f(v: float, nd: int = 2, pct: bool = False) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v * 100:.0f} %" if pct else f"{v:.{nd}f}"


def _order(arms: Sequence[str]) -> list[str]:
    return [a for a in ARMS if a in arms] + sorted(a for a in arms if a not in ARMS)


def _best(runs: Sequence[RunResult]) -> RunResult:
    return max(runs, key=lambda r: (r.met, (r.min_share >= TARGET_MIN_SHARE) + (r.jain >= TARGET_JAIN)
                                    + (r.utilisation >= TARGET_UTILISATION),
                                    -1 if math.isnan(r.min_share) else r.min_share))


def arm_table(runs: Sequence[RunResult], arms: Sequence[str], scenarios: Sequence[str],
              meetable: Sequence[str], unscored: Sequence[RunResult] = ()) -> list[str]:
    """The per-arm Markdown table: share of (all, meetable) scenarios met, medians, switches.

    *runs* are the scored runs; *unscored* only add their count to the Runs column."""
    lines = ["| Arm | Runs | All scenarios: share met (95 % CI) | Meetable scenarios: share met (95 % CI) "
             "| Median min share | Median Jain | Median utilisation | Median p95 RTT (ms) | Switches/run |",
             "|---|---:|---|---|---:|---:|---:|---:|---:|"]
    for arm in arms:
        ar = [r for r in runs if r.arm == arm]
        m, lo, hi, how = met_share(ar, scenarios)
        m2, lo2, hi2, _ = met_share(ar, meetable)

        def med(key: str, rs: list[RunResult] = ar) -> float:
            vals = [getattr(r, key) for r in rs if not math.isnan(getattr(r, key))]
            return statistics.median(vals) if vals else math.nan

        left_out = sum(r.arm == arm for r in unscored)
        count = f"{len(ar)}" + (f" (+{left_out} not scored)" if left_out else "")
        lines.append(f"| {arm} | {count} | {_f(m, pct=True)} ({_f(lo, pct=True)}-{_f(hi, pct=True)}; {how}) | "
                     f"{_f(m2, pct=True)} ({_f(lo2, pct=True)}-{_f(hi2, pct=True)}) | {_f(med('min_share'))} | "
                     f"{_f(med('jain'), 3)} | {_f(med('utilisation'), pct=True)} | {_f(med('rtt_p95_ms'), 1)} | "
                     f"{_f(statistics.fmean(r.switches for r in ar), 1)} |")
    return lines


def plot_cdfs(runs: Sequence[RunResult], arms: Sequence[str], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    for ax, (key, label, target, _) in zip(axes.flat, METRICS, strict=True):
        for arm in arms:
            vals = sorted(getattr(r, key) for r in runs if r.arm == arm and not math.isnan(getattr(r, key)))
            if vals:
                ys = [(i + 1) / len(vals) for i in range(len(vals))]
                ax.step(vals, ys, where="post", label=f"{arm} ({len(vals)})", lw=1.4)
        if target is not None:
            ax.axvline(target, color="0.3", ls="--", lw=1)
            ax.annotate("target", (target, 0.02), fontsize=8, color="0.3", rotation=90, ha="right")
        if key == "rtt_p95_ms":
            ax.set_xscale("log")
            # Label the decades and 2x/5x only, in plain numbers: matplotlib's default labels every minor
            # tick of a span under two decades as "2x10^1 3x10^1 ...", which overlap.
            ax.xaxis.set_major_locator(matplotlib.ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
            ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel(label + " (last half)")
        ax.set_ylabel("fraction of runs")
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=8, loc="upper left")
    fig.suptitle("Matrix: CDFs over runs, per arm", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_tags(table: dict[str, dict[str, tuple[float, int]]], arms: Sequence[str], path: Path) -> Path:
    """Heat map: tag (rows) x arm (columns), share of runs meeting all targets."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    tags = sorted(table)
    data = np.array([[table[t].get(a, (math.nan, 0))[0] for a in arms] for t in tags], dtype=float)
    fig, ax = plt.subplots(figsize=(1.6 * len(arms) + 3.5, 0.32 * len(tags) + 1.8))
    im = ax.imshow(data, aspect="auto", cmap="RdYlGn", vmin=0, vmax=1)
    ax.set_xticks(range(len(arms)), arms, rotation=30, ha="right", fontsize=8)
    ax.set_yticks(range(len(tags)), [f"{t} ({max(n for _, n in table[t].values())})" for t in tags], fontsize=8)
    for i in range(len(tags)):
        for j in range(len(arms)):
            if not math.isnan(data[i, j]):
                ax.text(j, i, f"{data[i, j] * 100:.0f}", ha="center", va="center", fontsize=7)
    fig.colorbar(im, ax=ax, label="runs meeting all targets")
    ax.set_title("Targets met by category tag (% of runs; runs per tag and arm in brackets)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _scenario_folder(results: Path) -> Path | None:
    meta = results / "matrix.json"
    if meta.is_file():
        with_path = json.loads(meta.read_text()).get("scenarios")
        if with_path and Path(with_path).is_dir():
            return Path(with_path)
    return None


def report(results: Path, doc: Path | None = None, *, title: str = "", notes: str = "") -> Path:
    """Write the report (default ``RESULTS/report.md``, plots beside it); returns its path."""
    finished = load_results(results)
    if not finished:
        raise ValueError(f"{results}: no finished run (<scenario>/<arm>/seed-<s>/summary.json with metrics); "
                         "run `ccswitch testbed matrix run` first")
    runs = [r for r in finished if r.scored]
    unscored = [r for r in finished if not r.scored]
    if not runs:
        raise ValueError(f"{results}: the flow monitor fell behind in every run (none can be scored); "
                         "run fewer runs at once (`--jobs`) and run them again")
    doc = doc or results / "report.md"
    plots = doc.parent / (doc.stem + "-plots")
    plots.mkdir(parents=True, exist_ok=True)
    arms = _order({r.arm for r in runs})
    scenarios = sorted({r.scenario for r in runs})
    folder = _scenario_folder(results)
    index = read_index(folder) if folder else {}
    meetable = sorted({r.scenario for r in runs if r.met})
    seeds = sorted({r.seed for r in runs})
    lines = [f"# {title or 'Matrix report'}", "",
             f"Generated by `ccswitch testbed matrix report {results}` from {len(finished)} finished runs: "
             f"{len(scenarios)} scenarios"
             + (f" of `{folder}`" if folder else "") + f", arms {', '.join(arms)}, seeds {', '.join(map(str, seeds))}.",
             "",
             f"Targets over the last half of each run: every bulk flow at least {TARGET_MIN_SHARE:g} of its fair "
             f"share, Jain's index at least {TARGET_JAIN:g}, utilisation at least {TARGET_UTILISATION * 100:g} % "
             "(of the constant rate, or of the trace's capacity over the same window).", "",
             *([notes.strip(), ""] if notes.strip() else []),
             "## Targets met, per arm", "",
             f"{len(meetable)} of {len(scenarios)} scenarios are met by at least one arm in at least one run.", "",
             *arm_table(runs, arms, scenarios, meetable, unscored)]
    if unscored:
        lines += ["", f"{len(unscored)} run(s) are not scored: the flow monitor fell behind (samples further apart "
                  f"than {MONITOR_MAX_GAP_INTERVALS:g} sample intervals; see 'Runs not scored' below); the shares "
                  "and medians above are over the scored runs."]
    cdf = plot_cdfs(runs, arms, plots / "matrix-cdfs.png")
    lines += ["", f"![CDFs]({cdf.relative_to(doc.parent)})", ""]

    tag_table: dict[str, dict[str, tuple[float, int]]] = {}
    if index:
        by_tag: dict[str, dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
        for r in runs:
            for tag in filter(None, index.get(r.scenario, {}).get("tags", "").split(";")):
                by_tag[tag][r.arm].append(r.met)
        tag_table = {t: {a: (sum(v) / len(v), len(v)) for a, v in d.items()} for t, d in by_tag.items()}
        heat = plot_tags(tag_table, arms, plots / "matrix-tags.png")
        lines += ["## By category tag", "", "Share of runs meeting all targets (runs in brackets).", "",
                  "| Tag | " + " | ".join(arms) + " |", "|---|" + "---:|" * len(arms)]
        for t in sorted(tag_table):
            lines.append(f"| {t} | " + " | ".join(
                f"{_f(tag_table[t][a][0], pct=True)} ({tag_table[t][a][1]})" if a in tag_table[t] else "-"
                for a in arms) + " |")
        lines += ["", f"![tags]({heat.relative_to(doc.parent)})", ""]

    lines += ["## Scenarios no arm makes fair", "",
              "| Scenario | Tags | Best arm | Min share | Jain | Utilisation | p95 RTT (ms) |",
              "|---|---|---|---:|---:|---:|---:|"]
    for s in scenarios:
        if s in meetable:
            continue
        b = _best([r for r in runs if r.scenario == s])
        lines.append(f"| {s} | {index.get(s, {}).get('tags', '').replace(';', ', ')} | {b.arm} | {_f(b.min_share)} | "
                     f"{_f(b.jain, 3)} | {_f(b.utilisation, pct=True)} | {_f(b.rtt_p95_ms, 1)} |")
    lines += ["", "## Every scenario", "",
              "Per arm: runs meeting all targets / runs, and the mean min share over seeds.", "",
              "| Scenario | " + " | ".join(arms) + " |", "|---|" + "---|" * len(arms)]
    for s in scenarios:
        cells = []
        for a in arms:
            rs = [r for r in runs if r.scenario == s and r.arm == a]
            if not rs:
                cells.append("-")
                continue
            ms = [r.min_share for r in rs if not math.isnan(r.min_share)]
            cells.append(f"{sum(r.met for r in rs)}/{len(rs)}, {_f(statistics.fmean(ms) if ms else math.nan)}")
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    if unscored:
        lines += ["", "## Runs not scored: the flow monitor fell behind", "",
                  "A harness fault, not a result: the run's metrics would count the stretch without samples "
                  "wrongly (run_metrics.monitor_check).  Run them again with fewer runs at once.", "",
                  "| Run | Longest gap between samples (s) | Min share as measured |", "|---|---:|---:|"]
        lines += [f"| {r.scenario}/{r.arm}/seed-{r.seed} | {_f(r.monitor_gap_s, 1)} | {_f(r.min_share)} |"
                  for r in sorted(unscored, key=lambda r: (r.scenario, r.arm, r.seed))]
    failures = _open_failures(results, finished)
    if failures:
        lines += ["", "## Runs that failed and are not finished", ""]
        lines += [f"- `{f['run']}`: {f['error']} (log `{f['log']}`)" for f in failures]
    doc.write_text("\n".join(lines) + "\n")
    return doc


def _open_failures(results: Path, runs: Sequence[RunResult]) -> list[dict[str, Any]]:
    path = results / "failures.jsonl"
    if not path.is_file():
        return []
    done = {f"{r.scenario}/{r.arm}/seed-{r.seed}" for r in runs}
    last: dict[str, dict[str, Any]] = {}
    for line in path.read_text().splitlines():
        try:
            f = json.loads(line)
        except ValueError:
            continue
        if f.get("run") not in done:
            last[f["run"]] = f
    return list(last.values())
