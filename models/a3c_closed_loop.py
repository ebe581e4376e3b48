"""The A3C DualPI2 actor in closed loop against DualPI2's PI controller: an exported actor on drawn
conditions (``compare``), and the PI controller on a training run's own episode conditions (``pi_baseline``).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from ccswitch.envs.dualpi2_env import ConditionSpace, DualPi2Env
from ccswitch.models.a3c_hyperparameters import Hyperparameters
from ccswitch.models.a3c_output import plot_curve, read_csv, write_csv
from ccswitch.models.dualpi2_actor import action_dims, load_actor

__all__ = ["compare", "pi_baseline"]


def compare(actor_path: Path, episodes: int, out: Path, *, seed: int = 7, steps: int = 100,
            progress: bool = True) -> list[dict[str, Any]]:
    """The exported actor (deterministic) against DualPI2's PI controller on the same drawn conditions.

    Both controllers see the same *episodes* conditions (drawn with *seed*), one after the other on one
    env; rows go to compare.csv.  This is the training env's own yardstick (reward, C delay, utilisation,
    drops); the scenario runs (docs/l4s.md) are the end-to-end comparison.
    """
    actor = load_actor(actor_path)
    space = ConditionSpace()
    rng = np.random.default_rng(seed)
    conds = [space.draw(rng) for _ in range(episodes)]
    rows: list[dict[str, Any]] = []
    out.mkdir(parents=True, exist_ok=True)
    with DualPi2Env(interval_s=actor.interval_s, steps=steps, workdir=out / "env", mode=actor.mode,
                    obs=actor.obs) as env:
        act = actor.act_all if actor.mode == "residual-k" else actor.act
        for i, cond in enumerate(conds, 1):
            for ctrl in ("pi", "agent"):
                env.controller = ctrl
                obs, _ = env.reset(options={"condition": cond})
                total, m = 0.0, {"classic_delay_ms": 0.0, "utilisation": 0.0, "classic_drop_frac": 0.0,
                                 "l4s_delay_ms": 0.0, "p_prime": 0.0}
                for _ in range(steps):
                    obs, r, _, _, info = env.step(np.atleast_1d(act(obs)))
                    total += r
                    for k in m:
                        m[k] += info[k] / steps
                rows.append({"episode": i, "controller": ctrl, "condition": cond.label(),
                             "mean_reward": round(total / steps, 4), **{k: round(v, 5) for k, v in m.items()}})
                if progress:
                    print(f"compare {i}/{episodes} {ctrl:5s} reward/step {total / steps:+.3f} "
                          f"C delay {m['classic_delay_ms']:.1f} ms util {m['utilisation']:.3f} "
                          f"drops {100 * m['classic_drop_frac']:.2f} % [{cond.label()}]", flush=True)
    write_csv(out / "compare.csv", rows)
    return rows


def pi_baseline(run_dir: Path, *, workers: int = 2, progress: bool = True) -> list[dict[str, Any]]:
    """DualPI2's PI controller on the very conditions of a training run's episodes (same env seeds).

    Episode e of training drew its condition with seed ``hp.seed * 100000 + e``; replaying those seeds with
    ``controller="pi"`` gives each episode's reward under the PI controller, so the curve can show the
    agent's reward *minus the PI's on the same condition* (the conditions alone swing the reward by more
    than the controller does).  Writes pi_baseline.csv and redraws curve.png.
    """
    record = json.loads((run_dir / "record.json").read_text())
    hp = Hyperparameters(**{"warmup_s": 0.0, "w_lc": 0.5, "obs": "base", **{k: tuple(v) if isinstance(v, list) else v
                                               for k, v in record["hyperparameters"].items()}})
    curve = read_csv(run_dir / "curve.csv")
    todo = [int(r["episode"]) for r in curve]
    rows: list[dict[str, Any]] = []
    lock = threading.Lock()
    t0 = time.monotonic()

    def run(i: int) -> None:
        # The run's mode: its observation and reward (residual-k: the L:C term too); the action is ignored.
        with DualPi2Env(interval_s=hp.interval_s, steps=hp.steps, controller="pi",
                        workdir=run_dir / f"pi-{i}", warmup_s=hp.warmup_s, mode=hp.mode, w_lc=hp.w_lc,
                        obs=hp.obs) as env:
            while True:
                with lock:
                    if not todo:
                        return
                    episode = todo.pop(0)
                _, info = env.reset(seed=hp.seed * 100_000 + episode)
                total, m = 0.0, {"classic_delay_ms": 0.0, "utilisation": 0.0, "classic_drop_frac": 0.0}
                for _ in range(hp.steps):
                    _, r, _, _, step_info = env.step(np.zeros(action_dims(hp.mode)))
                    total += r
                    for k in m:
                        m[k] += step_info[k] / hp.steps
                with lock:
                    rows.append({"episode": episode, "mean_reward": round(total / hp.steps, 4),
                                 "condition": info["condition"].label(), **{k: round(v, 4) for k, v in m.items()}})
                    if progress:
                        print(f"pi baseline {len(rows)}/{len(curve)} reward/step {total / hp.steps:+.3f} "
                              f"[{info['condition'].label()}] {time.monotonic() - t0:.0f} s", flush=True)

    from ccswitch.bpf.prague import ensure_prague

    handle = ensure_prague()  # once, before the workers' envs look for it
    try:
        threads = [threading.Thread(target=run, args=(i,)) for i in range(workers)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    finally:
        handle.close()
    rows.sort(key=lambda r: r["episode"])
    write_csv(run_dir / "pi_baseline.csv", rows)
    plot_curve([{**r, "mean_reward": float(r["mean_reward"])} for r in curve], run_dir / "curve.png",
               baseline={int(r["episode"]): float(r["mean_reward"]) for r in rows})
    return rows
