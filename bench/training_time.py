"""Training time on the shipped sample corpus with the shipped policy's hyperparameters.

Retrains the shipped policy's configuration (models/policy.json
training.hyperparameters, 1000 episodes; ``--defaults`` for paper 002's
defaults) and prints the wall time of each phase (TensorFlow import, corpus
load, training, export) side by side with the budget of 10 minutes on 2 cores
(issue 4), and the machine's load.  Run it niced on a shared machine:

    nice -n 10 .venv/bin/python bench/training_time.py [--episodes N] [--data datasets/sample] [--defaults]
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
    ap.add_argument("--episodes", type=int, default=None, help="default: the shipped policy's (1000)")
    ap.add_argument("--defaults", action="store_true", help="paper 002's defaults, not the shipped policy's")
    ap.add_argument("--data", type=Path, default=None, help="corpus (default: datasets/sample)")
    ap.add_argument("--seed", type=int, default=None)
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
    hp = Hyperparameters()
    if not args.defaults:
        from ccswitch.models.policy import load_policy

        hp = Hyperparameters.from_dict(load_policy().training["hyperparameters"])
    hp = apply_overrides(hp, [*([f"episodes={args.episodes}"] if args.episodes else []),
                              *([f"seed={args.seed}"] if args.seed is not None else [])])
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        t2 = time.monotonic()
        res = train(hp, replay, Path(tmp), progress=False, plots=True, tensorboard=True, log=lambda m: None)
        t_train = time.monotonic() - t2
    total = time.monotonic() - t0
    steps = sum(res.history["steps"])
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"corpus {replay.source}: {len(replay.conditions)} conditions; {cpus} CPUs; load average "
          f"{load0:.1f} before training, {os.getloadavg()[0]:.1f} after; niceness {os.nice(0)}")
    changed = {k: v for k, v in hp.as_dict().items() if v != Hyperparameters().as_dict()[k]}
    print(f"hyperparameters: paper 002 defaults{' + ' + str(changed) if changed else ''}")
    print(f"{'phase':<28} {'seconds':>9}")
    print(f"{'import tensorflow':<28} {t_import:>9.1f}")
    print(f"{'load corpus':<28} {t_load:>9.1f}")
    print(f"{f'train {hp.episodes} episodes':<28} {t_train:>9.1f}   ({steps} env steps, "
          f"{steps / t_train:.0f} steps/s incl. one gradient step each)")
    print(f"{'total':<28} {total:>9.1f}   budget {BUDGET_S:.0f} s: {total / BUDGET_S:.2f}x of the budget")
    print(f"held-out reward {res.final.get('reward', float('nan')):.2f}/episode, accuracy "
          f"{100 * res.final.get('accuracy', float('nan')):.1f} %")


if __name__ == "__main__":
    main()
