"""Evaluate policies on held-out conditions: the DQN against static CCAs and paper 002's function.

numpy only (the policy file's forward pass); no TensorFlow.

The episodes are deterministic: every evaluated condition, starting from the
first decision bin, once per starting CCA (the flow ran it until then).  The
policies compared:

* ``dqn``          -- the policy file, greedy
* ``static:<cca>`` -- never switch; its episodes start on that CCA (one per condition)
* ``evalfn``       -- paper 002's evaluation function used as a policy (70 % throughput,
                      20 % latency, 10 % loss on the interval each CCA would produce;
                      it peeks at the recorded future, so it is an oracle for those three
                      metrics, blind to fairness and switching costs)
* ``random``       -- uniform random choice each interval (seeded)

Per policy: mean cumulative reward per episode (and its standard deviation),
accuracy (share of decisions equal to the evaluation function's choice, paper
002's accuracy), and the mean throughput, RTT, loss, Jain's index and switches
per episode.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ccswitch.envs.cc_env import CongestionControlEnv

__all__ = ["EpisodeStats", "PolicyStats", "evaluate", "markdown_table", "run_episode", "summarise"]

Chooser = Callable[[np.ndarray, dict[str, Any], CongestionControlEnv], int]


@dataclass
class EpisodeStats:
    policy: str
    condition: str
    start_cca: str
    steps: int
    total_reward: float
    accuracy: float
    throughput_mbps: float
    rtt_ms: float
    loss: float
    jain: float
    switches: int
    actions: list[str] = field(default_factory=list)
    min_share: float = math.nan
    """Mean over the episode of the smallest bulk flow's throughput / the mean (the matrix's target)."""


@dataclass
class PolicyStats:
    policy: str
    episodes: int
    reward_mean: float
    reward_std: float
    accuracy: float
    throughput_mbps: float
    rtt_ms: float
    loss: float
    jain: float
    switches: float
    min_share: float = math.nan


def run_episode(env: CongestionControlEnv, choose: Chooser, *, policy: str, condition: str, start_cca: str,
                seed: int = 0) -> EpisodeStats:
    obs, info = env.reset(seed=seed, options={"condition": condition, "start_cca": start_cca})
    total, steps, correct, switches = 0.0, 0, 0, 0
    thr, rtt, loss, jain, acts, mins = [], [], [], [], [], []
    while True:
        a = int(choose(obs, info, env))
        correct += int(a == info["oracle_action"])
        obs, r, term, trunc, info = env.step(a)
        if "reward_terms" in info:  # a real step (not the end of data)
            total += r
            steps += 1
            switches += int(info.get("switched", False))
            thr.append(info["throughput_mbps"])
            rtt.append(info["rtt_ms"])
            loss.append(info["loss"])
            jain.append(info["jain"])
            mins.append(info.get("min_share", math.nan))
            acts.append(env.actions[a])
        if term or trunc:
            break

    def mean(x: list[float]) -> float:
        v = [y for y in x if not math.isnan(y)]
        return float(np.mean(v)) if v else math.nan

    return EpisodeStats(policy, condition, start_cca, steps, total, correct / max(steps, 1), mean(thr), mean(rtt),
                        mean(loss), mean(jain), switches, acts, mean(mins))


def summarise(episodes: Sequence[EpisodeStats]) -> list[PolicyStats]:
    out = []
    for name in dict.fromkeys(e.policy for e in episodes):
        eps = [e for e in episodes if e.policy == name]
        rewards = np.array([e.total_reward for e in eps])
        w = np.array([e.steps for e in eps], dtype=float)

        def wmean(attr: str, eps: list[EpisodeStats] = eps, w: np.ndarray = w) -> float:
            v = np.array([getattr(e, attr) for e in eps], dtype=float)
            ok = ~np.isnan(v)
            return float(np.average(v[ok], weights=w[ok])) if ok.any() and w[ok].sum() > 0 else math.nan

        out.append(PolicyStats(name, len(eps), float(rewards.mean()), float(rewards.std()), wmean("accuracy"),
                               wmean("throughput_mbps"), wmean("rtt_ms"), wmean("loss"), wmean("jain"),
                               float(np.mean([e.switches for e in eps])), wmean("min_share")))
    return out


def greedy(q_fn: Callable[[np.ndarray], np.ndarray]) -> Chooser:
    return lambda obs, info, env: int(np.argmax(q_fn(obs[None])[0]))


def evaluate(env: CongestionControlEnv, policies: dict[str, Chooser | None] | None = None, *,
             q_fn: Callable[[np.ndarray], np.ndarray] | None = None, baselines: bool = True,
             seed: int = 0) -> list[EpisodeStats]:
    """Episodes of every policy over every condition of *env* (see the module docstring).

    *q_fn* (observations [N, D] -> Q-values [N, A]) is evaluated as ``dqn``.
    """
    choosers: dict[str, Chooser] = {}
    if q_fn is not None:
        choosers["dqn"] = greedy(q_fn)
    for name, ch in (policies or {}).items():
        if ch is not None:
            choosers[name] = ch
    statics: dict[str, str] = {}
    if baselines:
        for a in env.actions:
            statics[f"static:{a}"] = a
            choosers[f"static:{a}"] = (lambda i: lambda obs, info, env: i)(env.actions.index(a))
        choosers["evalfn"] = lambda obs, info, env: int(info["oracle_action"])
        rng = np.random.default_rng(seed)
        choosers["random"] = lambda obs, info, env: int(rng.integers(len(env.actions)))
    out = []
    for name, choose in choosers.items():
        for cond in env.condition_ids:
            starts = [statics[name]] if name in statics else list(env.actions)
            for s in starts:
                out.append(run_episode(env, choose, policy=name, condition=cond, start_cca=s, seed=seed))
    return out


def markdown_table(stats: Sequence[PolicyStats]) -> str:
    head = ("| policy | episodes | reward / episode (mean ± sd) | accuracy vs evalfn | throughput Mb/s | RTT ms | "
            "loss % | Jain | min share | switches / episode |")
    lines = [head, "|" + "---|" * 10]
    for s in stats:
        lines.append(f"| {s.policy} | {s.episodes} | {s.reward_mean:.2f} ± {s.reward_std:.2f} | "
                     f"{100 * s.accuracy:.1f} % | {s.throughput_mbps:.2f} | {s.rtt_ms:.2f} | {100 * s.loss:.2f} | "
                     f"{s.jain:.3f} | {s.min_share:.2f} | {s.switches:.2f} |")
    return "\n".join(lines) + "\n"


def write_results(out_dir: Path, episodes: Sequence[EpisodeStats], stats: Sequence[PolicyStats],
                  meta: dict[str, Any]) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "evaluation.md").write_text(markdown_table(stats))
    (out_dir / "evaluation.json").write_text(json.dumps(
        {"meta": meta, "policies": [asdict(s) for s in stats]}, indent=2, default=str) + "\n")
    with (out_dir / "episodes.csv").open("w", newline="") as f:
        w = csv.writer(f)
        cols = [k for k in asdict(episodes[0]) if k != "actions"] + ["actions"] if episodes else []
        w.writerow(cols)
        for e in episodes:
            d = asdict(e)
            w.writerow([d[c] if c != "actions" else " ".join(d["actions"]) for c in cols])
