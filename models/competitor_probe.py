"""Can a managed flow tell what it competes with?  A probe of the corpus before any training.

    python -m ccswitch.models.competitor_probe [--data datasets/space] [--plot docs/competitor-probe.png]

Which CCA the managed population should run depends on the unmanaged hosts beside it
(docs/learning.md, "The baselines under the current guard"): BBR beside BBR/PCC hosts and
when every client is managed, CUBIC beside CUBIC/Reno hosts, which BBR starves.  Counted in
conditions that meet all three targets, making that choice right doubles them
(models/ceiling.py).  A daemon sees only its own flows, so a policy can make the choice
only if a flow's own counters reveal the competitor.  This module measures whether they do:

* KINDS: two labels per population condition, read from its manifest: an unmanaged BBR or
  PCC host on the path (a "hog": it fills the queue whatever the losses); an unmanaged
  CUBIC or Reno host on the path (loss-based: BBR starves it).
* COUNTERS: the agent flow's own kernel counters, more than the policy's features (cwnd,
  RTT variance, inflight, retransmissions, ...), averaged over seconds OBS_FROM_S to
  OBS_TO_S of the run under each starting CCA: what a daemon has seen by the time it must
  act for the judged last half to feel it.
* Per counter, the AUC of each kind (0.5: no information; 0 or 1: separates the kinds),
  with the range that labels shuffled between scenarios reach (NULL_DRAWS draws; the
  conditions of one scenario share its labels, so they move together).
* A logistic classifier on all counters together (models/ceiling.py's, cross-validated by
  scenario), its accuracy against the base rate (always guessing the commoner answer).
* What the choice is worth: the targets met by the RULES that turn a kind into the managed
  population's CCA, with the kind known and with it guessed by the classifiers: a perfect and
  a realistic competitor detector.

Linear and per-counter probes are the right size for ~60 scenarios (models/ceiling.py says
why).  numpy only; ~20 s on the space corpus.
"""

from __future__ import annotations

import argparse
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ccswitch.datasets.trace import FlowBins, bin_flows, find_captures
from ccswitch.envs.replay import ReplayCorpus

from .ceiling import FOLDS, Outcomes, cross_validated_labels, fit_softmax, outcomes, predict, scenario_folds, subset

OBS_FROM_S = 2.0
"""Start of the window: after the flows connect (envs/replay.py's warm-up)."""
OBS_TO_S = 10.0
"""End of the window: a third of a 30 s run, so that a switch then settles before the judged last half."""
NULL_DRAWS = 200
"""Scenario-level label shuffles for the AUC's no-information range."""
SEED = 0

HOGS = ("bbr", "pcc")
LOSS_BASED = ("cubic", "reno")
KINDS = {
    "hog": "an unmanaged BBR/PCC host on the path",
    "loss-based": "an unmanaged CUBIC/Reno host on the path",
}


def _ratio(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(b > 0, a / b, np.nan)


COUNTERS: dict[str, Callable[[FlowBins], np.ndarray]] = {
    # per bin; averaged over the window (the swing is the window's spread instead)
    "log cwnd (segments)": lambda f: np.log(np.maximum(f["cwnd_segs"], 1.0)),
    "loss rate": lambda f: f["loss_rate"],
    "log RTT / min RTT": lambda f: np.log(np.clip(_ratio(f["rtt_us"], f["min_rtt_us"]), 1.0, 100.0)),
    "RTT variance / RTT": lambda f: _ratio(f["rttvar_us"], f["rtt_us"]),
    "log min RTT (ms)": lambda f: np.log(np.maximum(f["min_rtt_us"] / 1e3, 1e-2)),
    "log throughput (Mbit/s)": lambda f: np.log(np.maximum(f["throughput_bps"] / 1e6, 1e-3)),
    "inflight / cwnd": lambda f: _ratio(f["inflight_segs"], f["cwnd_segs"]),
    "log delivery rate / throughput": lambda f: np.log(np.clip(_ratio(f["delivery_rate_bps"], f["throughput_bps"]),
                                                               1e-2, 1e2)),
    "retransmitted / delivered": lambda f: _ratio(f["retrans_segs"], f["delivered_segs"]),
}
SWING = "throughput swing (std of log)"
"""One more counter: how much the flow's throughput moves within the window (a sawtooth or not)."""
COUNTER_NAMES = (*COUNTERS, SWING)


@dataclass
class Probe:
    outcomes: Outcomes
    """The population conditions' outcomes per arm (models/ceiling.py)."""
    kinds: dict[str, np.ndarray]
    """bool [N] per KINDS key."""
    counters: np.ndarray
    """float [A, N, len(COUNTER_NAMES)]: the agent's counters under each starting arm."""


def window_counters(bins: FlowBins, interval_s: float) -> np.ndarray:
    lo, hi = round(OBS_FROM_S / interval_s), round(OBS_TO_S / interval_s)
    sl = slice(lo, hi)
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a counter the kernel never filled in the window
        values = [float(np.nanmean(fn(bins)[sl])) for fn in COUNTERS.values()]
        thr = np.log(np.maximum(bins["throughput_bps"][sl] / 1e6, 1e-3))
        values.append(float(np.nanstd(thr)))
    return np.nan_to_num(np.array(values))


def competitor_kinds(competitors: Sequence[dict]) -> dict[str, bool]:
    unmanaged = [c.get("cca") for c in competitors if not c.get("managed")]
    return {"hog": any(c in HOGS for c in unmanaged), "loss-based": any(c in LOSS_BASED for c in unmanaged)}


def probe(replay: ReplayCorpus, data: Sequence[str | Path]) -> Probe:
    everything = outcomes(replay)
    o = subset(everything, np.array([not i.endswith(".solo") for i in everything.ids]))
    paths = {c.id: c for root in data for c in find_captures(root)}
    kinds: dict[str, list[bool]] = {k: [] for k in KINDS}
    counters = []
    for cid in o.ids:
        c = replay.conditions[cid]
        for k, v in competitor_kinds(c.competitors).items():
            kinds[k].append(v)
        per_arm = []
        for a in range(len(replay.actions)):
            cap = paths[c.traces[c.static_trace(a)].id]
            agent = int(cap.agent_flow()["flow_id"])
            dt = cap.interval_s
            n = round(float(cap.manifest.get("duration_s") or 0) / dt) or None
            bins = bin_flows(cap.samples(), float(cap.manifest["t0_epoch"]), dt, n, [agent])[agent]
            per_arm.append(window_counters(bins, dt))
        counters.append(per_arm)
    return Probe(o, {k: np.array(v) for k, v in kinds.items()}, np.array(counters).transpose(1, 0, 2))


def auc(score: np.ndarray, label: np.ndarray) -> float:
    """Probability that a random positive scores above a random negative (ties count a half)."""
    pos, neg = score[label], score[~label]
    if not len(pos) or not len(neg):
        return math.nan
    greater = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return float(greater / (len(pos) * len(neg)))


def null_auc_range(score: np.ndarray, label: np.ndarray, groups: np.ndarray,
                   rng: np.random.Generator) -> tuple[float, float]:
    """2.5th and 97.5th percentile of the AUC with the labels shuffled between scenarios."""
    scen = sorted(set(groups))
    of = {g: bool(label[groups == g][0]) for g in scen}
    draws = []
    for _ in range(NULL_DRAWS):
        shuffled = dict(zip(scen, rng.permutation([of[g] for g in scen]), strict=True))
        draws.append(auc(score, np.array([shuffled[g] for g in groups])))
    return float(np.nanpercentile(draws, 2.5)), float(np.nanpercentile(draws, 97.5))


def cross_validated_single_counter(x: np.ndarray, label: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """The kind guessed from one counter, the one that separates the kinds best on the training folds
    (largest |AUC - 0.5|), through a one-input logistic classifier: the all-counter classifier's
    fewer-parameter sibling, for a corpus of ~60 scenarios."""
    folds = scenario_folds(groups)
    got = np.empty(len(label), dtype=bool)
    for f in range(FOLDS):
        tr, te = folds != f, folds == f
        j = int(np.nanargmax([abs(auc(x[tr, j], label[tr]) - 0.5) for j in range(x.shape[1])]))
        got[te] = predict(fit_softmax(x[tr, j:j + 1], label[tr].astype(np.int64), 2), x[te, j:j + 1]).astype(bool)
    return got


RULES = {
    # name: (kind, the CCA when that kind is on the path, the CCA otherwise)
    "the hog rule": ("hog", "bbr", "cubic"),
    "the loss-based rule": ("loss-based", "cubic", "bbr"),
}
"""The two ways of turning a kind into the population's CCA: BBR beside a hog, else CUBIC; or CUBIC
beside a CUBIC/Reno host (which BBR starves), else BBR.  They differ where every client is managed
and where both kinds are on the path."""


def rule_pick(rule: str, present: np.ndarray, actions: Sequence[str]) -> np.ndarray:
    _, yes, no = RULES[rule]
    return np.where(present, actions.index(yes), actions.index(no))


def guessed_kinds(p: Probe, n_actions: int) -> dict[tuple[str, int, str], np.ndarray]:
    """Each kind as the classifiers guess it, per starting arm: (kind, arm, "every" | "one") -> bool [N]."""
    o, out = p.outcomes, {}
    for k, label in p.kinds.items():
        for a in range(n_actions):
            x = p.counters[a]
            out[k, a, "every"] = cross_validated_labels(x, label.astype(np.int64), o.groups, 2).astype(bool)
            out[k, a, "one"] = cross_validated_single_counter(x, label, o.groups)
    return out


def report(p: Probe, actions: Sequence[str]) -> str:
    o, n = p.outcomes, len(p.outcomes.ids)
    rng = np.random.default_rng(SEED)
    guess = guessed_kinds(p, len(actions))
    lines = [f"{n} population conditions of {len(set(o.groups))} scenarios; counters of the agent flow over "
             f"{OBS_FROM_S:g}-{OBS_TO_S:g} s under each starting CCA.  Accuracy: cross-validated by scenario.", "",
             "| kind of competitor | flow on | best single counter | AUC | no-information range "
             "| accuracy, all counters | accuracy, one counter | base rate |", "|---|---|---|---:|---:|---:|---:|---:|"]
    for k, label in p.kinds.items():
        base = max(label.mean(), 1 - label.mean())
        for a, name in enumerate(actions):
            x = p.counters[a]
            aucs = [auc(x[:, j], label) for j in range(x.shape[1])]
            j = int(np.nanargmax(np.abs(np.array(aucs) - 0.5)))
            lo, hi = null_auc_range(x[:, j], label, o.groups, rng)
            every, one = ((guess[k, a, how] == label).mean() for how in ("every", "one"))
            lines.append(f"| {KINDS[k]} ({int(label.sum())}) | {name} | {COUNTER_NAMES[j]} | {aucs[j]:.2f} | "
                         f"{lo:.2f}-{hi:.2f} | {every:.2f} | {one:.2f} | {base:.2f} |")
    choices = [(f"always {a}", np.full(n, i)) for i, a in enumerate(actions)]
    for rule, (kind, yes, no) in RULES.items():
        present = p.kinds[kind]
        choices.append((f"{rule} ({yes} if {kind}, else {no}), kind known (not observable)",
                        rule_pick(rule, present, actions)))
        for a, name in enumerate(actions):
            for how, counters in (("every", "every counter"), ("one", "one counter")):
                choices.append((f"{rule}, kind guessed from {counters} on {name}",
                                rule_pick(rule, guess[kind, a, how], actions)))
    choices.append(("best arm in hindsight", o.static.argmax(1)))
    lines += ["", "| the managed population's CCA | mean last-half min share | conditions meeting all three targets |",
              "|---|---:|---:|"]
    rows = np.arange(n)
    lines += [f"| {name} | {o.static[rows, pick].mean():.3f} | {int(o.met[rows, pick].sum())} of {n} |"
              for name, pick in choices]
    return "\n".join(lines)


def plot(p: Probe, actions: Sequence[str], png: Path) -> None:
    """Per counter, the AUC of each kind under each starting CCA, beside the no-information 0.5."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(p.kinds), figsize=(6.0 * len(p.kinds), 4.6), sharey=True, squeeze=False)
    y = np.arange(len(COUNTER_NAMES))
    h = 0.8 / len(actions)
    for ax, (k, label) in zip(axes[0], p.kinds.items(), strict=True):
        for a, name in enumerate(actions):
            aucs = [auc(p.counters[a][:, j], label) for j in range(len(COUNTER_NAMES))]
            ax.barh(y + (a - (len(actions) - 1) / 2) * h, np.array(aucs) - 0.5, height=h, left=0.5,
                    color=f"C{a}", label=f"flow started on {name}")
        ax.axvline(0.5, color="k", linewidth=1)
        lo, hi = null_auc_range(p.counters[0][:, 0], label, p.outcomes.groups, np.random.default_rng(SEED))
        ax.axvspan(lo, hi, color="0.85", zorder=0, label="95 % range with the kinds shuffled "
                   "between scenarios")
        ax.set_xlim(0, 1)
        ax.set_yticks(y, COUNTER_NAMES, fontsize=8)
        ax.set_xlabel("AUC (0.5: the counter says nothing about the kind)")
        ax.set_title(f"{KINDS[k]}\n{int(label.sum())} of {len(label)} conditions", fontsize=10)
        ax.grid(axis="x", alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="lower center", ncol=len(labels))
    fig.suptitle(f"Do a flow's own counters ({OBS_FROM_S:g}-{OBS_TO_S:g} s) tell what it competes with?",
                 fontsize=11)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ccswitch.models.competitor_probe",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--data", action="append", help="corpus folder (repeatable; default: datasets/space)")
    ap.add_argument("--plot", type=Path, metavar="PNG", help="also write the AUC per counter here")
    args = ap.parse_args(argv)
    data = args.data or ["datasets/space"]
    replay = ReplayCorpus.load(data, log=lambda m: None)
    p = probe(replay, data)
    print(report(p, replay.actions))
    if args.plot:
        plot(p, replay.actions, args.plot)
        print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
