"""One run's plots: ``plots/{throughput,rtt,jitter,loss}.png``, each over time with switch
markers (scripted and the daemons' own) and as box plots per phase, like paper 002 figures 5-16."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .run_folder import RunData, in_phase
from .run_metrics import METRICS, cca_changes

__all__ = ["plot_run"]


def plot_run(run: RunData, out_dir: Path) -> list[Path]:
    """plots/<metric>.png: (a) over time with switch markers, (b) box plots per phase."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    switches = run.summary.get("switches") or run.meta.get("switches") or []
    changes = _daemon_changes(run, switches)
    paths = []
    for key, label, unit, col in METRICS:
        fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 4.2), gridspec_kw={"width_ratios": [2.2, 1]})
        for i, f in enumerate(run.flows):
            s = run.series[f["name"]]
            ax.plot(s.t_s, getattr(s, col), color=colors[i % len(colors)], lw=1.3,
                    label=f"{f['name']} ({_cca_path(run, f, changes)}; {_lifetime(f, run)})")
        for sw in switches:
            ax.axvline(sw["at_s"], color="0.35", ls="--", lw=1)
            ax.annotate(f"{sw['flow']} -> {sw['cca']}", (sw["at_s"], 1.0), xycoords=("data", "axes fraction"),
                        xytext=(3, -12), textcoords="offset points", fontsize=8, color="0.25")
        _mark_daemon_switches(ax, run, changes, colors)
        ax.set_xlabel("time (s)")
        ax.set_ylabel(f"{label} ({unit})")
        ax.set_xlim(0, run.meta["duration_s"])
        ax.set_title(f"(a) {label} over time")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="best")
        data, labels, cols = [], [], []
        for i, f in enumerate(run.flows):
            s = run.series[f["name"]]
            for p in run.phases:
                vals = [getattr(s, col)[j] for j in in_phase(s, p)]
                vals = [v for v in vals if not math.isnan(v)]
                if vals:
                    data.append(vals)
                    labels.append(f"{f['name']}\n{p.label.split(' (')[0]}")
                    cols.append(colors[i % len(colors)])
        if data:
            bp = bx.boxplot(data, patch_artist=True, widths=0.6)
            for patch, c in zip(bp["boxes"], cols, strict=True):
                patch.set_facecolor(c)
                patch.set_alpha(0.45)
            bx.set_xticks(range(1, len(labels) + 1), labels, fontsize=8)
        bx.set_ylabel(f"{label} ({unit})")
        bx.set_title("(b) per phase")
        bx.grid(alpha=0.3, axis="y")
        fig.suptitle(f"{run.meta['scenario']}: {label}", fontsize=11)
        fig.tight_layout()
        path = out_dir / f"{key}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def _daemon_changes(run: RunData, scripted: Sequence[dict[str, Any]]) -> dict[str, list[tuple[float, str, str]]]:
    """CCA changes seen in the samples that no scripted switch explains: the daemons' own."""
    out = {}
    for name, ch in cca_changes(run).items():
        mine = [sw for sw in scripted if sw["flow"] == name]
        out[name] = [c for c in ch if not any(abs(c[0] - sw["at_s"]) <= 2.0 and c[2] == sw["cca"] for sw in mine)]
    return out


def _mark_daemon_switches(ax: Any, run: RunData, changes: dict[str, list[tuple[float, str, str]]],
                          colors: Sequence[str]) -> None:
    """A dotted line in the flow's colour at each switch a daemon made, labelled with the new CCA.

    The time is the end of the sample interval that first shows the new CCA
    (within one interval of the switch).  Labels of different flows are
    staggered down the top of the axes so they do not print over each other.
    """
    for i, f in enumerate(run.flows):
        c = colors[i % len(colors)]
        for t, _, to in changes.get(f["name"], []):
            ax.axvline(t, color=c, ls=":", lw=1.1, alpha=0.9)
            ax.annotate(to, (t, 1.0), xycoords=("data", "axes fraction"), xytext=(2, -10 - 9 * (i % 4)),
                        textcoords="offset points", fontsize=7, color=c)


def _lifetime(f: dict[str, Any], run: RunData) -> str:
    start = float(f.get("start_s", 0.0))
    end = start + float(f.get("duration_s", run.meta["duration_s"] - start))
    return f"{start:g}-{min(end, run.meta['duration_s']):g} s"


def _cca_path(run: RunData, f: dict[str, Any], changes: dict[str, list[tuple[float, str, str]]] | None = None) -> str:
    """The flow's CCAs in order: its start, scripted switches and the daemons' switches (in time order)."""
    steps = [(sw["at_s"], sw["cca"]) for sw in run.meta.get("switches", []) if sw["flow"] == f["name"]]
    steps += [(t, to) for t, _, to in (changes or {}).get(f["name"], [])]
    ccas = [f["cca"]] + [c for _, c in sorted(steps)]
    if len(ccas) > 5:  # a long path does not fit a legend: first, count, last
        return f"{ccas[0]}->... {len(ccas) - 2} more ...->{ccas[-1]}"
    return "->".join(ccas)
