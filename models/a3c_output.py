"""The A3C DualPI2 trainer's files: its CSV tables (curve, k draws, comparisons) and the training curve's plot.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["plot_curve", "read_csv", "write_csv"]


def read_csv(path: Path) -> list[dict[str, Any]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def plot_curve(curve: list[dict[str, Any]], path: Path, *, baseline: dict[int, float] | None) -> None:
    """Reward per step of each episode and its running mean over 10 episodes; with *baseline* (the PI
    controller's reward on each episode's condition) a second panel shows agent minus PI per episode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ep = np.array([int(r["episode"]) for r in curve])
    rw = np.array([float(r["mean_reward"]) for r in curve])
    k = min(10, len(rw))
    panels = 2 if baseline else 1
    fig, axes = plt.subplots(panels, 1, figsize=(7, 3.4 * panels), sharex=True, squeeze=False)
    ax = axes[0, 0]
    ax.scatter(ep, rw, s=10, alpha=0.5, label="A3C agent (exploring), per episode")
    ax.plot(ep[k - 1:], np.convolve(rw, np.ones(k) / k, mode="valid"), color="C0", lw=2, label=f"mean of {k}")
    if baseline:
        pi = np.array([baseline.get(int(e), np.nan) for e in ep])
        ax.scatter(ep, pi, s=10, alpha=0.5, color="C1", marker="x", label="PI controller, same condition")
        ax.plot(ep[k - 1:], np.convolve(np.nan_to_num(pi), np.ones(k) / k, mode="valid"), color="C1", lw=2)
        d = rw - pi
        ax2 = axes[1, 0]
        ax2.bar(ep, d, color=np.where(d >= 0, "C2", "C3"), alpha=0.6)
        ax2.plot(ep[k - 1:], np.convolve(np.nan_to_num(d), np.ones(k) / k, mode="valid"), color="k", lw=2,
                 label=f"agent - PI, mean of {k}")
        ax2.axhline(0, color="k", lw=0.8)
        ax2.set_ylabel("agent - PI (reward/step)")
        ax2.grid(alpha=0.3)
        ax2.legend(loc="lower right", fontsize=8)
    axes[-1, 0].set_xlabel("episode (100 steps of 50 ms; all workers)")
    ax.set_ylabel("reward per step")
    ax.set_title("A3C for DualPI2's p': training on live emulated links")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
