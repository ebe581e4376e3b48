"""Plots of paper 000's Table 2 reproduction (``table2_report.py`` calls :func:`make_plots`)."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from ccswitch.testbed.l4s.table2_config import (
    ALL_FOUR,
    AQMS,
    DURATION_S,
    LABEL,
    PAPER_MB,
    RATES,
    STARTS_S,
    Config,
    mean_of,
)

COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red")


def make_plots(runs: dict[Config, list[dict[str, Any]]], out_dir: Path) -> dict[str, Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    out: dict[str, Path] = {}
    # Table 2 as bars: per rate, per AQM: paper off/on, ours off/on
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.2))
    for ax, rate in zip(axes, RATES, strict=True):
        x = range(len(AQMS))
        wdt = 0.2
        top = 0.0
        for k, (lab, col, vals, errs) in enumerate((
                ("paper, no ECN", "#bbbbbb", [PAPER_MB[(a, rate)][0] for a in AQMS], None),
                ("paper, ECN", "#666666", [PAPER_MB[(a, rate)][1] for a in AQMS], None),
                ("ours, no ECN", "tab:blue", [mean_of([r["total_in_mb"] for r in runs[Config(a, rate, False)]])
                                              for a in AQMS], _err(runs, rate, False)),
                ("ours, ECN", "tab:orange", [mean_of([r["total_in_mb"] for r in runs[Config(a, rate, True)]])
                                             for a in AQMS], _err(runs, rate, True)))):
            ax.bar([i + (k - 1.5) * wdt for i in x], [0 if v != v else v for v in vals], wdt,
                   label=lab if rate == RATES[0] else None, color=col, yerr=errs, capsize=2)
            top = max([top, *(v + (errs[1][n] if errs else 0.0) for n, v in enumerate(vals) if v == v)])
        cap = rate * 1e6 / 8 * DURATION_S / 1e6
        ax.axhline(cap, color="k", ls="--", lw=1)
        ax.text(-0.45, cap, "capacity x 90 s", ha="left", va="bottom", fontsize=8)
        ax.set_xticks(list(x), [LABEL[a] for a in AQMS])
        ax.set_ylabel("data sent incl. retransmissions, MB")
        ax.set_title(f"{rate} Mbit/s, 20 ms")
        ax.set_ylim(0, max(top, cap) * 1.12)
        ax.grid(axis="y", alpha=0.3)
    fig.legend(loc="upper center", ncol=4, fontsize=9, bbox_to_anchor=(0.5, 0.93), frameon=False)
    fig.suptitle("Paper 000 Table 2, total data transferred: paper (VirtualBox/dummynet) vs ours (linkemu); "
                 "ours = mean over seeds, error bars min-max", fontsize=11)
    fig.tight_layout(rect=(0, 0, 1, 0.9))
    out["bars"] = _save(fig, out_dir / "table2-bars.png")
    plt.close(fig)

    for rate in RATES:
        for kind, key, ylab in (("tput", "series", "goodput, Mbit/s"), ("srtt", "rtt_series", "srtt, ms")):
            fig, axes = plt.subplots(len(AQMS), 2, figsize=(12, 2.1 * len(AQMS)), sharex=True, sharey=True)
            any_data = False
            for i, aqm in enumerate(AQMS):
                for j, ecn in enumerate((False, True)):
                    ax = axes[i][j]
                    rs = sorted(runs[Config(aqm, rate, ecn)], key=lambda r: r["seed"])
                    r = rs[0] if rs else None
                    if r is not None:
                        any_data = True
                        for n, (name, pts) in enumerate(sorted(r[key].items())):
                            ax.plot([t for t, _ in pts], [v for _, v in pts], color=COLORS[n % 4], lw=1,
                                    label=name)
                        jain = "-" if r["jain"] != r["jain"] else f"{r['jain']:.2f}"
                        info = (f"Jain {jain}, util {100 * r['util']:.0f} %" if kind == "tput"
                                else f"mean {r['srtt_ms']:.1f} ms, qdelay {r['qdelay_mean_ms']:.1f} ms")
                        ax.text(0.99, 0.95, f"seed {r['seed']}: {info}", transform=ax.transAxes, ha="right",
                                va="top", fontsize=8, bbox={"facecolor": "white", "alpha": 0.7, "lw": 0})
                    else:
                        ax.text(0.5, 0.5, "not run", transform=ax.transAxes, ha="center")
                    ax.set_title(f"{LABEL[aqm]}, ECN {'on' if ecn else 'off'}", fontsize=9)
                    ax.grid(alpha=0.3)
                    if j == 0:
                        ax.set_ylabel(ylab, fontsize=8)
            if kind == "tput":
                axes[0][0].set_ylim(0, rate * 1.35)
            else:
                vals = sorted(v for rs in runs.values() for r in rs[:1] if r["config"].rate == rate
                              for pts in r[key].values() for _, v in pts)
                top = vals[int(0.98 * (len(vals) - 1))] if vals else 100.0  # slow-start spikes off the scale
                axes[0][0].set_ylim(0, top * 1.4)
            for row in axes:
                for ax in row:
                    ax.axvspan(*ALL_FOUR, color="0.9", zorder=0)
            t_end = max((t for rs in runs.values() for r in rs[:1] if r["config"].rate == rate
                         for pts in r[key].values() for t, _ in pts), default=DURATION_S)
            for ax in axes[-1]:
                ax.set_xlabel("time, s")
                ax.set_xlim(0, DURATION_S if t_end <= DURATION_S + 2 else math.ceil(t_end / 10) * 10)
            handles = [Line2D([], [], color=COLORS[n], lw=1.5) for n in range(len(STARTS_S))]
            fig.legend(handles, [f"F{n + 1} (from {s:g} s)" for n, s in enumerate(STARTS_S)]
                       + [], loc="upper right", ncol=4, fontsize=8, frameon=False)
            fig.suptitle(f"Four NewReno flows, {rate} Mbit/s, 20 ms base RTT: "
                         f"{'throughput' if kind == 'tput' else 'smoothed RTT'} (grey: 30-60 s, all four on schedule)",
                         fontsize=10, x=0.02, ha="left")
            fig.tight_layout(rect=(0, 0, 1, 0.98))
            if any_data:
                out[f"{kind}-{rate}"] = _save(fig, out_dir / f"table2-{kind}-{rate}mbit.png")
            plt.close(fig)

    # summary: utilisation, queue delay, srtt per configuration (rows: rates; bars: ECN off / on per AQM)
    fig, axes = plt.subplots(2, 3, figsize=(15, 7.5))
    metrics = (("util", "utilisation, %", 100.0), ("qdelay_mean_ms", "queue delay mean, ms", 1.0),
               ("srtt_ms", "srtt mean, ms", 1.0))
    for row, rate in zip(axes, RATES, strict=True):
        for ax, (key, ylab, scale) in zip(row, metrics, strict=True):
            for k, ecn in enumerate((False, True)):
                means, lo, hi = [], [], []
                for aqm in AQMS:
                    v = [r[key] * scale for r in runs[Config(aqm, rate, ecn)] if r[key] == r[key]]
                    m = statistics.fmean(v) if v else 0.0
                    means.append(m)
                    lo.append(m - min(v) if v else 0.0)
                    hi.append(max(v) - m if v else 0.0)
                ax.bar([i + (k - 0.5) * 0.38 for i in range(len(AQMS))], means, 0.38, yerr=[lo, hi], capsize=2,
                       color="tab:orange" if ecn else "tab:blue",
                       label=("ECN on" if ecn else "ECN off") if (rate, key) == (RATES[0], "util") else None)
            ax.set_xticks(range(len(AQMS)), [LABEL[a] for a in AQMS])
            ax.set_ylabel(ylab)
            ax.set_title(f"{rate} Mbit/s: {ylab.split(',')[0]}", fontsize=10)
            ax.grid(axis="y", alpha=0.3)
            if key == "util":
                ax.axhline(90, color="k", ls="--", lw=1)
                ax.set_ylim(0, 110)
            elif key == "qdelay_mean_ms":
                ax.axhline(5, color="tab:green", ls=":", lw=1.5, label="5 ms" if rate == RATES[0] else None)
                ax.axhline(15, color="tab:red", ls=":", lw=1.5, label="15 ms" if rate == RATES[0] else None)
                if rate == RATES[0]:
                    ax.legend(loc="upper right", fontsize=8, title="targets", title_fontsize=8)
            else:
                ax.axhline(20, color="0.4", ls=":", lw=1)
    axes[0][0].legend(loc="lower right", fontsize=8)
    fig.suptitle("Per configuration, mean over seeds (error bars min-max); dashed: 90 % utilisation, dotted: "
                 "delay targets and the 20 ms base RTT", fontsize=10)
    fig.tight_layout()
    out["summary"] = _save(fig, out_dir / "table2-summary.png")
    plt.close(fig)
    return out


def _err(runs: dict[Config, list[dict[str, Any]]], rate: int, ecn: bool) -> list[list[float]]:
    lo, hi = [], []
    for a in AQMS:
        v = [r["total_in_mb"] for r in runs[Config(a, rate, ecn)]]
        m = mean_of(v)
        lo.append(m - min(v) if v else 0.0)
        hi.append(max(v) - m if v else 0.0)
    return [lo, hi]


def _save(fig: Any, path: Path) -> Path:
    fig.savefig(path, dpi=110)
    return path
