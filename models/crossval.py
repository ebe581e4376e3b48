"""Choose hyperparameters without touching the held-out conditions: k-fold cross-validation.

The corpus' held-out conditions (hp.test_fraction's split) are what the model
card reports; choosing settings by their score there would make that report
optimistic.  So settings are compared on the *training* conditions only: they
are cut into FOLDS folds (deterministically, by a hash of the id, like the
held-out split), each fold is held out in turn, a policy is trained on the
rest with each of SEEDS seeds, and scored greedily on the fold with the
default reward (the objective; a candidate may train on another reward).
Score of a candidate = mean over folds and seeds of (DQN reward per episode -
best static CCA's reward per episode on that fold), the static CCA picked in
hindsight; also reported: the margin over the static CCA that is best on the
fold's training conditions (what one would deploy without a DQN).

    python -m ccswitch.models.crossval --candidate default= \\
        --candidate ddqn=double_dqn=true --candidate 'long=episodes=2000;double_dqn=true'

prints one JSON line per run and a table at the end.  Each run is a normal
``train`` (about 15-20 s on the sample corpus).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import statistics
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ccswitch.envs.cc_env import CongestionControlEnv
from ccswitch.envs.replay import ReplayCorpus
from ccswitch.envs.reward import RewardConfig

from .dqn import Hyperparameters, apply_overrides, train
from .evaluate import evaluate, summarise
from .policy import load_policy

__all__ = ["FOLDS", "SEEDS", "cross_validate", "folds"]

FOLDS = 4
SEEDS = (1, 2, 3)


def folds(ids: Sequence[str], k: int = FOLDS) -> list[list[str]]:
    """*ids* cut into k folds by a hash of the id's group (deterministic, independent of order).

    The group is the scenario of a ``SCENARIO~FLOW`` id (envs/replay.py split_conditions): the
    flows of one run share a fold."""
    groups = sorted({c.split("~", 1)[0] for c in ids},
                    key=lambda g: hashlib.sha256(("fold:" + g).encode()).hexdigest())
    fold_of = {g: i % k for i, g in enumerate(groups)}
    return [sorted(c for c in ids if fold_of[c.split("~", 1)[0]] == i) for i in range(k)]


def cross_validate(overrides: Sequence[str], corpus: str | Path | None = None, *, k: int = FOLDS,
                   seeds: Sequence[int] = SEEDS, log: Any = print) -> dict[str, Any]:
    replay = ReplayCorpus.load(corpus, log=lambda m: None)
    base = apply_overrides(Hyperparameters(), list(overrides))
    train_ids, _held_out = replay.split(base.test_fraction)  # the held-out conditions are never used here
    objective = RewardConfig()
    rows = []
    chosen_static: dict[int, str] = {}
    for f, fold in enumerate(folds(train_ids, k)):
        rest = [c for c in train_ids if c not in fold]
        for seed in seeds:
            hp = apply_overrides(base, [f"seed={seed}", "eval_interval=0"])
            with tempfile.TemporaryDirectory() as tmp:
                res = train(hp, replay, Path(tmp), progress=False, plots=False, tensorboard=False,
                            log=lambda m: None, split=(rest, fold))
                pol = load_policy(res.policy_path)
            env = CongestionControlEnv(replay, conditions=fold, reward_config=objective,
                                       normalisation=pol.normalisation, start="first")
            st = {s.policy: s for s in summarise(evaluate(env, q_fn=pol.q_values))}
            best_static = max(v.reward_mean for n, v in st.items() if n.startswith("static:"))
            if f not in chosen_static:
                chosen_static[f] = _best_static_on(replay, rest, objective)
            chosen = chosen_static[f]
            row = {"fold": f, "seed": seed, "dqn": st["dqn"].reward_mean, "best_static": best_static,
                   "chosen_static": chosen, "chosen_static_reward": st[f"static:{chosen}"].reward_mean,
                   "random": st["random"].reward_mean, "margin": st["dqn"].reward_mean - best_static,
                   "margin_chosen": st["dqn"].reward_mean - st[f"static:{chosen}"].reward_mean,
                   "accuracy": st["dqn"].accuracy, "wall_s": round(res.wall_time_s, 1)}
            rows.append(row)
            log(json.dumps({"overrides": list(overrides), **row}))
    margins = [r["margin"] for r in rows]
    return {"overrides": list(overrides), "runs": len(rows), "margin_mean": statistics.fmean(margins),
            "margin_sd": statistics.pstdev(margins), "wins": sum(m > 0 for m in margins),
            "margin_chosen_mean": statistics.fmean(r["margin_chosen"] for r in rows),
            "dqn_mean": statistics.fmean(r["dqn"] for r in rows),
            "accuracy_mean": statistics.fmean(r["accuracy"] for r in rows), "rows": rows}


def _best_static_on(replay: ReplayCorpus, ids: Sequence[str], objective: RewardConfig) -> str:
    """The static CCA with the best reward per episode on *ids*: what one would deploy without the DQN."""
    env = CongestionControlEnv(replay, conditions=ids, reward_config=objective, start="first")
    st = summarise(evaluate(env, q_fn=None))
    best = max((s for s in st if s.policy.startswith("static:")), key=lambda s: s.reward_mean)
    return best.policy.removeprefix("static:")


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--candidate", action="append", required=True, metavar="NAME=K=V;K=V",
                    help="a named set of hyperparameter overrides (as ccswitch train --set), ;-separated")
    ap.add_argument("--data", default=None, help="corpus (default: datasets/sample)")
    ap.add_argument("--folds", type=int, default=FOLDS)
    ap.add_argument("--seeds", default=",".join(map(str, SEEDS)))
    args = ap.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    results = {}
    for cand in args.candidate:
        name, _, spec = cand.partition("=")
        ov = [x for x in spec.split(";") if x]
        results[name] = cross_validate(ov, args.data, k=args.folds, seeds=seeds)
    print("| candidate | overrides | runs | DQN - best static of the fold (mean ± sd) | runs won | "
          "DQN - static chosen on the other folds | accuracy |")
    print("|---|---|---|---|---|---|---|")
    for name, r in results.items():
        print(f"| {name} | {' '.join(r['overrides']) or '(defaults)'} | {r['runs']} | "
              f"{r['margin_mean']:+.2f} ± {r['margin_sd']:.2f} | {r['wins']}/{r['runs']} | "
              f"{r['margin_chosen_mean']:+.2f} | {100 * r['accuracy_mean']:.1f} % |")
    if any(math.isnan(r["margin_mean"]) for r in results.values()):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
