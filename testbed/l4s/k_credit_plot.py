"""The k-tuning trainings side by side (docs/l4s.md, "k credited per window"): k per episode, and the window
credit's raw material (each draw's advantage against its a_k).

    .venv/bin/python testbed/l4s/k_credit_plot.py OUT.png LABEL=RUN_DIR [LABEL=RUN_DIR ...]

Reads each run's curve.csv (mean_a0: the actor's mean a_k over the episode; k = 2^(1 + a_k)) and, where it
exists, k_draws.csv (``--k-credit window`` runs).
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import numpy as np


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def plot(out: Path, runs: dict[str, Path]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(13, 4.2))
    for label, run in runs.items():
        rows = _rows(run / "curve.csv")
        k = 2.0 ** (1.0 + np.array([float(r["mean_a0"]) for r in rows]))
        ep = np.arange(1, len(k) + 1)
        smooth = np.convolve(k, np.ones(10) / 10, mode="valid")
        ax[0].plot(ep[9:], smooth, label=label)
        draws = run / "k_draws.csv"
        if draws.is_file():
            d = _rows(draws)
            a = np.array([float(r["a_k"]) for r in d])
            adv = np.array([float(r["advantage"]) for r in d])
            x = a - a.mean()
            slope = float(x @ adv / (x @ x))
            se = float(np.sqrt(((adv - slope * x) ** 2).sum() / (len(x) - 2) / (x @ x)))
            ax[1].scatter(a, adv, s=6, alpha=0.4, label=f"{label}: slope {slope:+.3f} +- {se:.3f} (SE)")
            xx = np.linspace(a.min(), a.max(), 2)
            ax[1].plot(xx, slope * (xx - a.mean()), lw=1)
    ax[0].axhline(2.0, color="k", lw=0.8, ls="--")
    ax[0].set(title="k set by the actor (mean over the episode; mean of 10)", xlabel="episode", ylabel="k")
    ax[0].legend(fontsize=8)
    ax[1].axhline(0.0, color="k", lw=0.8)
    ax[1].set(title="window credit: each draw's advantage (leave-one-out)", xlabel="a_k drawn (k = 2^(1 + a_k))",
              ylabel="window score - the other windows' mean")
    ax[1].legend(fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv: list[str]) -> int:
    if len(argv) < 2 or any("=" not in a for a in argv[1:]):
        print("usage: k_credit_plot.py OUT.png LABEL=RUN_DIR [LABEL=RUN_DIR ...]", file=sys.stderr)
        return 2
    runs = {a.split("=", 1)[0]: Path(a.split("=", 1)[1]) for a in argv[1:]}
    missing = [str(p / "curve.csv") for p in runs.values() if not (p / "curve.csv").is_file()]
    if missing:
        print(f"k_credit_plot: no {', '.join(missing)}; give training run folders", file=sys.stderr)
        return 2
    plot(Path(argv[0]), runs)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
