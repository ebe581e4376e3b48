"""A3C that learns to set DualPI2's base probability (paper 000), trained on live emulated links.

Read top to bottom: the hyperparameters, the two networks, one worker's loop,
the driver that starts the workers and exports the actor, the closed-loop
comparison with the PI controller.

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
import csv
import json
import os
import platform
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ccswitch.envs.dualpi2_env import Condition, ConditionSpace, DualPi2Env
from ccswitch.models.a3c_k_windows import KWindows
from ccswitch.models.dualpi2_actor import (
    ACTION_KINDS,
    K_MODES,
    OBS_KINDS,
    action_dims,
    features_for,
    k_output,
    load_actor,
    save_actor,
)
from ccswitch.testbed.runs.netns_lifecycle import sigterm_as_exit

__all__ = ["Hyperparameters", "compare", "k_window_gradients", "train"]


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


def _quiet_tensorflow() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")


def build_networks(hp: Hyperparameters) -> tuple[Any, Any]:
    """(actor, critic) Keras models: actor s -> (mean in [-1, 1], std > 0) per action dimension (one; two for
    ``residual-k``: factor and k, independent Gaussians), critic s -> V(s)."""
    import keras

    n_obs, n_act = len(features_for(hp.mode, hp.obs)), action_dims(hp.mode)
    s = keras.Input((n_obs,))
    x = s
    for n in hp.actor_hidden:
        x = keras.layers.Dense(n, activation="relu")(x)
    init: Any = "glorot_uniform"  # Keras's default; scaled, the same family (fan_avg, uniform)
    if hp.mean_init_scale != 1.0:
        init = keras.initializers.VarianceScaling(hp.mean_init_scale, mode="fan_avg", distribution="uniform")
    mean = keras.layers.Dense(n_act, activation="tanh", name="mean", kernel_initializer=init)(x)
    # softplus(-1.2) = 0.26: the initial exploration is a gentle random walk of p', not a storm.
    std = keras.layers.Dense(n_act, activation="softplus", name="std",
                             bias_initializer=keras.initializers.Constant(hp.std_init_bias))(x)
    actor = keras.Model(s, [mean, std])
    c = keras.Input((n_obs,))
    y = c
    for n in hp.critic_hidden:
        y = keras.layers.Dense(n, activation="relu")(y)
    critic = keras.Model(c, keras.layers.Dense(1)(y))
    return actor, critic


def export_mean_network(actor: Any) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The actor's hidden layers and its mean head as (kernels, biases) for the actor file."""
    dense = [la for la in actor.layers if la.__class__.__name__ == "Dense" and la.name != "std"]
    return [la.get_weights()[0] for la in dense], [la.get_weights()[1] for la in dense]


K_CREDITS = ("td", "window")


class Shared:
    """What the workers share: global networks, optimisers, the episode counter and the curve."""

    def __init__(self, hp: Hyperparameters) -> None:
        import keras

        self.hp = hp
        self.actor, self.critic = build_networks(hp)
        self.opt_actor = keras.optimizers.Adam(hp.lr_actor)
        self.opt_critic = keras.optimizers.Adam(hp.lr_critic)
        self.opt_k = keras.optimizers.Adam(hp.lr_k)  # k_credit "window": the episode-end k updates
        self.lock = threading.Lock()
        self.claimed = 0
        self.updates = 0
        self.curve: list[dict[str, Any]] = []
        self.k_draws: list[dict[str, Any]] = []  # k_credit "window": every scored draw of k (k_draws.csv)
        self.errors: list[str] = []
        self.stop = False  # set on Ctrl-C / SIGTERM: workers finish their episode and close their envs
        self.t0 = time.monotonic()

    def claim_episode(self) -> int | None:
        with self.lock:
            if self.stop or self.claimed >= self.hp.episodes:
                return None
            self.claimed += 1
            return self.claimed


def k_window_gradients(actor: Any, hp: Hyperparameters, k_dim: int, states: Any, raw_k: Any, adv: Any) -> Any:
    """Gradients of the episode-end k update (``k_credit`` "window", models/a3c_k_windows.py) on *actor*:
    -mean(log pi(a_k|s) A) - beta H(pi_k), clipped like the worker's."""
    import tensorflow as tf

    with tf.GradientTape() as ta:
        mean, std = actor(states)
        m, sd = mean[:, k_dim], std[:, k_dim] + hp.std_min
        logp = -0.5 * tf.square((raw_k - m) / sd) - tf.math.log(sd)
        loss = -tf.reduce_mean(logp * adv) - hp.entropy_beta * tf.reduce_mean(tf.math.log(sd))
    g, _ = tf.clip_by_global_norm(ta.gradient(loss, actor.trainable_variables), hp.grad_clip)
    return g


def worker(shared: Shared, index: int, workdir: Path, progress: bool) -> None:
    """One A3C worker: its env and local networks, until the episode budget is spent."""
    import tensorflow as tf

    hp = shared.hp
    actor, critic = build_networks(hp)

    def sync() -> None:
        actor.set_weights(shared.actor.get_weights())
        critic.set_weights(shared.critic.get_weights())

    @tf.function(reduce_retracing=True)
    def gradients(states: Any, raw_actions: Any, returns: Any, drawn: Any) -> tuple[Any, Any]:
        with tf.GradientTape() as ta, tf.GradientTape() as tc:
            v = tf.squeeze(critic(states), -1)
            adv = tf.stop_gradient(returns - v)
            mean, std = actor(states)
            std = std + hp.std_min
            logp = -0.5 * tf.square((raw_actions - mean) / std) - tf.math.log(std) - 0.5 * np.log(2 * np.pi)
            entropy = tf.math.log(std) + 0.5 * np.log(2 * np.pi * np.e)
            # Independent dimensions: log pi is the sum over them (one dimension: the same as before); a held
            # dimension (k between its draws: *drawn* 0) was not chosen at that step and adds nothing.
            actor_loss = (-tf.reduce_mean(tf.reduce_sum(logp * drawn, -1) * adv)
                          - hp.entropy_beta * tf.reduce_mean(tf.reduce_sum(entropy * drawn, -1)))
            critic_loss = tf.reduce_mean(tf.square(returns - v))
        ga, _ = tf.clip_by_global_norm(ta.gradient(actor_loss, actor.trainable_variables), hp.grad_clip)
        gc, _ = tf.clip_by_global_norm(tc.gradient(critic_loss, critic.trainable_variables), hp.grad_clip)
        return ga, gc

    @tf.function(reduce_retracing=True)
    def k_gradients(states: Any, raw_k: Any, adv: Any) -> Any:
        return k_window_gradients(actor, hp, k_dim, states, raw_k, adv)

    rng = np.random.default_rng(hp.seed * 1000 + index)
    k_dim = k_output(hp.mode)  # the output that sets k (held k_hold_steps intervals)
    by_window = k_dim is not None and hp.k_credit == "window"
    sync()
    with DualPi2Env(interval_s=hp.interval_s, steps=hp.steps, workdir=workdir, warmup_s=hp.warmup_s,
                    mode=hp.mode, w_lc=hp.w_lc, obs=hp.obs) as env:
        while (episode := shared.claim_episode()) is not None:
            obs, info = env.reset(seed=hp.seed * 100_000 + episode)
            cond: Condition = info["condition"]
            buf: list[tuple[np.ndarray, np.ndarray, float, np.ndarray]] = []
            total, metrics = 0.0, {"classic_delay_ms": 0.0, "utilisation": 0.0, "classic_drop_frac": 0.0}
            mean_sum = np.zeros(action_dims(hp.mode))
            pkts = [0.0, 0.0]  # k modes: L4S and Classic packets through the queue over the episode
            held: np.ndarray | None = None
            windows = KWindows(hp.k_hold_steps, hp.k_settle_steps) if by_window else None
            for t in range(hp.steps):
                mean, std = actor(obs[None, :], training=False)
                mean_sum += np.asarray(mean[0], np.float64)
                raw_a = rng.normal(np.asarray(mean[0], np.float64), np.asarray(std[0], np.float64) + hp.std_min)
                drawn = np.ones_like(raw_a)
                if k_dim is not None and hp.k_hold_steps > 1:
                    if t % hp.k_hold_steps and held is not None:
                        raw_a[k_dim], drawn[k_dim] = held[k_dim], 0.0
                    else:
                        held = raw_a.copy()
                if windows is not None:  # k is credited per window at the episode's end, not by the n-step update
                    if drawn[k_dim]:
                        windows.draw(obs, raw_a[k_dim])
                    drawn[k_dim] = 0.0
                nxt, r, _, trunc, info = env.step(np.clip(raw_a, -1.0, 1.0))
                if windows is not None:
                    windows.reward(t, r)
                buf.append((obs, raw_a, r, drawn))
                total += r
                for k in metrics:
                    metrics[k] += info[k] / hp.steps
                pkts[0] += info.get("l4s_pkts", 0.0)
                pkts[1] += info.get("classic_pkts", 0.0)
                obs = nxt
                if len(buf) == hp.t_max or trunc or t == hp.steps - 1:
                    # A time limit, not a terminal state: bootstrap from V(s') at every cut.
                    ret = float(critic(obs[None, :], training=False)[0, 0])
                    returns = []
                    for _, _, rr, _ in reversed(buf):
                        ret = rr + hp.gamma * ret
                        returns.append(ret)
                    returns.reverse()
                    ga, gc = gradients(np.stack([b[0] for b in buf]).astype(np.float32),
                                       np.stack([b[1] for b in buf]).astype(np.float32),
                                       np.array(returns, np.float32),
                                       np.stack([b[3] for b in buf]).astype(np.float32))
                    with shared.lock:
                        shared.opt_actor.apply_gradients(zip(ga, shared.actor.trainable_variables, strict=True))
                        shared.opt_critic.apply_gradients(zip(gc, shared.critic.trainable_variables, strict=True))
                        shared.updates += 1
                    sync()
                    buf = []
            k_batch = windows.batch() if windows is not None and cond.n_l4s > 0 else None
            if k_batch is not None:
                gk = k_gradients(*k_batch)
                _, a_k, adv = k_batch
                with shared.lock:
                    shared.k_draws += [{"episode": episode, "a_k": round(float(a), 4), "advantage": round(float(d), 5),
                                        "n_l4s": cond.n_l4s, "n_classic": cond.n_classic}
                                       for a, d in zip(a_k, adv, strict=True)]
                    shared.opt_k.apply_gradients(zip(gk, shared.actor.trainable_variables, strict=True))
                    shared.updates += 1
                sync()
            row = {"episode": episode, "worker": index, "reward": round(total, 3),
                   "mean_reward": round(total / hp.steps, 4), "condition": cond.label(),
                   **{k: round(v, 4) for k, v in metrics.items()},
                   # the actor's mean action over the episode (tanh output per dimension): drift shows here
                   **{f"mean_a{i}": round(float(m) / hp.steps, 4) for i, m in enumerate(mean_sum)},
                   # k modes: the episode's per-flow L:C packet rate (empty when a class has no flow)
                   **({"lc_ratio": round((pkts[0] / cond.n_l4s) / (pkts[1] / cond.n_classic), 4)
                       if cond.n_l4s and cond.n_classic and pkts[0] > 0 and pkts[1] > 0 else ""}
                      if k_dim is not None else {}),
                   "t_s": round(time.monotonic() - shared.t0, 1)}
            with shared.lock:
                shared.curve.append(row)
                done = len(shared.curve)
            if progress:
                el = time.monotonic() - shared.t0
                eta = el / done * (hp.episodes - done)
                print(f"a3c: episode {done}/{hp.episodes} (worker {index}) reward/step {row['mean_reward']:+.3f} "
                      f"C delay {row['classic_delay_ms']:.1f} ms util {row['utilisation']:.2f} "
                      f"[{cond.label()}] {el:.0f} s, ETA {eta:.0f} s", flush=True)


def train(hp: Hyperparameters, out: Path, *, progress: bool = True) -> Path:
    """Train with *hp*; writes actor.json, curve.csv, curve.png and record.json into *out*."""
    _quiet_tensorflow()
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(hp.seed)
    out.mkdir(parents=True, exist_ok=True)
    shared = Shared(hp)

    def run(i: int) -> None:
        try:
            worker(shared, i, out / f"worker-{i}", progress)
        except Exception as e:  # one worker's failure is reported; the others go on
            shared.errors.append(f"worker {i}: {type(e).__name__}: {e}")
            print(f"a3c: worker {i} failed: {type(e).__name__}: {e}", file=sys.stderr, flush=True)

    from ccswitch.bpf.prague import ensure_prague

    handle = ensure_prague()  # once, before the workers' envs look for it
    threads = [threading.Thread(target=run, args=(i,), name=f"a3c-{i}") for i in range(hp.workers)]
    try:
        with sigterm_as_exit():
            for th in threads:
                th.start()
            for th in threads:
                th.join()
    except BaseException:
        shared.stop = True  # the workers close their namespaces, linkemu and flows within an episode
        for th in threads:
            th.join(timeout=60)
        raise
    finally:
        handle.close()
    if not shared.curve:
        raise RuntimeError("no episode finished: " + "; ".join(shared.errors))
    curve = sorted(shared.curve, key=lambda r: r["episode"])
    _write_csv(out / "curve.csv", curve)
    if shared.k_draws:  # the window credit's raw material: does a higher a_k score better or worse?
        _write_csv(out / "k_draws.csv", sorted(shared.k_draws, key=lambda r: r["episode"]))
    kernels, biases = export_mean_network(shared.actor)
    record = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "hyperparameters": hp.as_dict(),
        "condition_space": asdict(ConditionSpace()), "episodes_done": len(curve), "updates": shared.updates,
        "wall_time_s": round(time.monotonic() - shared.t0, 1), "errors": shared.errors,
        "reward_first10": round(float(np.mean([r["mean_reward"] for r in curve[:10]])), 4),
        "reward_last10": round(float(np.mean([r["mean_reward"] for r in curve[-10:]])), 4),
        "versions": {"tensorflow": tf.__version__, "keras": keras.__version__, "numpy": np.__version__,
                     "python": platform.python_version()},
    }
    path = out / "actor.json"
    save_actor(path, kernels=kernels, biases=biases, interval_s=hp.interval_s, mode=hp.mode, training=record,
               obs=hp.obs)
    (out / "record.json").write_text(json.dumps(record, indent=2) + "\n")
    plot_curve(curve, out / "curve.png", baseline=None)
    return path


# --------------------------------------------------------- closed loop ---


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
    _write_csv(out / "compare.csv", rows)
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
    curve = _read_csv(run_dir / "curve.csv")
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
    _write_csv(run_dir / "pi_baseline.csv", rows)
    plot_curve([{**r, "mean_reward": float(r["mean_reward"])} for r in curve], run_dir / "curve.png",
               baseline={int(r["episode"]): float(r["mean_reward"]) for r in rows})
    return rows


# ----------------------------------------------------------------- output ---


def _read_csv(path: Path) -> list[dict[str, Any]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
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
