"""DQN for CCA switching, in one file, top to bottom (CleanRL style), with TensorFlow/Keras.

Paper 002 (section 5.5): a Q-network of two hidden layers of 64 units, gamma
0.95, Adam, MSE loss, a replay buffer, epsilon-greedy exploration, 1000
episodes.  Added here: a target network (the paper does not mention one;
without it the TD targets chase the network being trained).  Every
hyperparameter is a field of :class:`Hyperparameters` below, and every field
can be overridden (``ccswitch train --set gamma=0.9 --set reward.w_fairness=1``).

Reading order: 1. hyperparameters, 2. the Q-network, 3. the replay buffer,
4. the training loop, 5. export of the policy file.  The env is
envs/cc_env.py; the reward's weights are ``reward`` (envs/reward.py).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ccswitch.datasets.trace import tool_versions
from ccswitch.envs.cc_env import CongestionControlEnv
from ccswitch.envs.features import FEATURE_VERSION
from ccswitch.envs.replay import ReplayCorpus
from ccswitch.envs.reward import RewardConfig

from .evaluate import evaluate, summarise
from .policy import Policy, save_policy

__all__ = ["Hyperparameters", "TrainResult", "apply_overrides", "build_q_network", "train"]


# ------------------------------------------------------ 1. hyperparameters ---


@dataclass
class Hyperparameters:
    """Everything that shapes training.  Defaults: paper 002 where it says, else stated."""

    seed: int = 1
    """Seeds Python, numpy, TensorFlow (and op determinism), the env's episodes and exploration."""
    episodes: int = 1000
    """Training episodes (paper 002: 1000)."""
    hidden_units: tuple[int, ...] = (64, 64)
    """Hidden layers of the Q-network (paper 002: two of 64)."""
    activation: str = "relu"
    """Hidden activation (not stated by the paper; ReLU as in the DQN literature)."""
    gamma: float = 0.95
    """Discount factor (paper 002, section 4.1.1)."""
    learning_rate: float = 1e-3
    """Adam's step size (paper 002: Adam, no rate given; Keras' default)."""
    batch_size: int = 64
    """Transitions per gradient step, sampled uniformly from the replay buffer."""
    buffer_size: int = 50_000
    """Replay buffer capacity (transitions); larger than a 1000-episode run, so nothing is forgotten."""
    learning_starts: int = 500
    """Environment steps of pure collection before the first gradient step."""
    train_frequency: int = 1
    """Environment steps per gradient step."""
    target_update_interval: int = 250
    """Environment steps between target-network updates."""
    tau: float = 1.0
    """Target update weight (1.0 = hard copy, as in the original DQN)."""
    double_dqn: bool = False
    """Double DQN targets: the online net picks the next action, the target net values it
    (van Hasselt et al. 2016).  Off by default: paper 002 uses DQN."""
    epsilon_start: float = 1.0
    """Exploration rate at the first episode."""
    epsilon_end: float = 0.05
    """Exploration rate after the decay."""
    dueling: bool = False
    """Dueling heads Q = V + A - mean(A) on the last hidden layer (Wang et al. 2016).  Both heads
    are linear, so the export folds them into one Dense layer: the policy file is unchanged."""
    n_step: int = 1
    """n-step returns: the TD target sums n discounted rewards before bootstrapping (1 = DQN)."""
    cql_alpha: float = 0.0
    """Conservative Q-learning weight (Kumar et al. 2020, discrete): adds
    alpha * mean(logsumexp_a Q(s, a) - Q(s, a_taken)) to the loss, pushing down actions the data
    does not support (0 = off)."""
    exploration_fraction: float = 0.5
    """Fraction of the episodes over which epsilon decays linearly."""
    start: str = "random"
    """Where training episodes start: "random" (bin and CCA) or "first" (first decision bin)."""
    max_episode_steps: int = 0
    """Cap on an episode's steps (0: until the traces end)."""
    test_fraction: float = 0.25
    """Share of the corpus' conditions held out for evaluation (never trained on)."""
    eval_interval: int = 100
    """Episodes between greedy evaluations on the held-out conditions (0: only at the end)."""
    reward: RewardConfig = field(default_factory=RewardConfig)
    """Reward weights and floors (envs/reward.py has the defaults and why)."""

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["hidden_units"] = list(self.hidden_units)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Hyperparameters:
        """Inverse of as_dict (e.g. a policy file's training.hyperparameters); unknown keys are errors."""
        known = {f.name for f in dataclasses.fields(cls)}
        bad = sorted(set(d) - known)
        if bad:
            raise ValueError(f"unknown hyperparameter {bad[0]!r}")
        kw = dict(d)
        if "hidden_units" in kw:
            kw["hidden_units"] = tuple(int(u) for u in kw["hidden_units"])
        if "reward" in kw:
            kw["reward"] = RewardConfig.from_dict(kw["reward"])
        hp = cls(**kw)
        _check(hp)
        return hp


def _convert(value: str, like: Any, key: str) -> Any:
    try:
        if isinstance(like, bool):
            if value.lower() not in ("1", "0", "true", "false", "yes", "no"):
                raise ValueError(value)
            return value.lower() in ("1", "true", "yes")
        if isinstance(like, int):
            return int(value)
        if isinstance(like, float):
            return float(value)
        if isinstance(like, tuple):
            return tuple(int(x) for x in value.replace(" ", "").split(",") if x)
        return value
    except ValueError:
        raise ValueError(f"--set {key}={value}: expected {type(like).__name__}") from None


def apply_overrides(hp: Hyperparameters, overrides: Sequence[str]) -> Hyperparameters:
    """Apply KEY=VALUE strings (``reward.KEY=VALUE`` for the reward) to *hp*; returns a new object."""
    top: dict[str, Any] = {}
    rew: dict[str, Any] = {}
    names = {f.name: f for f in dataclasses.fields(hp)}
    rnames = {f.name for f in dataclasses.fields(RewardConfig)}
    for item in overrides:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep:
            raise ValueError(f"--set {item}: expected KEY=VALUE")
        if key.startswith("reward."):
            rk = key.removeprefix("reward.")
            if rk not in rnames:
                raise ValueError(f"--set {key}: unknown reward setting (known: {', '.join(sorted(rnames))})")
            rew[rk] = _convert(value, getattr(hp.reward, rk), key)
        elif key in names and key != "reward":
            top[key] = _convert(value, getattr(hp, key), key)
        else:
            raise ValueError(f"--set {key}: unknown hyperparameter (known: "
                             f"{', '.join(n for n in names if n != 'reward')}, reward.*)")
    out = dataclasses.replace(hp, **top)
    if rew:
        out = dataclasses.replace(out, reward=dataclasses.replace(hp.reward, **rew))
    _check(out)
    return out


def _check(hp: Hyperparameters) -> None:
    problems = []
    if hp.episodes < 1:
        problems.append("episodes must be >= 1")
    if not hp.hidden_units or min(hp.hidden_units) < 1:
        problems.append("hidden_units must be positive integers, e.g. 64,64")
    if not 0 <= hp.gamma < 1:
        problems.append("gamma must be in [0, 1)")
    if hp.batch_size < 1 or hp.buffer_size < hp.batch_size:
        problems.append("need 1 <= batch_size <= buffer_size")
    if hp.n_step < 1:
        problems.append("n_step must be >= 1")
    if hp.cql_alpha < 0:
        problems.append("cql_alpha must be >= 0")
    if not 0 < hp.tau <= 1:
        problems.append("tau must be in (0, 1]")
    if hp.start not in ("random", "first"):
        problems.append("start must be random or first")
    if hp.activation not in ("relu", "tanh"):
        problems.append("activation must be relu or tanh")
    if not 0 <= hp.test_fraction < 1:
        problems.append("test_fraction must be in [0, 1)")
    if problems:
        raise ValueError("; ".join(problems))


def epsilon_at(hp: Hyperparameters, episode: int) -> float:
    span = max(1.0, hp.exploration_fraction * hp.episodes)
    frac = min(1.0, episode / span)
    return hp.epsilon_start + frac * (hp.epsilon_end - hp.epsilon_start)


# -------------------------------------------------------- 2. the Q-network ---


def build_q_network(obs_dim: int, n_actions: int, hp: Hyperparameters) -> Any:
    """Dense(hidden...) with hp.activation, then a linear output of one Q-value per action.

    With hp.dueling the output is a value head V (1 unit) and an advantage head A (n_actions
    units), combined as V + A - mean(A); :func:`export_weights` folds that into one Dense.
    """
    import keras

    inputs = keras.Input(shape=(obs_dim,))
    h = inputs
    for u in hp.hidden_units:
        h = keras.layers.Dense(u, activation=hp.activation)(h)
    if not hp.dueling:
        return keras.Model(inputs, keras.layers.Dense(n_actions, activation="linear")(h))
    value = keras.layers.Dense(1, activation="linear", name="value")(h)
    advantage = keras.layers.Dense(n_actions, activation="linear", name="advantage")(h)
    q = keras.layers.Add()([value, advantage - keras.ops.mean(advantage, axis=1, keepdims=True)])
    return keras.Model(inputs, q)


def export_weights(weights: Sequence[np.ndarray], hp: Hyperparameters) -> list[np.ndarray]:
    """The network's weights as the plain MLP of the policy file: kernels and biases alternating.

    Dueling: Q_a = (w_v.h + b_v) + (w_a.h + b_a) - mean_b(w_b.h + b_b), linear in h, so
    W_q = W_a - mean over actions of W_a + w_v and b_q = b_a - mean(b_a) + b_v.
    """
    w = [np.asarray(x) for x in weights]
    if not hp.dueling:
        return w
    *hidden, k1, b1, k2, b2 = w  # the two heads, in the graph's order: tell them by width
    (w_v, b_v), (w_a, b_a) = sorted([(k1, b1), (k2, b2)], key=lambda kb: kb[0].shape[1])
    w_q = w_a - w_a.mean(axis=1, keepdims=True) + w_v
    b_q = b_a - b_a.mean() + b_v
    return [*hidden, w_q.astype(np.float32), b_q.astype(np.float32)]


# ------------------------------------------------------- 3. replay buffer ---


class ReplayBuffer:
    """Fixed-size ring buffer of (obs, action, return, next_obs, done, discount), sampled uniformly.

    *discount* is gamma^k for a k-step return (k < n_step at the end of an episode)."""

    def __init__(self, size: int, obs_dim: int, rng: np.random.Generator) -> None:
        self.obs = np.zeros((size, obs_dim), np.float32)
        self.next_obs = np.zeros((size, obs_dim), np.float32)
        self.actions = np.zeros(size, np.int32)
        self.rewards = np.zeros(size, np.float32)
        self.dones = np.zeros(size, np.float32)
        self.discounts = np.zeros(size, np.float32)
        self.size, self.pos, self.full, self.rng = size, 0, False, rng

    def add(self, obs: np.ndarray, action: int, reward: float, next_obs: np.ndarray, done: bool,
            discount: float) -> None:
        i = self.pos
        self.obs[i], self.actions[i], self.rewards[i], self.next_obs[i], self.dones[i], self.discounts[i] = (
            obs, action, reward, next_obs, float(done), discount)
        self.pos = (i + 1) % self.size
        self.full = self.full or self.pos == 0

    def __len__(self) -> int:
        return self.size if self.full else self.pos

    def sample(self, n: int) -> tuple[np.ndarray, ...]:
        idx = self.rng.integers(0, len(self), n)
        return (self.obs[idx], self.actions[idx], self.rewards[idx], self.next_obs[idx], self.dones[idx],
                self.discounts[idx])


class NStep:
    """Turns 1-step transitions into n-step ones: (s_t, a_t, sum_i gamma^i r_t+i, s_t+k, done, gamma^k)."""

    def __init__(self, n: int, gamma: float) -> None:
        self.n, self.gamma = n, gamma
        self.pending: list[tuple[np.ndarray, int, float]] = []

    def push(self, obs: np.ndarray, action: int, reward: float, next_obs: np.ndarray, done: bool,
             end: bool) -> list[tuple[np.ndarray, int, float, np.ndarray, bool, float]]:
        """Add one step; returns the transitions that are complete (all pending ones at an episode end)."""
        self.pending.append((obs, action, reward))
        out = []
        while self.pending and (len(self.pending) >= self.n or end):
            ret = sum(self.gamma ** i * r for i, (_, _, r) in enumerate(self.pending))
            o, a, _ = self.pending.pop(0)
            out.append((o, a, ret, next_obs, done, self.gamma ** (len(self.pending) + 1)))
        return out


# ------------------------------------------------------- 4. training loop ---


@dataclass
class TrainResult:
    out_dir: Path
    policy_path: Path
    history: dict[str, list[float]]
    evaluations: list[dict[str, Any]]
    wall_time_s: float
    final: dict[str, Any]


def _quiet_tensorflow() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")


def train(hp: Hyperparameters | None = None, corpus: str | Path | list[str] | ReplayCorpus | None = None,
          out_dir: str | Path | None = None, *, progress: bool = True, plots: bool = True,
          tensorboard: bool = True, log: Callable[[str], None] = print,
          split: tuple[Sequence[str], Sequence[str]] | None = None) -> TrainResult:
    """Train on *corpus* (default: the shipped sample), write everything to *out_dir*, export the policy.

    *split*: explicit (training, held-out) condition ids instead of hp.test_fraction's split
    (models/crossval.py uses it for folds of the training conditions).
    """
    hp = hp or Hyperparameters()
    _check(hp)
    _quiet_tensorflow()
    import keras
    import tensorflow as tf

    t_start = time.monotonic()
    keras.utils.set_random_seed(hp.seed)  # Python, numpy and TensorFlow
    tf.config.experimental.enable_op_determinism()
    rng = np.random.default_rng(hp.seed)
    replay = corpus if isinstance(corpus, ReplayCorpus) else ReplayCorpus.load(corpus, log=log)
    if split is None:
        train_ids, test_ids = replay.split(hp.test_fraction)
    else:
        train_ids, test_ids = sorted(split[0]), sorted(split[1])
        if not train_ids or set(train_ids) & set(test_ids):
            raise ValueError("split: need training conditions, disjoint from the held-out ones")
    out = Path(out_dir) if out_dir else Path("results") / f"train-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    env = CongestionControlEnv(replay, conditions=train_ids, reward_config=hp.reward, start=hp.start,
                               max_steps=hp.max_episode_steps or None,
                               normalisation=replay.fit_normalisation(train_ids))
    env.train_ids, env.test_ids = train_ids, test_ids
    eval_env = CongestionControlEnv(replay, conditions=test_ids or train_ids, reward_config=hp.reward,
                                    normalisation=env.normalisation, start="first")
    obs_dim, n_actions = env.observation_space.shape[0], int(env.action_space.n)
    log(f"corpus {replay.source}: {len(env.train_ids)} training conditions, {len(env.test_ids)} held out; "
        f"{obs_dim} features, actions {', '.join(env.actions)}")

    q_network = build_q_network(obs_dim, n_actions, hp)
    target_network = build_q_network(obs_dim, n_actions, hp)
    target_network.set_weights(q_network.get_weights())
    optimizer = keras.optimizers.Adam(learning_rate=hp.learning_rate)
    mse = keras.losses.MeanSquaredError()
    buffer = ReplayBuffer(hp.buffer_size, obs_dim, rng)

    obs_spec = tf.TensorSpec([None, obs_dim], tf.float32)
    vec_spec = tf.TensorSpec([None], tf.float32)

    @tf.function(input_signature=[obs_spec])
    def q_values(obs: Any) -> Any:
        return q_network(obs, training=False)

    @tf.function(input_signature=[obs_spec, tf.TensorSpec([None], tf.int32), vec_spec, obs_spec, vec_spec,
                                  vec_spec])
    def train_step(obs: Any, actions: Any, rewards: Any, next_obs: Any, dones: Any, discounts: Any) -> Any:
        # TD target from the target network: R + gamma^k * max_a' Q_target(s', a') (no bootstrap at a
        # terminal); R and gamma^k are the n-step return and its discount (k = 1 for plain DQN)
        if hp.double_dqn:
            best = tf.argmax(q_network(next_obs, training=False), axis=1, output_type=tf.int32)
            next_q = tf.gather(target_network(next_obs, training=False), best, batch_dims=1)
        else:
            next_q = tf.reduce_max(target_network(next_obs, training=False), axis=1)
        td_target = rewards + discounts * next_q * (1.0 - dones)
        with tf.GradientTape() as tape:
            q_all = q_network(obs, training=True)
            q_taken = tf.gather(q_all, actions, batch_dims=1)
            loss = mse(tf.stop_gradient(td_target), q_taken)
            if hp.cql_alpha > 0:
                loss += hp.cql_alpha * tf.reduce_mean(tf.reduce_logsumexp(q_all, axis=1) - q_taken)
        grads = tape.gradient(loss, q_network.trainable_variables)
        optimizer.apply_gradients(zip(grads, q_network.trainable_variables, strict=True))
        return [loss, *(tf.identity(v) for v in q_network.trainable_variables)]  # the updated weights, for acting

    def update_target() -> None:
        if hp.tau >= 1.0:
            target_network.set_weights(q_network.get_weights())
        else:
            target_network.set_weights([hp.tau * w + (1 - hp.tau) * t for w, t in
                                        zip(q_network.get_weights(), target_network.get_weights(), strict=True)])

    # Acting uses the numpy forward pass of the policy file (the daemon's code path) on a copy of the
    # online weights, refreshed after every gradient step: much cheaper than a TensorFlow call per step.
    train_step_fn = train_step.get_concrete_function()
    actor = Policy(actions=env.actions, feature_names=tuple(env.feature_names), normalisation=env.normalisation,
                   kernels=[], biases=[], activation=hp.activation)

    def sync_actor(weights: Sequence[Any] | None = None) -> None:
        w = export_weights(q_network.get_weights() if weights is None else [t.numpy() for t in weights], hp)
        actor.kernels, actor.biases = w[0::2], w[1::2]

    def q_numpy(x: np.ndarray) -> np.ndarray:
        return actor.q_values(x)

    sync_actor()

    writer = tf.summary.create_file_writer(str(out / "tensorboard")) if tensorboard else None
    history: dict[str, list[float]] = {"reward": [], "loss": [], "accuracy": [], "epsilon": [], "steps": []}
    evaluations: list[dict[str, Any]] = []
    global_step = 0
    bar = _Bar(hp.episodes, progress)

    with bar:
        for episode in range(hp.episodes):
            epsilon = epsilon_at(hp, episode)
            obs, info = env.reset(seed=hp.seed * 1_000_003 + episode)
            nstep = NStep(hp.n_step, hp.gamma)
            ep_reward, losses, correct, steps = 0.0, [], 0, 0
            while True:
                greedy = int(np.argmax(q_numpy(obs[None])[0]))
                action = int(rng.integers(n_actions)) if rng.random() < epsilon else greedy
                correct += int(greedy == info["oracle_action"])  # paper 002's accuracy: the net's own choice
                next_obs, reward, terminated, truncated, info = env.step(action)
                for tr in nstep.push(obs, action, reward, next_obs, terminated, terminated or truncated):
                    buffer.add(*tr)
                obs = next_obs
                ep_reward += reward
                steps += 1
                global_step += 1
                if global_step > hp.learning_starts and global_step % hp.train_frequency == 0:
                    batch = buffer.sample(hp.batch_size)
                    loss, *weights = train_step_fn(*(tf.constant(b) for b in batch))
                    losses.append(float(loss))
                    sync_actor(weights)
                if global_step % hp.target_update_interval == 0:
                    update_target()
                if terminated or truncated:
                    break
            history["reward"].append(ep_reward)
            history["loss"].append(float(np.mean(losses)) if losses else float("nan"))
            history["accuracy"].append(correct / max(steps, 1))
            history["epsilon"].append(epsilon)
            history["steps"].append(steps)
            if writer is not None:
                with writer.as_default(step=episode):
                    for k in ("reward", "loss", "accuracy", "epsilon"):
                        if not np.isnan(history[k][-1]):
                            tf.summary.scalar(f"train/{k}", history[k][-1])
            if (hp.eval_interval and (episode + 1) % hp.eval_interval == 0) or episode + 1 == hp.episodes:
                ev = _greedy_eval(eval_env, q_numpy, episode + 1)
                evaluations.append(ev)
                if writer is not None:
                    with writer.as_default(step=episode):
                        for k in ("reward", "accuracy"):
                            if ev[k] is not None:
                                tf.summary.scalar(f"heldout/{k}", ev[k])
            bar.update(episode + 1, history, evaluations)

    if writer is not None:
        writer.flush()

    # --------------------------------------------------- 5. export the policy ---
    weights = export_weights(q_network.get_weights(), hp)
    wall = time.monotonic() - t_start
    final = evaluations[-1] if evaluations else {}
    meta = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "corpus": _recorded_corpus(replay), "corpus_fingerprint": replay.fingerprint,
        "corpus_space": next(filter(None, map(_corpus_space, replay.sources or [replay.source])), None),
        "corpus_captures": replay.n_captures, "interval_s": replay.interval_s,
        "train_conditions": env.train_ids, "test_conditions": env.test_ids,
        "hyperparameters": hp.as_dict(), "reward": hp.reward.as_dict(),
        "episodes": hp.episodes, "env_steps": global_step, "wall_time_s": round(wall, 1),
        "heldout_eval": final,
        "versions": {"tensorflow": tf.__version__, "keras": keras.__version__, "numpy": np.__version__,
                     "python": platform.python_version(), "ccswitch_git": tool_versions()["ccswitch_git"]},
    }
    policy_path = out / "policy.json"
    save_policy(policy_path, kernels=weights[0::2], biases=weights[1::2], actions=env.actions,
                features=env.feature_names, normalisation=env.normalisation, activation=hp.activation,
                window=env.window, interval_s=replay.interval_s, feature_version=FEATURE_VERSION, training=meta)
    (out / "config.json").write_text(json.dumps(meta, indent=2, default=str) + "\n")
    _write_history(out / "history.csv", history)
    if evaluations:
        _write_rows(out / "heldout.csv", evaluations)
    if plots:
        from .plots import training_plots

        training_plots(history, out / "plots", title=f"{hp.episodes} episodes, seed {hp.seed}, corpus "
                                                      f"{Path(str(replay.source)).name}")
    on = "held-out" if env.test_ids else "training-condition (nothing held out)"
    log(f"trained {hp.episodes} episodes ({global_step} steps) in {wall:.0f} s; {on} reward "
        f"{final.get('reward') or float('nan'):.2f}/episode, accuracy {100 * (final.get('accuracy') or 0):.1f} %; "
        f"policy -> {policy_path}")
    return TrainResult(out, policy_path, history, evaluations, wall, final)


def _recorded_corpus(replay: ReplayCorpus) -> str | list[str]:
    """The training record's ``corpus``: one folder, or the list of folders read together."""
    sources = [_portable(s) for s in (replay.sources or [replay.source])]
    return sources[0] if len(sources) == 1 else sources


def _corpus_space(source: str) -> str | None:
    """Where a corpus built from matrix runs came from (its corpus.json ``space``), else None."""
    index = Path(source) / "corpus.json"
    try:
        return json.loads(index.read_text()).get("space")
    except (OSError, ValueError):
        return None


def _portable(path: str) -> str:
    """A corpus inside the repository is recorded relative to it (the shipped policy is portable)."""
    repo = Path(__file__).resolve().parent.parent
    try:
        return str(Path(path).resolve().relative_to(repo))
    except ValueError:
        return str(Path(path).resolve())


def _greedy_eval(env: CongestionControlEnv, q_fn: Callable[[np.ndarray], np.ndarray], episode: int) -> dict[str, Any]:
    stats = summarise(evaluate(env, q_fn=q_fn, baselines=False))[0]
    row = {"episode": episode, "reward": stats.reward_mean, "accuracy": stats.accuracy,
           "throughput_mbps": stats.throughput_mbps, "jain": stats.jain, "switches": stats.switches}
    # an episode without a step (a held-out condition shorter than the window) has no mean: None, not NaN
    return {k: (None if isinstance(v, float) and not np.isfinite(v) else v) for k, v in row.items()}


def _write_history(path: Path, history: dict[str, list[float]]) -> None:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        keys = list(history)
        w.writerow(["episode", *keys])
        for i in range(len(history["reward"])):
            w.writerow([i + 1, *(history[k][i] for k in keys)])


def _write_rows(path: Path, rows: list[dict[str, Any]]) -> None:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


class _Bar:
    def __init__(self, total: int, enabled: bool) -> None:
        self.total, self.enabled = total, enabled
        self._p: Any = None

    def __enter__(self) -> _Bar:
        if self.enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._p = Progress(TextColumn("train"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                               TextColumn("{task.description}"))
            self._p.__enter__()
            self._task = self._p.add_task("", total=self.total)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._p is not None:
            self._p.__exit__(None, None, None)

    def update(self, done: int, history: dict[str, list[float]], evals: list[dict[str, Any]]) -> None:
        if self._p is None:
            return
        r = np.mean(history["reward"][-50:])
        losses = [x for x in history["loss"][-50:] if not np.isnan(x)]
        desc = (f"reward {r:6.2f}  loss {np.mean(losses) if losses else float('nan'):7.3f}  "
                f"acc {100 * np.mean(history['accuracy'][-50:]):5.1f} %  eps {history['epsilon'][-1]:.2f}")
        if evals and evals[-1]["reward"] is not None:
            desc += f"  held-out {evals[-1]['reward']:.2f}"
        self._p.update(self._task, completed=done, description=desc)
