"""Plots: training curves as paper 002's figures 17-19, and the evaluation comparison.

Each training figure has (a) the per-episode value with its moving average
over MOVING_AVG episodes (the paper's red curve averages 50 training runs;
one run's moving average is the affordable stand-in) and (b) its box plot.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .evaluate import PolicyStats

__all__ = ["MOVING_AVG", "evaluation_plot", "training_plots"]

MOVING_AVG = 50


def _mpl():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def moving_average(x: Sequence[float], n: int = MOVING_AVG) -> np.ndarray:
    v = np.asarray(x, dtype=float)
    out = np.full(len(v), np.nan)
    for i in range(len(v)):
        w = v[max(0, i - n + 1): i + 1]
        w = w[~np.isnan(w)]
        if len(w):
            out[i] = w.mean()
    return out


def training_plots(history: dict[str, Sequence[float]], out_dir: Path, title: str = "") -> list[Path]:
    """training_reward.png, training_loss.png, training_accuracy.png from per-episode history."""
    plt = _mpl()
    out_dir.mkdir(parents=True, exist_ok=True)
    ep = np.arange(1, len(history["reward"]) + 1)
    paths = []
    for key, label, fig_no in (("reward", "total reward per episode", 17), ("loss", "mean TD loss (MSE)", 18),
                               ("accuracy", "accuracy vs evaluation function", 19)):
        y = np.asarray(history[key], dtype=float)
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6), gridspec_kw={"width_ratios": [3, 1]})
        ax1.plot(ep, y, color="tab:blue", lw=0.6, alpha=0.7, label="per episode")
        ax1.plot(ep, moving_average(y), color="tab:red", lw=1.6, label=f"moving average ({MOVING_AVG})")
        ax1.set_xlabel("episode")
        ax1.set_ylabel(label)
        if key == "loss" and np.nanmax(y, initial=0) > 0:
            ax1.set_yscale("log")
        ax1.legend(loc="best", fontsize=8)
        ax1.grid(alpha=0.3)
        ax1.set_title(f"(a) {label} (cf. paper 002 fig. {fig_no})", fontsize=9)
        ok = y[~np.isnan(y)]
        ax2.boxplot([ok] if len(ok) else [[0.0]], widths=0.5)
        if key == "loss" and len(ok) and np.nanmax(ok) > 0:
            ax2.set_yscale("log")
        ax2.set_xticks([1], ["all episodes"])
        ax2.set_title("(b) distribution", fontsize=9)
        ax2.grid(alpha=0.3)
        if title:
            fig.suptitle(title, fontsize=9)
        fig.tight_layout()
        p = out_dir / f"training_{key}.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        paths.append(p)
    return paths


def evaluation_plot(stats: Sequence[PolicyStats], path: Path, title: str = "") -> Path:
    """Bars: mean cumulative reward per episode (+- sd) and accuracy, per policy."""
    plt = _mpl()
    names = [s.policy for s in stats]
    x = np.arange(len(names))
    colors = ["tab:green" if n == "dqn" else "tab:orange" if n == "evalfn" else "tab:gray" if n == "random"
              else "tab:blue" for n in names]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.8))
    ax1.bar(x, [s.reward_mean for s in stats], yerr=[s.reward_std for s in stats], color=colors, capsize=3)
    ax1.set_xticks(x, names, rotation=30, ha="right", fontsize=8)
    ax1.set_ylabel("cumulative reward per episode")
    ax1.grid(axis="y", alpha=0.3)
    ax2.bar(x, [100 * s.accuracy for s in stats], color=colors)
    ax2.set_xticks(x, names, rotation=30, ha="right", fontsize=8)
    ax2.set_ylabel("accuracy vs evaluation function (%)")
    ax2.set_ylim(0, 100)
    ax2.grid(axis="y", alpha=0.3)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
