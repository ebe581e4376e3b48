"""A corpus as a Minari dataset (the Farama Foundation's offline-RL format).

``ccswitch dataset minari CORPUS --id ccswitch/space-v0 [--out DIR]`` replays the corpus
through the Gymnasium env (envs/cc_env.py, every condition, every starting CCA) and writes
the episodes with Minari, so offline-RL tools (d3rlpy, CORL, ...) train on the same data as
``ccswitch train`` without reading our Parquet captures.

What the episodes are (the behaviour policy; offline RL needs it stated):

* per condition and starting CCA, one episode that **keeps** the starting CCA (the recorded
  static trace: what the data shows without a switch), and
* ``random_episodes`` episodes of a **sticky-random** policy: each interval it switches to a
  uniformly drawn other CCA with probability ``SWITCH_P``, else keeps; seeded, so the
  export is deterministic.

Observations are the env's standardised 30 features (the corpus' normalisation; its mean and
std are in the dataset's description so a user can undo it), actions ``Discrete(3)``
(cubic, bbr, pcc), rewards envs/reward.py's with the given config.  Episodes end truncated
(the data ends; the flow would go on), never terminated.  Minari's ``arrow`` data format is
used, so no HDF5 library is needed (pyarrow is already a dependency).
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["SWITCH_P", "export_minari"]

SWITCH_P = 0.2
"""Sticky-random behaviour: chance per interval of switching to another CCA."""


def _episode(env: Any, seed: int, options: dict[str, Any], policy: Callable[[int, np.random.Generator], int],
             rng: np.random.Generator) -> Any:
    from minari.data_collector import EpisodeBuffer

    obs, _info = env.reset(seed=seed, options=options)
    observations, actions, rewards, terms, truncs = [obs], [], [], [], []
    current = env.actions.index(options["start_cca"])
    while True:
        a = policy(current, rng)
        obs, r, term, trunc, _info = env.step(a)
        current = a
        observations.append(obs)
        actions.append(a)
        rewards.append(r)
        terms.append(term)
        truncs.append(trunc)
        if term or trunc:
            break
    return EpisodeBuffer(observations=np.asarray(observations, np.float32), actions=np.asarray(actions, np.int64),
                         rewards=np.asarray(rewards, np.float64), terminations=np.asarray(terms),
                         truncations=np.asarray(truncs), infos={})


def export_minari(corpus: str | Path, dataset_id: str, *, out_root: str | Path | None = None,
                  random_episodes: int = 2, seed: int = 1, reward: dict[str, Any] | None = None,
                  log: Callable[[str], None] = print) -> Any:
    """Write *corpus* as the Minari dataset *dataset_id*; returns the MinariDataset.

    *out_root* sets MINARI_DATASETS_PATH for the write (default: Minari's, ~/.minari/datasets).
    An existing dataset of that id is an error (Minari does not overwrite): delete it first
    with ``minari delete ID`` or choose another id.
    """
    import gymnasium as gym  # noqa: F401  (the env module needs it first)
    import minari

    from ccswitch.envs.cc_env import CongestionControlEnv
    from ccswitch.envs.replay import ReplayCorpus

    if out_root is not None:
        os.environ["MINARI_DATASETS_PATH"] = str(Path(out_root).resolve())
    if dataset_id in minari.list_local_datasets():
        raise FileExistsError(f"Minari dataset {dataset_id!r} exists in {minari.storage.get_dataset_path()}: "
                              f"delete it (minari delete {dataset_id}) or pass another --id")
    replay = ReplayCorpus.load(corpus, log=lambda m: None)
    env = CongestionControlEnv(replay, split="all", reward_config=reward, start="first")
    rng = np.random.default_rng(seed)
    n = len(env.actions)

    def keep(current: int, _rng: np.random.Generator) -> int:
        return current

    def sticky_random(current: int, r: np.random.Generator) -> int:
        if r.random() < SWITCH_P:
            return int((current + 1 + r.integers(n - 1)) % n)
        return current

    buffers = []
    for ci, cid in enumerate(replay.ids()):
        for ai, cca in enumerate(env.actions):
            opts = {"condition": cid, "start_cca": cca}
            buffers.append(_episode(env, seed * 100_003 + ci * 31 + ai, opts, keep, rng))
            for e in range(random_episodes):
                buffers.append(_episode(env, seed * 100_003 + ci * 31 + ai + 7 * (e + 1), opts, sticky_random, rng))
    norm = env.normalisation
    description = (
        f"ccswitch congestion-control switching: {len(replay.ids())} conditions of the corpus "
        f"{Path(replay.source).name} (fingerprint {replay.fingerprint[:16]}), replayed by "
        f"ccswitch/CongestionControl-v0. Per condition and starting CCA one episode keeping it and "
        f"{random_episodes} sticky-random episodes (switch p={SWITCH_P}). Actions: {', '.join(env.actions)}. "
        f"Observation features (standardised): {json.dumps(list(env.feature_names))}; normalisation "
        f"{json.dumps(norm.as_dict())}. Reward: "
        f"{json.dumps(env.reward_config.as_dict())}.")
    with warnings.catch_warnings():  # "env_spec is None": the env needs the corpus path, not a registry id
        warnings.simplefilter("ignore", UserWarning)
        ds = _create(minari, dataset_id, buffers, env, random_episodes, description)
    log(f"Minari dataset {dataset_id}: {ds.total_episodes} episodes, {ds.total_steps} steps "
        f"({len(replay.ids())} conditions x {n} starting CCAs x {1 + random_episodes})")
    return ds


def _create(minari: Any, dataset_id: str, buffers: list[Any], env: Any, random_episodes: int,
            description: str) -> Any:
    return minari.create_dataset_from_buffers(
        dataset_id=dataset_id, buffer=buffers, action_space=env.action_space,
        observation_space=env.observation_space, algorithm_name="keep + sticky-random behaviour",
        author="ccswitch", code_permalink="https://github.com/ccswitch/ccswitch (datasets/minari_export.py)",
        description=description, data_format="arrow")
