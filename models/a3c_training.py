"""A3C training of the DualPI2 actor on live emulated links: what the workers share, one worker's loop, and
the driver that starts the workers and writes the actor file, its curve and the record of the run.
"""

from __future__ import annotations

import json
import platform
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from ccswitch.envs.dualpi2_env import Condition, ConditionSpace, DualPi2Env
from ccswitch.models.a3c_hyperparameters import Hyperparameters
from ccswitch.models.a3c_k_windows import KWindows
from ccswitch.models.a3c_networks import build_networks, export_mean_network, k_window_gradients, quiet_tensorflow
from ccswitch.models.a3c_output import plot_curve, write_csv
from ccswitch.models.dualpi2_actor import action_dims, k_output, save_actor
from ccswitch.testbed.runs.netns_lifecycle import sigterm_as_exit

__all__ = ["Shared", "train", "worker"]


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
    quiet_tensorflow()
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
    write_csv(out / "curve.csv", curve)
    if shared.k_draws:  # the window credit's raw material: does a higher a_k score better or worse?
        write_csv(out / "k_draws.csv", sorted(shared.k_draws, key=lambda r: r["episode"]))
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
