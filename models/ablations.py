"""Offline ablations of the DQN on a corpus: which learning choices pay, before any testbed run.

    python -m ccswitch.models.ablations --data datasets/space --out results/ablations \\
        [--seeds 1,2] [--only NAME ...] [--doc docs/ablations.md]

Each variant (``VARIANTS``: paper 002's DQN, then one change at a time from the
issue-11 list, then combinations) is trained with ``ccswitch train``'s code on the
corpus' training conditions (the corpus' own held-out split, by scenario: all of it
inside the space's *train* split) and evaluated greedily on the held-out conditions,
once per starting CCA.  The table reports the mean over seeds of

    min share   the smallest bulk flow's throughput / the mean, per interval (the matrix's
                first target: >= 0.8), averaged over the episodes' intervals
    reward      per episode, with the *minshare* reward (the objective every variant is
                scored on, whatever it trained on)
    Jain, the agent's throughput, switches per episode,

beside the static CCAs (every managed flow on one CCA) and the best static CCA per
condition picked in hindsight.  Offline numbers only pre-select: the replay cannot show
what happens when daemons disagree (datasets/from_matrix.py), so the variants that lead
here go to the dev split end to end (``ccswitch evaluate POLICY --split dev``), and that
decides.  Resumable: a (variant, seed) with a policy.json is not trained again.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["VARIANTS", "run_ablations"]

VARIANTS: dict[str, list[str]] = {
    "paper002": [],
    "minshare": ["reward.fairness=minshare"],
    "minshare+double": ["reward.fairness=minshare", "double_dqn=true"],
    "minshare+dueling": ["reward.fairness=minshare", "dueling=true"],
    "minshare+nstep3": ["reward.fairness=minshare", "n_step=3"],
    "minshare+cql": ["reward.fairness=minshare", "cql_alpha=0.5"],
    "minshare+gamma0.8": ["reward.fairness=minshare", "gamma=0.8"],
    "minshare+all": ["reward.fairness=minshare", "double_dqn=true", "dueling=true", "n_step=3"],
    "minshare+all+cql": ["reward.fairness=minshare", "double_dqn=true", "dueling=true", "n_step=3",
                         "cql_alpha=0.5"],
    "minshare+all+cql+switch1": ["reward.fairness=minshare", "double_dqn=true", "dueling=true", "n_step=3",
                                 "cql_alpha=0.5", "reward.w_switch=1.0"],
    "minshare+all+cql+fair4": ["reward.fairness=minshare", "double_dqn=true", "dueling=true", "n_step=3",
                               "cql_alpha=0.5", "reward.w_fairness=4.0"],
}
"""Name -> ``--set`` overrides of models/dqn.py Hyperparameters."""
OBJECTIVE = {"fairness": "minshare"}
"""The reward every variant is scored on (RewardConfig fields)."""


def _score(policy_path: Path, replay: Any, ids: Sequence[str]) -> dict[str, dict[str, float]]:
    from ccswitch.envs.cc_env import CongestionControlEnv
    from ccswitch.envs.reward import RewardConfig

    from .evaluate import evaluate, summarise
    from .policy import load_policy

    pol = load_policy(policy_path)
    env = CongestionControlEnv(replay, conditions=list(ids), reward_config=RewardConfig.from_dict(OBJECTIVE),
                               normalisation=pol.normalisation, start="first")
    episodes = evaluate(env, q_fn=pol.q_values)
    stats = summarise(episodes)
    out = {s.policy: {"reward": s.reward_mean, "min_share": s.min_share, "jain": s.jain,
                      "throughput_mbps": s.throughput_mbps, "switches": s.switches} for s in stats}
    # the best static CCA per condition, picked in hindsight by min share (what a perfect chooser of
    # one CCA per condition would reach; it needs the future, so it is a bound, not a policy)
    best = []
    for cid in ids:
        by_cca = [e for e in episodes if e.condition == cid and e.policy.startswith("static:")]
        if by_cca:
            top = max(by_cca, key=lambda e: (e.min_share, e.total_reward))
            best.append(top)
    if best:
        out["hindsight:best-static"] = {
            "reward": statistics.fmean(e.total_reward for e in best),
            "min_share": statistics.fmean(e.min_share for e in best), "jain": statistics.fmean(e.jain for e in best),
            "throughput_mbps": statistics.fmean(e.throughput_mbps for e in best), "switches": 0.0}
    return out


def run_ablations(data: Path, out: Path, *, seeds: Sequence[int] = (1, 2), only: Sequence[str] = (),
                  log: Any = print) -> dict[str, Any]:
    from ccswitch.envs.replay import ReplayCorpus

    from .dqn import Hyperparameters, apply_overrides, train

    replay = ReplayCorpus.load(data, log=lambda m: None)
    names = [n for n in VARIANTS if not only or n in only]
    if only and (bad := sorted(set(only) - set(VARIANTS))):
        raise ValueError(f"unknown variant {bad[0]!r} (known: {', '.join(VARIANTS)})")
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {}
    todo = [(n, s) for n in names for s in seeds]
    t0 = time.monotonic()
    for i, (name, seed) in enumerate(todo):
        run = out / name / f"seed-{seed}"
        if not (run / "policy.json").is_file():
            hp = apply_overrides(Hyperparameters(seed=seed), VARIANTS[name])
            train(hp, replay, run, progress=False, plots=False, tensorboard=False, log=lambda m: None)
        held = json.loads((run / "config.json").read_text())
        scores = _score(run / "policy.json", replay, held["test_conditions"])
        scores["wall_time_s"] = held["wall_time_s"]
        (run / "ablation.json").write_text(json.dumps(scores, indent=2) + "\n")
        results.setdefault(name, {})[seed] = scores
        done = i + 1
        eta = (time.monotonic() - t0) / done * (len(todo) - done)
        log(f"ablations: [{done}/{len(todo)}] {name} seed {seed}: min share {scores['dqn']['min_share']:.3f}, "
            f"reward {scores['dqn']['reward']:.2f} (ETA {eta / 60:.0f} min)")
    return results


def _mean(rows: list[dict[str, Any]], policy: str, key: str) -> float:
    v = [r[policy][key] for r in rows if policy in r and not math.isnan(r[policy][key])]
    return statistics.fmean(v) if v else math.nan


def table(results: dict[str, Any]) -> tuple[str, dict[str, float]]:
    lines = ["| variant | overrides | min share | reward / episode | Jain | throughput Mb/s | switches | "
             "train s |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    means = {}
    for name, by_seed in results.items():
        rows = list(by_seed.values())
        ms = _mean(rows, "dqn", "min_share")
        means[name] = ms
        sets = " ".join(VARIANTS[name]) or "-"
        lines.append(f"| {name} | `{sets}` | {ms:.3f} | {_mean(rows, 'dqn', 'reward'):.2f} | "
                     f"{_mean(rows, 'dqn', 'jain'):.3f} | {_mean(rows, 'dqn', 'throughput_mbps'):.1f} | "
                     f"{_mean(rows, 'dqn', 'switches'):.2f} | "
                     f"{statistics.fmean(r['wall_time_s'] for r in rows):.0f} |")
    any_rows = next(iter(results.values()))
    first = next(iter(any_rows.values()))
    for p in sorted(k for k in first if k.startswith(("static:", "hindsight:"))):
        lines.append(f"| {p} (baseline) | - | {first[p]['min_share']:.3f} | {first[p]['reward']:.2f} | "
                     f"{first[p]['jain']:.3f} | {first[p]['throughput_mbps']:.1f} | 0.00 | - |")
    return "\n".join(lines) + "\n", means


def plot(means: dict[str, float], statics: dict[str, float], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(means) + list(statics)
    vals = list(means.values()) + list(statics.values())
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(names) + 1.2))
    colors = ["tab:blue"] * len(means) + ["tab:gray"] * len(statics)
    ax.barh(names[::-1], vals[::-1], color=colors[::-1])
    ax.axvline(0.8, color="tab:red", ls="--", lw=1, label="target 0.8")
    ax.set_xlabel("mean min share on held-out conditions (offline replay)")
    ax.set_xlim(0, 1)
    ax.legend(loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m ccswitch.models.ablations", description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, required=True, help="corpus folder (e.g. datasets/space)")
    ap.add_argument("--out", type=Path, default=Path("results/ablations"))
    ap.add_argument("--seeds", default="1,2", help="comma-separated training seeds")
    ap.add_argument("--only", nargs="*", default=[], help="variant names (default: all)")
    ap.add_argument("--doc", type=Path, help="also write the table (Markdown) and a PNG beside it")
    args = ap.parse_args(argv)
    try:
        seeds = [int(s) for s in args.seeds.split(",") if s]
        results = run_ablations(args.data, args.out, seeds=seeds, only=args.only)
    except (ValueError, OSError) as e:
        ap.exit(1, f"ccswitch ablations: error: {' '.join(str(e).split())}\n")
    text, means = table(results)
    print(text)
    if args.doc:
        first = next(iter(next(iter(results.values())).values()))
        statics = {p: first[p]["min_share"] for p in sorted(first) if p.startswith(("static:", "hindsight:"))}
        png = plot(means, statics, args.doc.with_suffix(".png"))
        args.doc.write_text(f"Offline ablations on `{args.data}` (held-out conditions, seeds {args.seeds}); "
                            f"`python -m ccswitch.models.ablations --data {args.data} --seeds {args.seeds}`.\n\n"
                            f"{text}\n![min share]({png.name})\n")


if __name__ == "__main__":
    main()
