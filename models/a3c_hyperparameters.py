"""The A3C DualPI2 trainer's hyperparameters, every one in one place (CleanRL-style), and the ways a draw
of k can be credited (``k_credit``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["K_CREDITS", "Hyperparameters"]


@dataclass(frozen=True)
class Hyperparameters:
    episodes: int = 100          # in all, across workers (paper 000: 100)
    steps: int = 100             # per episode (paper 000: 100)
    interval_s: float = 0.05     # control interval: ~3 PI updates (16 ms), ~1-10 RTTs of the drawn paths
    warmup_s: float = 0.0        # flows run this long under the PI controller before the agent takes over
    mode: str = "step"           # action mapping (dualpi2_actor.ACTION_KINDS): set p' ("step"), or a factor on PI's
    #                              ("residual"), or that and the coupling factor k ("residual-k": 2 outputs)
    w_lc: float = 0.5            # residual-k and k: weight of the per-flow L:C imbalance in the reward (reward_k)
    k_hold_steps: int = 1        # residual-k and k: k is drawn every this many intervals and held between
    #                              (1: every interval).  k moves the L:C balance over ~1 s of rate
    #                              adaptation; a new draw every 50 ms is noise no single step's return shows
    k_credit: str = "td"         # residual-k and k: how a draw of k is credited (K_CREDITS): "td", the A3C n-step
    #                              advantage as for p'; "window", its hold window's settled mean reward against
    #                              the episode's other windows (models/a3c_k_windows.py: k acts over ~1 s)
    k_settle_steps: int = 10     # "window": a window's score counts its steps from this one on (0.5 s at 50 ms)
    lr_k: float = 1e-2           # "window": Adam's rate for the k update (one per episode: ~75 in 100 episodes)
    obs: str = "base"            # residual-k and k: the observation option (dualpi2_actor.OBS_KINDS); "flows" adds
    #                              the active flows per class (linkemu's l4s_flows, classic_flows) to actor and critic
    mean_init_scale: float = 1.0  # the mean head's initial weights: Glorot uniform x this (1.0: Keras's default);
    #                              small = the untrained actor is plain DualPI2 (a = 0) for every state
    workers: int = 2             # one per core here; each runs its own emulated link in real time
    t_max: int = 5               # steps between global updates (paper 000: args_update_interval = 5)
    gamma: float = 0.9           # the effect of a change of p' shows within ~1-3 intervals
    lr_actor: float = 1e-3
    lr_critic: float = 1e-3
    entropy_beta: float = 0.01
    std_min: float = 0.05        # the Gaussian's std floor (exploration never stops entirely)
    std_init_bias: float = -1.2  # initial std = softplus(-1.2) + std_min = 0.31
    grad_clip: float = 5.0       # global-norm clip per update
    actor_hidden: tuple[int, ...] = (32, 32)
    critic_hidden: tuple[int, ...] = (32, 32, 16)
    seed: int = 1

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


K_CREDITS = ("td", "window")
