"""What choosing one CCA per condition can reach on a replay corpus: the data's ceiling.

    python -m ccswitch.models.ceiling --data datasets/space

The space corpus's counterfactual is "every managed flow of the scenario runs X"
(datasets/from_matrix.py), so a policy trained on it can at best learn, per condition,
which X to put the managed population on.  This module measures how much that choice is
worth and how much of it the observations reveal, before any DQN is trained:

* per condition, the last-half mean min share (the smallest active flow's throughput /
  the mean; the matrix targets' worst-flow term) of each static arm, of the best one in
  hindsight, and of the self-play run when the corpus has one (what the policy the
  captures ran actually got); and whether the arm meets all three of the matrix's
  targets on the last-half means (min share, Jain's index, utilisation: what issue 11
  counts; the two measures rank the arms differently);
* a multinomial logistic classifier, fitted on the agent's first OBS_BINS observations
  under one starting CCA (the BASE_FEATURES and local.* context, averaged), that picks
  the arm; scored by the min share of the arm it picks on held-out conditions
  (FOLDS-fold cross-validation grouped by scenario, as envs/replay.py splits);
* the same classifier given the scenario's parameters (rate, RTT, queue, loss, WiFi and
  the unmanaged competitors' CCAs: what a daemon cannot see), an upper reference for
  features that reveal competition;
* read with datasets/space-coordination, the unilateral conditions ``S~F.solo``: what one
  managed client gains or costs the worst flow by leaving CUBIC while the others stay.

A linear classifier is the right probe here: with ~60 scenarios, anything the DQN could
exploit and a linear read of the same inputs misses would be hard to tell from noise.
numpy only (no TensorFlow); ~10 s on the space corpus.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ccswitch.envs.replay import Condition, ReplayCorpus
from ccswitch.testbed.reports.run_metrics import TARGET_JAIN, TARGET_MIN_SHARE, TARGET_UTILISATION

OBS_BINS = 5
"""Decision intervals after the first decision whose observations the classifier sees."""
FOLDS = 5
L2 = 1e-2
"""Ridge penalty of the classifier (standardised inputs)."""
ITERATIONS = 3000
LEARNING_RATE = 0.1
SEED = 0
"""Seed of the scenario-to-fold assignment."""


@dataclass
class Outcomes:
    ids: list[str]
    groups: np.ndarray
    """Scenario of each condition (cross-validation keeps a scenario's conditions together)."""
    static: np.ndarray
    """float [N, A]: last-half mean min share with the managed population on each arm."""
    met: np.ndarray
    """bool [N, A]: the arm meets all three targets on its last-half means (meets_targets)."""
    self_play: np.ndarray
    """float [N]: the same for the condition's self-play run (NaN: none)."""
    observed: np.ndarray
    """float [A, N, F]: the agent's early observation under each starting arm."""
    context: np.ndarray
    """float [N, C]: the scenario's parameters (not observable by a daemon)."""


def last_half(c: Condition, j: int) -> float:
    return float(np.nanmean(c.traces[j].min_share[c.length // 2:c.length]))


def meets_targets(c: Condition, j: int) -> bool:
    """Every flow >= 0.8 of its fair share, Jain >= 0.95 and utilisation >= 0.9 on the last-half
    means of trace j (the matrix's targets, testbed/reports/run_metrics.py; the matrix computes
    them from each flow's last-half throughput, so this per-interval reading is a little stricter).
    A link of unknown rate (trace-driven) cannot meet the utilisation target."""
    t, sl = c.traces[j], slice(c.length // 2, c.length)
    util = float(np.nanmean(t.utilisation[sl])) if t.utilisation is not None else math.nan
    return bool(np.nanmean(t.min_share[sl]) >= TARGET_MIN_SHARE and np.nanmean(t.jain[sl]) >= TARGET_JAIN
                and util >= TARGET_UTILISATION)


def early_observation(c: Condition, j: int) -> np.ndarray:
    t = c.traces[j]
    sl = slice(c.first_decision, min(c.first_decision + OBS_BINS, c.length))
    return np.nan_to_num(np.r_[np.nanmean(t.raw[sl], axis=0), np.nanmean(t.context[sl], axis=0)])


def scenario_context(c: Condition) -> list[float]:
    link, queue = c.link, c.link.get("queue") or {}
    unmanaged = [x.get("cca") for x in c.competitors if not x.get("managed")]
    return [math.log(link.get("rate_mbit") or 50.0), math.log(link.get("rtt_base_ms") or 20.0),
            float(queue.get("bdp") or 1.0), float(queue.get("kind") == "codel"),
            float(queue.get("kind") == "dualpi2"), float((link.get("loss") or {}).get("kind", "none") != "none"),
            float(link.get("wifi", "none") != "none"),
            *(float(unmanaged.count(k)) for k in ("cubic", "bbr", "pcc", "reno")),
            float(sum(1 for x in c.competitors if x.get("managed")))]


def outcomes(replay: ReplayCorpus) -> Outcomes:
    n_act = len(replay.actions)
    ids, static, met, played, obs, ctx = [], [], [], [], [], []
    for cid, c in sorted(replay.conditions.items()):
        js = [c.static_trace(a) for a in range(n_act)]
        if any(j is None for j in js):
            continue
        sp = [j for j, t in enumerate(c.traces) if t.self_play]
        ids.append(cid)
        static.append([last_half(c, j) for j in js])
        met.append([meets_targets(c, j) for j in js])
        played.append(np.mean([last_half(c, j) for j in sp]) if sp else math.nan)
        obs.append([early_observation(c, j) for j in js])
        ctx.append(scenario_context(c))
    return Outcomes(ids, np.array([i.split("~")[0] for i in ids]), np.array(static),
                    np.array(met, dtype=bool).reshape(len(ids), n_act), np.array(played),
                    np.array(obs).transpose(1, 0, 2), np.array(ctx))


def fit_softmax(x: np.ndarray, y: np.ndarray, n_classes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    mu, sd = x.mean(0), x.std(0) + 1e-6
    xs = np.c_[(x - mu) / sd, np.ones(len(x))]
    w = np.zeros((xs.shape[1], n_classes))
    onehot = np.eye(n_classes)[y]
    for _ in range(ITERATIONS):
        z = xs @ w
        p = np.exp(z - z.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        w -= LEARNING_RATE * (xs.T @ (p - onehot) / len(xs) + L2 * w)
    return mu, sd, w


def predict(model: tuple[np.ndarray, np.ndarray, np.ndarray], x: np.ndarray) -> np.ndarray:
    mu, sd, w = model
    return (np.c_[(x - mu) / sd, np.ones(len(x))] @ w).argmax(1)


def scenario_folds(groups: np.ndarray) -> np.ndarray:
    """Fold of each condition: FOLDS folds of whole scenarios (a scenario's conditions share its run)."""
    scenarios = np.random.default_rng(SEED).permutation(sorted(set(groups)))
    fold_of = {g: i % FOLDS for i, g in enumerate(scenarios)}
    return np.array([fold_of[g] for g in groups])


def cross_validated_labels(x: np.ndarray, y: np.ndarray, groups: np.ndarray, n_classes: int) -> np.ndarray:
    """The classifier's label for each row, fitted on the other folds' scenarios only."""
    folds = scenario_folds(groups)
    got = np.empty(len(y), dtype=np.int64)
    for f in range(FOLDS):
        tr, te = folds != f, folds == f
        got[te] = predict(fit_softmax(x[tr], y[tr], n_classes), x[te])
    return got


def cross_validated_pick(x: np.ndarray, o: Outcomes) -> np.ndarray:
    """The arm the classifier picks for each condition (trained to pick the best min share)."""
    return cross_validated_labels(x, o.static.argmax(1), o.groups, o.static.shape[1])


def cross_validated_choice(x: np.ndarray, o: Outcomes) -> np.ndarray:
    """Min share of the arm the classifier picks for each condition, fitted without its scenario."""
    pick = cross_validated_pick(x, o)
    return o.static[np.arange(len(pick)), pick]


def subset(o: Outcomes, keep: np.ndarray) -> Outcomes:
    return Outcomes([i for i, k in zip(o.ids, keep, strict=True) if k], o.groups[keep], o.static[keep],
                    o.met[keep], o.self_play[keep], o.observed[:, keep], o.context[keep])


def report(replay: ReplayCorpus, everything: Outcomes | None = None) -> str:
    everything = everything or outcomes(replay)
    acts = replay.actions
    solo = np.array([i.endswith(".solo") for i in everything.ids])
    o = subset(everything, ~solo)
    n = len(o.ids)
    picks = [(f"always {a}", np.full(n, i)) for i, a in enumerate(acts)]
    picks.append(("best arm in hindsight (per condition)", o.static.argmax(1)))
    for i, a in enumerate(acts):
        picks.append((f"classifier on the flow's first {OBS_BINS} s under {a}", cross_validated_pick(o.observed[i], o)))
    picks.append(("classifier on the scenario's parameters (not observable)", cross_validated_pick(o.context, o)))
    rows = [(name, o.static[np.arange(n), p], o.met[np.arange(n), p]) for name, p in picks]
    with_sp = ~np.isnan(o.self_play)
    lines = [f"Corpus {replay.source}: {n} population conditions of {len(set(o.groups))} scenarios; best arm "
             "per condition " + ", ".join(f"{a} {int((o.static.argmax(1) == i).sum())}" for i, a in enumerate(acts))
             + ".", "",
             "| choice of the managed population's CCA | mean last-half min share | conditions >= 0.8 "
             "| conditions meeting all three targets |", "|---|---:|---:|---:|"]
    lines += [f"| {name} | {v.mean():.3f} | {int((v >= 0.8).sum())} of {n} | {int(m.sum())} of {n} |"
              for name, v, m in rows]
    if with_sp.any():
        m = with_sp.sum()
        lines += ["", f"Self-play runs (the policy on every managed client) in {m} conditions: mean min share "
                  f"{o.self_play[with_sp].mean():.3f} (>= 0.8 in {int((o.self_play[with_sp] >= 0.8).sum())}); "
                  f"in the same conditions always {acts[0]} {o.static[with_sp, 0].mean():.3f}, best arm "
                  f"{o.static[with_sp].max(1).mean():.3f}."]
    if solo.any():
        u = subset(everything, solo)
        k = len(u.ids)
        lines += ["", f"Unilateral conditions (one managed client deviates from {acts[0]}, the others stay): {k} "
                  f"of {len(set(u.groups))} scenarios.", "",
                  "| the deviating client's CCA | mean last-half min share | conditions >= 0.8 |", "|---|---:|---:|"]
        lines += [f"| {a}{' (nobody deviates)' if i == 0 else ''} | {u.static[:, i].mean():.3f} | "
                  f"{int((u.static[:, i] >= 0.8).sum())} of {k} |" for i, a in enumerate(acts)]
        best = u.static.max(1)
        lines.append(f"| best in hindsight | {best.mean():.3f} | {int((best >= 0.8).sum())} of {k} |")
    return "\n".join(lines)


def plot(everything: Outcomes, acts: Sequence[str], png: Path) -> None:
    """CDFs of the last-half min share per choice: the population conditions (left) and, when the
    corpus has them, the unilateral ones (right)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    solo = np.array([i.endswith(".solo") for i in everything.ids])
    panels = [("every managed client on the CCA", subset(everything, ~solo), "always ")]
    if solo.any():
        panels.append(("one managed client on the CCA, the others on " + acts[0], subset(everything, solo), ""))
    fig, axes = plt.subplots(1, len(panels), figsize=(6.2 * len(panels), 4.4), squeeze=False)
    for ax, (title, o, prefix) in zip(axes[0], panels, strict=True):
        curves = [(f"{prefix}{a}", o.static[:, i]) for i, a in enumerate(acts)]
        curves.append(("best in hindsight", o.static.max(1)))
        if not np.isnan(o.self_play).all():
            curves.append(("self-play (the policy)", o.self_play[~np.isnan(o.self_play)]))
        for k, (label, v) in enumerate(curves):
            x = np.sort(v)
            ax.step(x, np.arange(1, len(x) + 1) / len(x), where="post", color=f"C{k}",
                    linestyle="--" if label.startswith(("best", "self")) else "-", label=f"{label} ({v.mean():.2f})")
        ax.axvline(0.8, color="r", linestyle=":", linewidth=1)
        ax.set_xlabel("last-half min share (worst flow / fair share)")
        ax.set_ylabel("fraction of conditions")
        ax.set_title(f"{title}\n{len(o.ids)} conditions, {len(set(o.groups))} scenarios", fontsize=10)
        ax.set_xlim(0, 1.05)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left", title="choice (mean)", title_fontsize=8)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ccswitch.models.ceiling", description=__doc__.split("\n")[0])
    ap.add_argument("--data", action="append",
                    help="corpus folder (repeatable, e.g. --data datasets/space --data datasets/space-coordination; "
                         "default: datasets/space)")
    ap.add_argument("--plot", type=Path, metavar="PNG", help="also write the CDFs of min share per choice here")
    args = ap.parse_args(argv)
    replay = ReplayCorpus.load(args.data or "datasets/space", log=lambda m: None)
    o = outcomes(replay)
    print(report(replay, o))
    if args.plot:
        plot(o, replay.actions, args.plot)
        print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
