"""The nine-scenario experiment's report: docs/results-daemon.md and its plots.

Reads ``RESULTS/<scenario>/<arm>/run-01-seed-1/`` (written by
``python -m ccswitch.testbed.experiments run``) and writes one table per
scenario (last-half metrics, static vs daemon, the targets checked) and the
plots ``docs/daemon/<scenario>.png``.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

from ..scenario.arms import ARMS
from .run_folder import RunData, load_run
from .run_metrics import TARGET_JAIN, TARGET_MIN_SHARE, TARGET_UTILISATION, last_half, monitor_check

REPO = Path(__file__).resolve().parents[2]
DEFAULT_DOC = REPO / "docs" / "results-daemon.md"


def _runs(results: Path) -> dict[str, dict[str, RunData]]:
    """scenario -> arm -> run (the first seed of each arm folder)."""
    out: dict[str, dict[str, RunData]] = {}
    for sc_dir in sorted(p for p in results.iterdir() if p.is_dir()):
        for arm_dir in sorted(p for p in sc_dir.iterdir() if p.is_dir()):
            run_dir = arm_dir / "run-01-seed-1"
            if (run_dir / "summary.json").is_file():
                out.setdefault(sc_dir.name, {})[arm_dir.name] = load_run(run_dir)
    return out


def _metrics(run: RunData) -> dict[str, Any]:
    m = run.summary.get("metrics", {}).get("last_half")
    if m is None:  # reported before last_half existed: compute it now
        m = last_half(run)
    return m


def _f(v: float | None, nd: int = 2, pct: bool = False) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v * 100:.1f} %" if pct else f"{v:.{nd}f}"


def decisions_summary(run: RunData) -> dict[str, Any]:
    """Counts of the daemons' decisions by action and verdict, and the switches with reasons."""
    actions: Counter[str] = Counter()
    switches = []
    blocked: Counter[str] = Counter()
    names = {}
    for f in run.flows:
        names[f["client"]] = f["name"]
    t0 = run.meta["t0_epoch"]
    for client_dir in sorted((run.run_dir / "daemon").glob("C*")):
        path = client_dir / "decisions.jsonl"
        if not path.is_file():
            continue
        for line in path.read_text(errors="replace").splitlines():
            try:
                d = json.loads(line)
            except ValueError:
                continue
            actions[f"{d.get('action')}/{d.get('verdict')}"] += 1
            if d.get("action") in ("switch", "revert", "manual") and d.get("verdict") not in ("blocked", "kept"):
                switches.append({"t_s": round(float(d.get("ts", t0)) - t0, 1), "client": client_dir.name,
                                 "from": d.get("from"), "to": d.get("to"), "action": d.get("action"),
                                 "verdict": d.get("verdict"), "reason": d.get("reason", "")})
            elif d.get("verdict") == "blocked":
                blocked[str(d.get("reason", "")).split(":")[0]] += 1
    return {"actions": dict(actions), "switches": switches, "blocked": dict(blocked)}


def plot_scenario(name: str, arms: dict[str, RunData], path: Path) -> Path:
    """Goodput over time, one panel per arm, the CCA changes marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    order = [a for a in ARMS if a in arms] + [a for a in arms if a not in ARMS]
    ncols = min(3, len(order))  # rows of three panels: one row of six is too wide to read
    nrows = math.ceil(len(order) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(6.2 * ncols, 3.8 * nrows), sharey=True, squeeze=False)
    for ax in axes.flat[len(order):]:
        ax.set_visible(False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, arm in zip(axes.flat, order, strict=False):
        run = arms[arm]
        dur = run.meta["duration_s"]
        for i, f in enumerate(run.flows):
            s = run.series[f["name"]]
            ax.plot(s.t_s, s.goodput_mbps, color=colors[i % len(colors)], lw=1.3,
                    label=f"{f['name']} ({'->'.join(dict.fromkeys(s.cca)) or f['cca']})")
            for t, a, b in zip(s.t_s[1:], s.cca, s.cca[1:], strict=False):
                if a != b:
                    ax.axvline(t - run.meta["sample_interval_s"], color=colors[i % len(colors)], ls=":", lw=1)
                    ax.annotate(b, (t - run.meta["sample_interval_s"], 0.97), xycoords=("data", "axes fraction"),
                                fontsize=7, color=colors[i % len(colors)], rotation=90, va="top")
        ax.axvspan(dur / 2, dur, color="0.9", zorder=-1)
        lh = _metrics(run)
        ax.set_title(f"{arm}: min share {_f(lh['min_share'])}, Jain {_f(lh['jain'], 3)}, "
                     f"util {_f(lh['utilisation'], pct=True)}", fontsize=9)
        ax.set_xlim(0, dur)
        ax.set_xlabel("time (s); shaded: last half")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    for row in axes:
        row[0].set_ylabel("goodput (Mbit/s)")
    fig.suptitle(name, fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def report(results: Path, doc: Path, plots_dir: Path | None = None, notes: str = "") -> str:
    """docs/results-daemon.md from the run folders under *results*."""
    runs = _runs(results)
    if not runs:
        raise FileNotFoundError(f"{results}: no <scenario>/<arm>/run-01-seed-1 run folder here")
    plots_dir = plots_dir or doc.parent / "daemon"
    lines = ["# The switching daemon end to end: fairness on the emulated WiFi testbed", "",
             "Issue 5, section 4.  Generated by `python -m ccswitch.testbed.experiments report` from the run "
             f"folders under `{results}` (run folders are not in the repository); the commands to reproduce "
             "are at the end.", ""]
    lines += ["Targets with the daemon, over the last half of each run: every flow at least "
              f"{TARGET_MIN_SHARE:g} of its fair share, Jain's index at least {TARGET_JAIN:g}, utilisation at least "
              f"{TARGET_UTILISATION * 100:g} %.", "",
              "## Summary", "",
              "| Scenario | Arm | Min share (flow) | Jain | Utilisation | p95 RTT (ms) | Switches | Targets met |",
              "|---|---|---:|---:|---:|---:|---:|---|"]
    details = []
    for name, arms in runs.items():
        order = [a for a in ARMS if a in arms] + [a for a in arms if a not in ARMS]
        for arm in order:
            run = arms[arm]
            lh = _metrics(run)
            n_sw = sum(len(v) for v in lh["cca_changes"].values())
            met = "yes" if lh["targets_met"] else "no (" + ", ".join(k for k, ok in lh["targets"].items()
                                                                    if not ok) + ")"
            monitor = lh.get("monitor") or monitor_check(run)  # the run is loaded: no second read
            if not monitor["scored"]:  # a harness fault: say so beside whatever was measured
                met = f"not scored: monitor fell behind ({monitor['max_gap_s']:.1f} s without a sample)"
            lines.append(f"| {name} | {arm} | {_f(lh['min_share'])} ({lh['min_share_flow']}) | {_f(lh['jain'], 3)} | "
                         f"{_f(lh['utilisation'], pct=True)} | {_f(lh['rtt_p95_ms'], 1)} | {n_sw} | {met} |")
        png = plot_scenario(name, arms, plots_dir / f"{name}.png")
        first = arms[order[0]]
        details += [f"## {name}", "", first.meta.get("description", ""), "",
                    f"{len(first.flows)} flows, {first.meta['duration_s']:g} s; "
                    f"per flow over the last half (Mbit/s, share of fair share):", "",
                    "| Arm | " + " | ".join(f["name"] for f in first.flows) + " | CCA at the end |",
                    "|---|" + "---:|" * len(first.flows) + "---|"]
        for arm in order:
            run = arms[arm]
            lh = _metrics(run)
            cells = [f"{_f(lh['throughput_mbps'].get(f['name']), 1)} ({_f(lh['share_of_fair'].get(f['name']))})"
                     for f in run.flows]
            end = ", ".join(f"{f['name']} {run.series[f['name']].cca[-1] if run.series[f['name']].cca else '-'}"
                            for f in run.flows)
            details.append(f"| {arm} | " + " | ".join(cells) + f" | {end} |")
        details += ["", f"![{name}]({png.relative_to(doc.parent)})", ""]
        for arm in order:
            run = arms[arm]
            if not run.meta.get("daemon"):
                continue
            ds = decisions_summary(run)
            details.append(f"Decisions of the daemons ({arm}): "
                           + (", ".join(f"{k} {v}" for k, v in sorted(ds["actions"].items())) or "none logged") + ".")
            if ds["blocked"]:
                details.append("Blocked by the guard: " + ", ".join(f"{k} {v}" for k, v in ds["blocked"].items())
                               + ".")
            for sw in ds["switches"][:12]:
                details.append(f"- {sw['t_s']:g} s {sw['client']}: {sw['from']} -> {sw['to']} ({sw['action']}, "
                               f"{sw['verdict']}): {sw['reason']}")
            if len(ds["switches"]) > 12:
                details.append(f"- ... {len(ds['switches']) - 12} more")
            details.append("")
    if notes:
        lines += ["", notes.strip()]
    lines += ["", *details, "## Reproduce", "", "As root, on a machine prepared by `bash scripts/setup.sh`:", "",
              "```sh",
              "# every fair-*.toml and default.toml, without the daemon and with it (DQN); ~50 s per run",
              ".venv/bin/python -m ccswitch.testbed.experiments run --arms static,dqn --out results/daemon",
              "# further arms: heuristic, daemon-static-pcc / -bbr (policy static, every flow on PCC / BBR)",
              ".venv/bin/python -m ccswitch.testbed.experiments run "
              "--arms heuristic,daemon-static-pcc,daemon-static-bbr --out results/daemon",
              ".venv/bin/python -m ccswitch.testbed.experiments report --results results/daemon "
              "--notes docs/daemon/notes.md   # this page", "```", "",
              "Each run folder (`results/daemon/<scenario>/<arm>/run-01-seed-1/`) has `table.md` (the result "
              "table first), the daemons' `daemon/C<n>/{ccswitchd.toml,record.parquet,decisions.jsonl,"
              "ccswitchd.log}`, `samples.parquet` (the daemon's 200 ms ticks re-binned onto 1 s), iperf3 JSON "
              "and linkemu's statistics.", ""]
    text = "\n".join(lines) + "\n"
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(text)
    return text


