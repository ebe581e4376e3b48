"""A3C that learns to set DualPI2's base probability (paper 000), trained on live emulated links.

Its parts, in reading order (this module is their command line and re-exports them): the
hyperparameters (``a3c_hyperparameters``), the two networks (``a3c_networks``), one worker's loop and
the driver that starts the workers and exports the actor (``a3c_training``), the closed-loop
comparison with the PI controller (``a3c_closed_loop``), the CSV files and the curve's plot
(``a3c_output``).

Asynchronous advantage actor-critic (Mnih et al. 2016, as paper 000 uses it):
W workers, each with its own live environment
(:class:`ccswitch.envs.dualpi2_env.DualPi2Env`: its own namespaces, linkemu
and flows) and a local copy of the networks, act in real time.  Every
``t_max`` steps (paper 000's ``args_update_interval`` = 5) a worker computes
n-step returns R_t = r_t + gamma R_{t+1}, bootstrapped with the local
critic's V(s) at the cut, the advantage A = R - V(s), and the gradients of

    actor:  -log pi(a|s) A - beta H(pi(.|s))      (Gaussian pi: mean tanh, std softplus)
    critic: (R - V(s))^2

on its local copy; it applies them to the global networks (one Adam per
network, shared, under a lock) and copies the global weights back.  Workers
never wait for each other.  Networks as paper 000 (Algorithms 1-2): actor
12 -> 32 -> 32 -> (mean, std), critic 12 -> 32 -> 32 -> 16 -> 1, ReLU.  ``--mode residual-k`` (the
agent also sets DualPI2's coupling factor k): 15 inputs, two (mean, std) pairs (factor, k; independent
Gaussians, log pi summed), reward :func:`ccswitch.models.dualpi2_actor.reward_k`.  ``--obs flows`` (the modes
that set k): actor and critic also see the active flows per class (linkemu's ``l4s_flows``, ``classic_flows``;
17 inputs), which the per-flow L:C balance and the right k depend on; the actor file records it
(``observation``), and curve.csv gets each episode's per-flow L:C (``lc_ratio``, k modes).  ``--k-credit
window`` (the modes that set k, with ``--k-hold-steps``): a draw of k is credited by its hold window's reward
against the episode's other windows, one update per episode (models/a3c_k_windows.py says why), not by the
n-step advantage.

Budget as the paper: 100 episodes of 100 steps in all (``episodes`` counts
across workers).  An episode is one condition drawn by the env (link rate,
RTT, Classic CCA and flow counts); its flows first run ``warmup_s`` (default 0)
under DualPI2's PI controller, then the agent acts for ``steps x interval_s`` (5 s).

Exported: the actor's mean network (``a = tanh(mu(s))``, deterministic) as an
actor file (:func:`ccswitch.testbed.runs.dualpi2_agent.save_actor`, numpy only
at run time), its training curve (CSV + PNG) and the record of the run.

    sudo .venv/bin/python -m ccswitch.models.a3c_dualpi2 train --out results/a3c [--workers 2] [--episodes 100]
    sudo .venv/bin/python -m ccswitch.models.a3c_dualpi2 pi-baseline results/a3c   # PI on the same conditions
    sudo .venv/bin/python -m ccswitch.models.a3c_dualpi2 compare results/a3c/actor.json --episodes 12
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

# The parts, re-exported: callers and tests import them from here (`X as X`: neither in __all__ nor used here).
from ccswitch.models.a3c_closed_loop import compare, pi_baseline
from ccswitch.models.a3c_hyperparameters import K_CREDITS, Hyperparameters
from ccswitch.models.a3c_networks import build_networks as build_networks
from ccswitch.models.a3c_networks import export_mean_network as export_mean_network
from ccswitch.models.a3c_networks import k_window_gradients
from ccswitch.models.a3c_output import plot_curve as plot_curve
from ccswitch.models.a3c_training import Shared as Shared
from ccswitch.models.a3c_training import train
from ccswitch.models.a3c_training import worker as worker
from ccswitch.models.dualpi2_actor import ACTION_KINDS, K_MODES, OBS_KINDS

__all__ = ["Hyperparameters", "compare", "k_window_gradients", "train"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ccswitch.models.a3c_dualpi2", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train", help="train on live emulated links (root)")
    t.add_argument("--out", type=Path, required=True)
    t.add_argument("--episodes", type=int, default=Hyperparameters.episodes)
    t.add_argument("--workers", type=int, default=Hyperparameters.workers)
    t.add_argument("--seed", type=int, default=Hyperparameters.seed)
    t.add_argument("--warmup-s", type=float, default=Hyperparameters.warmup_s,
                   help="seconds the flows run under the PI controller before each episode")
    t.add_argument("--gamma", type=float, default=Hyperparameters.gamma, help="discount per control interval")
    t.add_argument("--mode", choices=sorted(ACTION_KINDS), default=Hyperparameters.mode,
                   help="step: the agent sets p' (paper 000); residual: a factor on the PI controller's p'; "
                        "residual-k: that factor and the coupling factor k; k: k alone (p' the PI controller's)")
    t.add_argument("--w-lc", type=float, default=Hyperparameters.w_lc,
                   help="residual-k and k: weight of the per-flow L:C imbalance in the reward")
    t.add_argument("--k-hold-steps", type=int, default=Hyperparameters.k_hold_steps,
                   help="residual-k and k: draw k every this many intervals, hold it between")
    t.add_argument("--k-credit", choices=K_CREDITS, default=Hyperparameters.k_credit,
                   help="residual-k and k: credit a draw of k by the n-step advantage (td) or by its hold "
                        "window against the episode's other windows (window; needs --k-hold-steps >= 2)")
    t.add_argument("--k-settle-steps", type=int, default=Hyperparameters.k_settle_steps,
                   help="--k-credit window: a window's score starts at this step of it")
    t.add_argument("--lr-k", type=float, default=Hyperparameters.lr_k,
                   help="--k-credit window: Adam's learning rate of the episode-end k update")
    t.add_argument("--mean-init-scale", type=float, default=Hyperparameters.mean_init_scale,
                   help="scale of the mean head's initial weights (small: the untrained actor is plain DualPI2)")
    t.add_argument("--obs", choices=OBS_KINDS, default=Hyperparameters.obs,
                   help="residual-k and k: the observation; flows adds the active flows per class (L, C)")
    b = sub.add_parser("pi-baseline", help="the PI controller on a training run's episode conditions (root)")
    b.add_argument("run_dir", type=Path)
    c = sub.add_parser("compare", help="actor vs PI controller on drawn conditions (root)")
    c.add_argument("actor", type=Path)
    c.add_argument("--episodes", type=int, default=12)
    c.add_argument("--seed", type=int, default=7)
    c.add_argument("--out", type=Path, default=Path("results/a3c-compare"))
    a = ap.parse_args(argv)
    if os.geteuid() != 0:
        print("a3c_dualpi2: needs root (network namespaces, BPF Prague); rerun with sudo", file=sys.stderr)
        return 2
    if a.cmd == "train":
        if a.k_hold_steps < 1 or a.mean_init_scale <= 0:
            print("a3c_dualpi2: --k-hold-steps must be >= 1 and --mean-init-scale > 0", file=sys.stderr)
            return 2
        if a.k_credit == "window" and (a.mode not in K_MODES or not 0 <= a.k_settle_steps < a.k_hold_steps):
            print("a3c_dualpi2: --k-credit window needs a mode that sets k and 0 <= --k-settle-steps < "
                  "--k-hold-steps (e.g. --k-hold-steps 20 --k-settle-steps 10)", file=sys.stderr)
            return 2
        if a.obs != "base" and a.mode not in K_MODES:
            print(f"a3c_dualpi2: --obs {a.obs} needs a mode that sets k ({', '.join(sorted(K_MODES))})",
                  file=sys.stderr)
            return 2
        hp = Hyperparameters(episodes=a.episodes, workers=a.workers, seed=a.seed, warmup_s=a.warmup_s,
                             gamma=a.gamma, mode=a.mode, w_lc=a.w_lc, k_hold_steps=a.k_hold_steps,
                             mean_init_scale=a.mean_init_scale, obs=a.obs, k_credit=a.k_credit,
                             k_settle_steps=a.k_settle_steps, lr_k=a.lr_k)
        print(f"a3c: wrote {train(hp, a.out)}")
    elif a.cmd == "pi-baseline":
        rows = pi_baseline(a.run_dir)
        print(f"pi baseline: {len(rows)} episodes, mean reward/step "
              f"{np.mean([r['mean_reward'] for r in rows]):+.3f} -> {a.run_dir / 'pi_baseline.csv'}")
    else:
        rows = compare(a.actor, a.episodes, a.out, seed=a.seed)
        for ctrl in ("pi", "agent"):
            sel = [r for r in rows if r["controller"] == ctrl]
            print(f"{ctrl:5s} reward/step {np.mean([r['mean_reward'] for r in sel]):+.3f}  C delay "
                  f"{np.mean([r['classic_delay_ms'] for r in sel]):.1f} ms  util "
                  f"{np.mean([r['utilisation'] for r in sel]):.3f}  drops "
                  f"{100 * np.mean([r['classic_drop_frac'] for r in sel]):.2f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
