"""DQN for RL-TCP (paper 003 / ns3-ai), trained online on the live testbed, exported numpy-only.

Read top to bottom: the hyperparameters (all of them, in one place), the
network, the replay buffer, the training loop, the export and the plot.

Online DQN (Mnih et al. 2015) as ns3-ai's RL-TCP agent runs it: every 0.1 s
the agent observes the socket (:class:`ccswitch.envs.rltcp_env.RlTcpEnv`:
a real kernel TCP flow on the BPF ``remote`` CC through a linkemu 10 Mbit/s
bottleneck, one CUBIC competitor in half of the episodes), picks one of 4
actions epsilon-greedily from Q(s, .) and stores (s, a, r, s'); after each
episode it does one gradient step per ``train_every`` steps of the episode,
each on a minibatch from the replay buffer (between episodes, so that the
0.1-s step is kept on a loaded host; the acting copy of Q is refreshed then):

    loss = mean (Q(s, a) - (r + gamma max_a' Q_target(s', a')))^2

with Q_target a copy of Q refreshed every ``target_every`` gradient steps.
Episodes end by time (truncation), so s' is always bootstrapped.

Same as ns3-ai's agent (examples/rl-tcp/use_msg/agents.py): the 5-20-20-4
ReLU network, Adam, MSE, batch 32, target copy every 100 steps, gamma 0.8,
the 0.1-s step, the state and the reward (models/rltcp_agent.py).
Different, and why:

* actions: mode ``mult`` (cwnd x 0.7/1/1.1/1.4) instead of the paper's
  (+1 MSS or + MSS^2/cwnd): those cannot bring the window down or fill the
  link in an episode (rltcp_agent.py);
* exploration: epsilon linear 1 -> 0.05 over the first half of the steps
  (CleanRL) instead of 0.99^n, which is greedy after ~460 steps, long
  before ns3-ai's first gradient step (it learns only once its 2,000-entry
  buffer is full);
* reward: ``--reward paper`` (default, the paper's) or ``delay`` (log2
  throughput - queueing delay / min RTT - loss fraction,
  rltcp_agent.delay_reward), recorded in the exported agent file;
* learning rate 5e-4 (ns3-ai 1e-4) and a 10,000-transition buffer (2,000):
  the budget here is 11,000-15,000 real-time steps (25-30 min), not a 1,000-s
  simulation run again and again.

Checkpoints (``--out``): after every episode the networks, the replay buffer,
the step counter and the RNG state (``checkpoint.npz``) and the episode log
(``episodes.csv``); ``train`` resumes from them when the directory has one
(Adam's moments restart).  At the end: ``agent.json`` (numpy only,
:func:`ccswitch.models.rltcp_agent.save_agent`) and ``training_curve.png``.

    sudo nice -n 10 .venv/bin/python -m ccswitch.models.dqn_rltcp train --out results/rltcp [--steps 12000]
        [--reward delay] [--eps-fraction 0.5]
    .venv/bin/python -m ccswitch.models.dqn_rltcp export results/rltcp models/rltcp_agent_paper.json
    .venv/bin/python -m ccswitch.models.dqn_rltcp plot results/rltcp docs/figures/rltcp_training.png
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import signal
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ccswitch.models.rltcp_agent import FEATURES, N_ACTIONS, REWARD_MODES, save_agent

__all__ = ["Hyperparameters", "export", "plot", "train"]


@dataclass(frozen=True)
class Hyperparameters:
    total_steps: int = 11_000         # env steps of 0.1 s (the whole budget, across episodes)
    episode_steps: int = 150          # 15 s per episode
    p_cubic: float = 0.5              # share of episodes with one CUBIC competitor
    mode: str = "mult"                # action mapping (rltcp_agent.ACTION_MODES)
    reward: str = "paper"             # reward (rltcp_agent.REWARD_MODES): the paper's or "delay"
    hidden: tuple[int, ...] = (20, 20)  # ns3-ai: 5-20-20-4
    learning_rate: float = 5e-4       # Adam (ns3-ai 1e-4)
    gamma: float = 0.8                # ns3-ai
    batch_size: int = 32              # ns3-ai
    buffer_size: int = 10_000         # ns3-ai 2,000
    learning_starts: int = 1_000      # random steps before the first gradient step
    train_every: int = 2              # env steps per gradient step (done after each episode, see train())
    target_every: int = 100           # gradient steps per target copy (ns3-ai)
    eps_start: float = 1.0
    eps_end: float = 0.05
    eps_fraction: float = 0.5         # of total_steps, linear decay
    seed: int = 1
    rate_mbit: float = 10.0           # paper 003: 10 Mbit/s bottleneck
    delay_ms: float = 20.0            # per direction: the paper's two ~10 ms access links
    limit_pkts: int = 100             # bottleneck FIFO (tail drop)

    def epsilon(self, step: int) -> float:
        frac = min(1.0, step / max(1.0, self.eps_fraction * self.total_steps))
        return self.eps_start + frac * (self.eps_end - self.eps_start)


def build_q(hp: Hyperparameters) -> Any:
    import tensorflow as tf

    layers = [tf.keras.Input((len(FEATURES),))]
    layers += [tf.keras.layers.Dense(n, activation="relu") for n in hp.hidden]
    layers += [tf.keras.layers.Dense(N_ACTIONS)]
    return tf.keras.Sequential(layers)


class Replay:
    """A ring buffer of (s, a, r, s') as numpy arrays (saved with the checkpoint)."""

    def __init__(self, size: int) -> None:
        self.s = np.zeros((size, len(FEATURES)), np.float32)
        self.s2 = np.zeros((size, len(FEATURES)), np.float32)
        self.a = np.zeros(size, np.int32)
        self.r = np.zeros(size, np.float32)
        self.n = 0  # transitions stored so far (the write position is n % size)

    def add(self, s: np.ndarray, a: int, r: float, s2: np.ndarray) -> None:
        i = self.n % len(self.a)
        self.s[i], self.a[i], self.r[i], self.s2[i] = s, a, r, s2
        self.n += 1

    def sample(self, rng: np.random.Generator, k: int) -> tuple[np.ndarray, ...]:
        idx = rng.integers(0, min(self.n, len(self.a)), k)
        return self.s[idx], self.a[idx], self.r[idx], self.s2[idx]


LOG_FIELDS = ("episode", "step", "return", "steps", "cubic", "cwnd_mean", "mbit_s", "step_ms", "srtt_ms", "lost",
              "epsilon", "loss", "wall_s")


def train(out: Path, hp: Hyperparameters) -> Path:
    """Train (or resume) in *out*; returns the exported agent file."""
    import tensorflow as tf

    from ccswitch.envs.rltcp_env import RlTcpEnv

    out.mkdir(parents=True, exist_ok=True)
    tf.config.threading.set_intra_op_parallelism_threads(1)  # a 5-20-20-4 net: threads only contend
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.random.set_seed(hp.seed)
    q, q_target = build_q(hp), build_q(hp)
    opt = tf.keras.optimizers.Adam(hp.learning_rate)
    replay = Replay(hp.buffer_size)
    rng = np.random.default_rng(hp.seed)
    step, episode, grad_steps, wall0 = 0, 0, 0, 0.0
    ckpt = out / "checkpoint.npz"
    if ckpt.exists():
        c = np.load(ckpt, allow_pickle=False)
        q.set_weights([c[f"q{i}"] for i in range(len(q.get_weights()))])
        replay.s, replay.a, replay.r, replay.s2 = c["s"], c["a"], c["r"], c["s2"]
        replay.n, step, episode, grad_steps, wall0 = (int(c["n"]), int(c["step"]), int(c["episode"]),
                                                      int(c["grad_steps"]), float(c["wall_s"]))
        rng.bit_generator.state = json.loads(str(c["rng"]))
        print(f"resuming at step {step}, episode {episode}", file=sys.stderr)
    q_target.set_weights(q.get_weights())
    (out / "hyperparameters.json").write_text(json.dumps(asdict(hp), indent=1) + "\n")

    spec = [tf.TensorSpec((None, len(FEATURES)), tf.float32), tf.TensorSpec((None,), tf.int32),
            tf.TensorSpec((None,), tf.float32), tf.TensorSpec((None, len(FEATURES)), tf.float32)]

    @tf.function(input_signature=spec)
    def learn(s: Any, a: Any, r: Any, s2: Any) -> Any:
        target = r + hp.gamma * tf.reduce_max(q_target(s2), axis=1)
        with tf.GradientTape() as tape:
            qa = tf.gather(q(s), a, axis=1, batch_dims=1)
            loss = tf.reduce_mean(tf.square(qa - tf.stop_gradient(target)))
        opt.apply_gradients(zip(tape.gradient(loss, q.trainable_variables), q.trainable_variables, strict=True))
        return loss

    learn.get_concrete_function()  # trace now (seconds on a loaded host), not in the middle of an episode
    weights = [q.get_weights()]  # numpy copy for acting, refreshed after each episode's gradient steps

    def greedy(s: np.ndarray) -> int:
        w = weights[0]
        h = s
        for i in range(0, len(w) - 2, 2):
            h = np.maximum(h @ w[i] + w[i + 1], 0.0)
        return int(np.argmax(h @ w[-2] + w[-1]))

    stop: list[int] = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    log_new = not (out / "episodes.csv").exists()
    t_start = time.monotonic()
    with RlTcpEnv(steps=hp.episode_steps, p_cubic=hp.p_cubic, mode=hp.mode, reward_mode=hp.reward,
                  rate_mbit=hp.rate_mbit,
                  delay_ms=hp.delay_ms, limit_pkts=hp.limit_pkts, workdir=out / "env") as env, \
            open(out / "episodes.csv", "a", newline="") as logf:
        log = csv.DictWriter(logf, LOG_FIELDS)
        if log_new:
            log.writeheader()
        while step < hp.total_steps and not stop:
            s, _ = env.reset(seed=int(rng.integers(2**31)))
            ret, losses, infos, done = 0.0, [], [], False
            while not done and step < hp.total_steps:
                eps = hp.epsilon(step)
                a = int(rng.integers(N_ACTIONS)) if rng.random() < eps else greedy(s)
                s2, r, term, trunc, info = env.step(a)
                done = term or trunc
                if not info.get("gone"):
                    replay.add(s, a, r, s2)
                    infos.append(info)
                ret += r
                s = s2
                step += 1
            # learn between episodes: gradient steps inside the 0.1-s steps made them late on the loaded
            # 2-core VM (TF under CPU contention); the same number of gradient steps, done here
            if step >= hp.learning_starts:
                for _ in range(len(infos) // hp.train_every):
                    losses.append(float(learn(*replay.sample(rng, hp.batch_size))))
                    grad_steps += 1
                    if grad_steps % hp.target_every == 0:
                        q_target.set_weights(q.get_weights())
                weights[0] = q.get_weights()
            episode += 1
            acked = [i["acked"] for i in infos]
            row = {"episode": episode, "step": step, "return": round(ret, 4), "steps": len(infos),
                   "cubic": int(any(i["cubic"] for i in infos)),
                   "cwnd_mean": round(float(np.mean([i["cwnd"] for i in infos])), 1) if infos else "",
                   "mbit_s": round(sum(acked) * 1448 * 8 / sum(i["dt"] for i in infos) / 1e6, 3)
                   if infos else "",
                   "step_ms": round(1000 * float(np.mean([i["dt"] for i in infos])), 1) if infos else "",
                   "srtt_ms": round(float(np.median([i["srtt_ms"] for i in infos])), 1) if infos else "",
                   "lost": sum(i["lost"] for i in infos), "epsilon": round(hp.epsilon(step), 3),
                   "loss": round(float(np.mean(losses)), 5) if losses else "",
                   "wall_s": round(wall0 + time.monotonic() - t_start, 1)}
            log.writerow(row)
            logf.flush()
            print(json.dumps(row), file=sys.stderr, flush=True)
            np.savez(out / "checkpoint.tmp.npz", **{f"q{i}": w for i, w in enumerate(q.get_weights())},
                     s=replay.s, a=replay.a, r=replay.r, s2=replay.s2, n=replay.n, step=step, episode=episode,
                     grad_steps=grad_steps, wall_s=wall0 + time.monotonic() - t_start,
                     rng=json.dumps(rng.bit_generator.state))
            os.replace(out / "checkpoint.tmp.npz", ckpt)
    if stop:
        print(f"stopped at step {step}; run train again to resume", file=sys.stderr)
    return export(out, out / "agent.json")


def export(out: Path, dest: Path) -> Path:
    """The checkpoint's Q-network -> a numpy-only agent file (rltcp_agent.save_agent)."""
    hp = Hyperparameters(**{k: tuple(v) if isinstance(v, list) else v
                            for k, v in json.loads((out / "hyperparameters.json").read_text()).items()})
    c = np.load(out / "checkpoint.npz", allow_pickle=False)
    weights = [c[f"q{i}"] for i in range(2 * (len(hp.hidden) + 1))]
    rows = _rows(out)
    last = rows[-20:]
    summary = {"episodes": len(rows), "steps": int(c["step"]), "wall_s": float(c["wall_s"]),
               "last20_return_solo": _mean([float(r["return"]) for r in last if r["cubic"] == "0"]),
               "last20_return_cubic": _mean([float(r["return"]) for r in last if r["cubic"] == "1"]),
               "last20_mbit_s_solo": _mean([float(r["mbit_s"]) for r in last if r["cubic"] == "0" and r["mbit_s"]]),
               "last20_mbit_s_cubic": _mean([float(r["mbit_s"]) for r in last if r["cubic"] == "1" and r["mbit_s"]])}
    import tensorflow as tf

    save_agent(dest, kernels=weights[0::2], biases=weights[1::2], mode=hp.mode, step_s=0.1, reward_mode=hp.reward,
               training={"algorithm": "DQN (online, live testbed)", "hyperparameters": asdict(hp),
                         "environment": "ccswitch.envs.rltcp_env.RlTcpEnv", "summary": summary,
                         "versions": {"tensorflow": tf.__version__, "python": platform.python_version()}})
    print(f"wrote {dest}", file=sys.stderr)
    return dest


def _rows(out: Path) -> list[dict[str, str]]:
    with open(out / "episodes.csv", newline="") as f:
        return list(csv.DictReader(f))


def _mean(xs: list[float]) -> float | None:
    return round(float(np.mean(xs)), 4) if xs else None


def plot(out: Path, dest: Path) -> Path:
    """The training curve: return per episode (solo / with CUBIC) and the flow's throughput and RTT."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = _rows(out)
    ep = np.array([int(r["episode"]) for r in rows])
    ret = np.array([float(r["return"]) for r in rows])
    cub = np.array([r["cubic"] == "1" for r in rows])
    mbit = np.array([float(r["mbit_s"] or "nan") for r in rows])
    srtt = np.array([float(r["srtt_ms"] or "nan") for r in rows])
    eps = np.array([float(r["epsilon"]) for r in rows])
    cwnd = np.array([float(r["cwnd_mean"] or "nan") for r in rows])
    fig, grid = plt.subplots(2, 2, figsize=(12, 7.5))
    axes = [grid[0, 0], grid[1, 0], grid[1, 1]]
    for mask, label, color in ((~cub, "alone", "tab:blue"), (cub, "with CUBIC", "tab:red")):
        axes[0].plot(ep[mask], ret[mask], "o", ms=3, color=color, label=label)
        axes[1].plot(ep[mask], mbit[mask], "o", ms=3, color=color, label=label)
        axes[2].plot(ep[mask], srtt[mask], "o", ms=3, color=color, label=label)
        grid[0, 1].plot(cwnd[mask], ret[mask], "o", ms=3, color=color, label=label)
        if mask.sum() >= 5:
            k = np.ones(5) / 5
            axes[0].plot(ep[mask][4:], np.convolve(ret[mask], k, "valid"), "-", color=color)
    ax = axes[0].twinx()
    ax.plot(ep, eps, ":", color="gray")
    ax.set_ylabel("epsilon (dotted)")
    hp_file = out / "hyperparameters.json"
    rmode = json.loads(hp_file.read_text()).get("reward", "paper") if hp_file.exists() else "paper"
    axes[0].set_ylabel("episode return\n" + ("(paper's reward, pkts/100)" if rmode == "paper"
                                              else f"({rmode} reward, rltcp_agent.REWARD_MODES)"))
    axes[1].set_ylabel("RL-TCP goodput, Mbit/s")
    axes[1].axhline(10, color="gray", lw=0.5)
    axes[2].set_ylabel("RL-TCP srtt median, ms")
    axes[2].set_xlabel("episode (150 steps of 0.1 s)")
    axes[1].set_xlabel("episode (150 steps of 0.1 s)")
    grid[0, 1].set_xlabel("RL-TCP mean cwnd over the episode (packets; BDP ~35)")
    grid[0, 1].set_ylabel("episode return")
    grid[0, 1].legend(loc="lower left")
    axes[0].legend(loc="lower right")
    fig.suptitle(f"RL-TCP DQN ({rmode} reward) trained online on the testbed: 10 Mbit/s, 40 ms base RTT, "
                 "100-packet FIFO")
    fig.tight_layout()
    dest.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(dest, dpi=100)
    return dest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ccswitch.models.dqn_rltcp", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train", help="train or resume (root: the live testbed)")
    t.add_argument("--out", type=Path, required=True)
    t.add_argument("--steps", type=int, default=Hyperparameters.total_steps)
    t.add_argument("--seed", type=int, default=Hyperparameters.seed)
    t.add_argument("--reward", choices=tuple(REWARD_MODES), default=Hyperparameters.reward,
                   help="the step reward (rltcp_agent.REWARD_MODES; default: the paper's)")
    t.add_argument("--eps-fraction", type=float, default=Hyperparameters.eps_fraction,
                   help="share of --steps over which epsilon decays 1 -> 0.05")
    e = sub.add_parser("export", help="checkpoint -> numpy agent file")
    e.add_argument("out", type=Path)
    e.add_argument("dest", type=Path)
    p = sub.add_parser("plot", help="training curve PNG")
    p.add_argument("out", type=Path)
    p.add_argument("dest", type=Path)
    args = ap.parse_args(argv)
    try:
        if args.cmd == "train":
            train(args.out, Hyperparameters(total_steps=args.steps, seed=args.seed, reward=args.reward,
                                            eps_fraction=args.eps_fraction))
            plot(args.out, args.out / "training_curve.png")
        elif args.cmd == "export":
            export(args.out, args.dest)
        else:
            plot(args.out, args.dest)
    except (OSError, KeyError, ValueError) as e:
        print(f"dqn_rltcp: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
