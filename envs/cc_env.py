"""CongestionControlEnv: choose a flow's CCA every interval, replaying captured traces.

Registered as ``ccswitch/CongestionControl-v0`` (``import ccswitch.envs``).

One episode is one flow under one condition of the corpus (a link and its
competing traffic), from the first decision after the warm-up to the end of
the traces.  Each step the agent picks the flow's CCA for the next interval;
the next observation is the *recorded* next sample of the trace that ran
that CCA under the same condition at the same time (envs/replay.py has the
rules, including recorded switches).  Everything is deterministic given the
seed passed to ``reset``.

Spaces
------
observation_space : Box(-10, 10, shape=(30,), float32)
    ccswitch.envs.features.feature_names(): 4 intervals x 6 standardised
    flow metrics (log throughput, log RTT, log RTT/min RTT, loss rate, log
    jitter, log sending rate; oldest first), the one-hot current CCA
    (cubic, bbr, pcc), and the host's view of competition (other active
    local flows / 4, this flow's share of local throughput, local Jain's
    index).  Standardisation uses the training conditions' mean and std
    (``env.normalisation``; exported with the policy).
action_space : Discrete(3)
    0 = cubic, 1 = bbr, 2 = pcc for the next interval (``env.actions``);
    choosing the current CCA keeps it (no switch).

Reward: envs/reward.py (paper 002's R plus fairness and switching cost;
weights in ``RewardConfig``).  ``info`` carries the reward terms, the
interval's metrics, ``oracle_action`` (paper 002's evaluation function's
choice for the *next* decision, the reference for accuracy) and where the
replay is (condition, trace, bin).

Episodes end with ``truncated=True`` when the data ends (the flow would go
on); ``terminated`` is always False.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from . import register
from .features import CLIP, Normalisation, assemble, feature_names, obs_dim
from .replay import Condition, ReplayCorpus
from .reward import RewardConfig, eval_scores, evaluation_choice, reward

__all__ = ["START_MODES", "CongestionControlEnv"]

START_MODES = ("random", "first")


class CongestionControlEnv(gym.Env):
    """Replay env over a corpus folder (default: the shipped sample, datasets/sample/)."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 1}

    def __init__(
        self,
        corpus: str | Path | ReplayCorpus | None = None,
        *,
        conditions: Sequence[str] | None = None,
        split: str = "all",
        test_fraction: float = 0.25,
        reward_config: RewardConfig | dict[str, Any] | None = None,
        normalisation: Normalisation | None = None,
        start: str = "random",
        start_cca: str | None = None,
        max_steps: int | None = None,
        render_mode: str | None = None,
    ) -> None:
        """
        corpus: folder of captures, or an already loaded ReplayCorpus.
        conditions: condition ids to use (default: those of *split*).
        split: "train", "test" or "all": the deterministic split of the corpus'
            conditions by *test_fraction* (envs/replay.py split_conditions).
        normalisation: feature standardisation (default: fitted on the train
            conditions, so that train and test envs agree).
        start: "random" (random starting bin in the first half and random
            starting CCA) or "first" (first decision bin; starting CCA from
            *start_cca* or random).
        max_steps: cap on the episode length (default: until the data ends).
        """
        super().__init__()
        self.replay = corpus if isinstance(corpus, ReplayCorpus) else ReplayCorpus.load(corpus)
        self.actions: tuple[str, ...] = self.replay.actions
        self.window = self.replay.window
        train_ids, test_ids = self.replay.split(test_fraction)
        if conditions is not None:
            unknown = [c for c in conditions if c not in self.replay.conditions]
            if unknown:
                raise ValueError(f"unknown condition {unknown[0]!r} in {self.replay.source}")
            ids = list(conditions)
        elif split == "train":
            ids = train_ids
        elif split == "test":
            ids = test_ids
        elif split == "all":
            ids = self.replay.ids()
        else:
            raise ValueError(f"split must be train, test or all, got {split!r}")
        if not ids:
            raise ValueError(f"no conditions in split {split!r} of {self.replay.source}")
        if start not in START_MODES:
            raise ValueError(f"start must be one of {', '.join(START_MODES)}, got {start!r}")
        if start_cca is not None and start_cca not in self.actions:
            raise ValueError(f"start_cca must be one of {', '.join(self.actions)}, got {start_cca!r}")
        self.condition_ids = list(ids)
        self.train_ids, self.test_ids = train_ids, test_ids
        self.reward_config = (reward_config if isinstance(reward_config, RewardConfig)
                              else RewardConfig.from_dict(reward_config))
        self.normalisation = normalisation or self.replay.fit_normalisation(train_ids or self.replay.ids())
        self.start = start
        self.start_cca = start_cca
        self.max_steps = max_steps
        self.render_mode = render_mode
        self.feature_names = feature_names(self.window, self.actions)
        self.observation_space = spaces.Box(-CLIP, CLIP, shape=(obs_dim(self.window, self.actions),),
                                            dtype=np.float32)
        self.action_space = spaces.Discrete(len(self.actions))
        self._cond: Condition | None = None
        self._trace = 0
        self._k = 0
        self._steps = 0
        self._hist: deque[tuple[int, int]] = deque(maxlen=self.window)
        self._last: dict[str, Any] = {}

    # ----------------------------------------------------------------- api ---

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        """options: condition (id), start_cca (name), start_bin (int) pin the episode's start."""
        super().reset(seed=seed)
        opts = options or {}
        rng = self.np_random
        cid = opts.get("condition") or self.condition_ids[int(rng.integers(len(self.condition_ids)))]
        if cid not in self.replay.conditions:
            raise ValueError(f"unknown condition {cid!r}")
        cond = self.replay.conditions[cid]
        cca_name = opts.get("start_cca") or self.start_cca
        a0 = self.actions.index(cca_name) if cca_name else int(rng.integers(len(self.actions)))
        if "start_bin" in opts:
            k0 = int(opts["start_bin"])
            if not cond.first_decision <= k0 < cond.length - 1:
                raise ValueError(f"start_bin must be in [{cond.first_decision}, {cond.length - 2}], got {k0}")
        elif self.start == "random":
            hi = cond.first_decision + max(1, (cond.length - 1 - cond.first_decision) // 2)
            k0 = int(rng.integers(cond.first_decision, hi))
        else:
            k0 = cond.first_decision
        # the episode starts in a static trace of the starting CCA, or in a self-play trace
        # whose agent runs it at k0 (envs/replay.py): each such trace equally likely
        starts = [j for j, t in enumerate(cond.traces)
                  if (t.static and t.start == a0) or (t.self_play and t.cca[k0] == a0)]
        self._trace = starts[int(rng.integers(len(starts)))] if len(starts) > 1 else starts[0]
        self._cond, self._k, self._steps = cond, k0, 0
        self._hist.clear()
        for k in range(k0 - self.window + 1, k0 + 1):
            self._hist.append((self._trace, k))
        obs = self._observe()
        info = self._info(cond.traces[self._trace], k0, terms=None)
        return obs, info

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self._cond is None:
            raise RuntimeError("call reset() before step()")
        a = int(action)
        if not 0 <= a < len(self.actions):
            raise ValueError(f"action must be in [0, {len(self.actions) - 1}], got {action!r}")
        cond, i, k = self._cond, self._trace, self._k
        current = int(cond.traces[i].cca[k])
        j = cond.next_trace(i, k, a, self.np_random)
        if j is None:  # no recorded interval for this choice: the data ends here
            return self._observe(), 0.0, False, True, self._info(cond.traces[i], k, terms=None)
        t = cond.traces[j]
        k1 = k + 1
        r, terms = reward(self.reward_config, throughput_mbps=float(t.throughput_mbps[k1]),
                          rtt_ms=float(t.rtt_ms[k1]), loss=float(t.loss[k1]), jain=float(t.jain[k1]),
                          thratio=float(t.thratio[k1]), min_share=float(t.min_share[k1]),
                          utilisation=float(t.utilisation[k1]) if t.utilisation is not None else math.nan,
                          switched=a != current)
        self._trace, self._k = j, k1
        self._steps += 1
        self._hist.append((j, k1))
        truncated = k1 + 1 >= cond.length or (self.max_steps is not None and self._steps >= self.max_steps)
        info = self._info(t, k1, terms=terms)
        info["switched"] = a != current
        return self._observe(), r, False, truncated, info

    def render(self) -> str | None:
        if self.render_mode != "ansi" or self._cond is None:
            return None
        m = self._last
        return (f"{self._cond.id} bin {self._k} {m.get('cca')}: {m.get('throughput_mbps', 0):.1f} Mb/s "
                f"rtt {m.get('rtt_ms', 0):.1f} ms loss {100 * m.get('loss', 0):.2f} % jain {m.get('jain', 1):.2f}")

    # ------------------------------------------------------------- helpers ---

    @property
    def condition(self) -> Condition | None:
        return self._cond

    def current_action(self) -> int:
        assert self._cond is not None
        return int(self._cond.traces[self._trace].cca[self._k])

    def oracle_action(self) -> int:
        """Paper 002's evaluation function's choice for the next interval (uses the recorded future)."""
        assert self._cond is not None
        cond, i, k = self._cond, self._trace, self._k
        thr, rtt, loss = [], [], []
        for a in range(len(self.actions)):
            tiers = cond.candidates(i, k, a) if k + 1 < cond.length else []
            j = next((tier[0] for tier in tiers if tier), None)
            if j is None:
                thr.append(math.nan)
                rtt.append(math.nan)
                loss.append(math.nan)
            else:
                t = cond.traces[j]
                thr.append(t.throughput_mbps[k + 1])
                rtt.append(t.rtt_ms[k + 1])
                loss.append(t.loss[k + 1])
        scores = eval_scores(thr, rtt, loss)
        if not np.isfinite(scores).any():
            return self.current_action()
        return evaluation_choice(scores, self.current_action())

    def _observe(self) -> np.ndarray:
        assert self._cond is not None
        traces = self._cond.traces
        raw = np.stack([traces[j].raw[k] for j, k in self._hist])[None]
        t = traces[self._trace]
        return assemble(raw, np.array([t.cca[self._k]]), t.context[self._k][None], self.normalisation,
                        len(self.actions))[0]

    def _info(self, t: Any, k: int, terms: dict[str, float] | None) -> dict[str, Any]:
        assert self._cond is not None
        cca = int(t.cca[k])
        self._last = {
            "condition": self._cond.id, "trace": t.id, "bin": k,
            "cca": self.actions[cca] if cca >= 0 else None,
            "throughput_mbps": float(t.throughput_mbps[k]), "rtt_ms": float(t.rtt_ms[k]),
            "loss": float(t.loss[k]), "jain": float(t.jain[k]), "n_flows": int(t.n_flows[k]),
            "min_share": float(t.min_share[k]),
        }
        info = dict(self._last)
        info["oracle_action"] = self.oracle_action()
        if terms is not None:
            info["reward_terms"] = terms
        return info


register()  # gymnasium is imported now (envs/__init__.py: registration is lazy)
