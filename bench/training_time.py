"""Training time on the shipped sample corpus with the default hyperparameters (paper 002: 1000 episodes).

Prints the wall time of ``ccswitch train`` (TensorFlow import, corpus load,
training, export) side by side with the budget of 10 minutes on 2 cores
(issue 4).  Run it niced on a shared machine:

    nice -n 19 .venv/bin/python bench/training_time.py [--episodes 1000] [--data datasets/sample]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

BUDGET_S = 600.0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=1000)
    ap.add_argument("--data", type=Path, default=None, help="corpus (default: datasets/sample)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    t0 = time.monotonic()
    import tensorflow  # noqa: F401

    t_import = time.monotonic() - t0
    from ccswitch.envs.replay import ReplayCorpus
    from ccswitch.models.dqn import Hyperparameters, apply_overrides, train

    t1 = time.monotonic()
    replay = ReplayCorpus.load(args.data, log=lambda m: None)
    t_load = time.monotonic() - t1
    hp = apply_overrides(Hyperparameters(), [f"episodes={args.episodes}", f"seed={args.seed}"])
    with tempfile.TemporaryDirectory() as tmp:
        t2 = time.monotonic()
        res = train(hp, replay, Path(tmp), progress=False, plots=True, tensorboard=True, log=lambda m: None)
        t_train = time.monotonic() - t2
    total = time.monotonic() - t0
    steps = sum(res.history["steps"])
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"corpus {replay.source}: {len(replay.conditions)} conditions; {cpus} CPUs; load avg "
          f"{os.getloadavg()[0]:.1f}")
    print(f"{'phase':<28} {'seconds':>9}")
    print(f"{'import tensorflow':<28} {t_import:>9.1f}")
    print(f"{'load corpus':<28} {t_load:>9.1f}")
    print(f"{f'train {args.episodes} episodes':<28} {t_train:>9.1f}   ({steps} env steps, "
          f"{steps / t_train:.0f} steps/s incl. one gradient step each)")
    print(f"{'total':<28} {total:>9.1f}   budget {BUDGET_S:.0f} s: {total / BUDGET_S:.2f}x of the budget")
    print(f"held-out reward {res.final.get('reward', float('nan')):.2f}/episode, accuracy "
          f"{100 * res.final.get('accuracy', float('nan')):.1f} %")


if __name__ == "__main__":
    main()
