"""What the measured reward supports for LFQ's limit: paper 001's learned-limit targets against the data.

    python -m ccswitch.models.lfq_ceiling --data results/lfq/train.jsonl --data results/lfq/train-r2.jsonl \\
        [--alpha 10 --alpha 3 --alpha 1] [--kappa 0.15] [--actor models/lfq_actor.json] [--md F.md] [--plot F.png]

Issue 13 asks the learned limit to grow with the BDP for Reno (correlation >= 0.9) and
to be twice as large for Reno as for CUBIC, as paper 001 reports.  The shipped actor
does neither (docs/network/lfq.md).  Before blaming the learner, this module asks what
the logged experiments (``envs/lfq_env.py``: one random limit per flow from t_e to the
end, and what the flow then earned) say the best limit *is*, for a router that knew
everything about the flow:

1. **Per cell, no model**: per CCA x BDP tercile x limit octave (1-2, 2-4, ... packets),
   the mean reward normalised by the flow's share b (reward / b: the utilisation minus
   the queue's price, so flows of different b pool), with its standard error; the best
   octave of each cell.
2. **Privileged critic**: an ensemble of CRITICS MLPs Q(b, RTT, CCA, t_e, a) fitted by
   MSE on the normalised reward, whose inputs are the flow's *draw* (what no router
   sees: the asymmetric actor-critic's privileged critic).  Per logged state, its argmax
   over a grid of a is the limit a learner with full information would pick.  The same
   statistics as the issue's targets (late states, t_e >= 1 s): per CCA the mean limit,
   its correlation with the BDP, the bandwidth and the RTT, and Reno:CUBIC.
3. Optionally the shipped actor's limits on the same states (what it learned from the
   60 features), beside them.

The reward's queue price ALPHA (paper 001's tradeoff parameter; its authors' code uses
10 /s, which we ship) sets where the optimum lies: each packet held costs ALPHA x MTU
bytes/s, while the throughput a larger buffer buys shrinks once the limit nears the
BDP.  ``--alpha`` recomputes the reward from the logged throughput and mean queue for
other prices (the paper: "with ALPHA going to zero, the optimum policy approaches the
one in which the buffer size is large enough that a flow never underutilizes the link").
TensorFlow (the ``train`` extra); ~1 min per ALPHA on one core.  ``--kappa K`` adds the optimum under
lfq_actor.delay_reward (a deviation: the queue priced in BDPs, i.e. as queueing delay over the RTT;
docs/network/lfq.md "More data").

Samples collected with BIC (``lfq_train collect --sender bic``, or another profile of
testbed/runs/tcp_senders.py) are analysed the same way: inside this module the loss-based
CCA's slot is called "cubic" whichever ran it, and the tables and the plot name the CCA
that did.  One file set holds one CCA and one sender profile.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np

from .lfq_actor import KAPPA, action_for, delay_reward, limit_for, reward

CRITICS = 5          # ensemble size (each on a bootstrap of the samples)
HIDDEN = (64, 64)    # hidden layers (leaky ReLU), as lfq_train's critics
EPOCHS = 150         # passes over the samples per critic
BATCH = 64
LR = 1e-3            # Adam
GRID = 41            # actions a in [-1, 1] the argmax is taken over (limit 1..256, ~5 per octave)
LATE_S = 1.0         # the targets' states: experiments at t_e >= 1 s (docs/network/lfq.md)
FULL_LINK_BDP = {"reno": 1.0, "cubic": 0.43, "bic": 0.25}
"""The buffer (in BDPs) a single loss-based flow needs to keep the link full after its cut by beta:
(1 - beta) / beta, with beta 0.5 (Reno), 0.7 (CUBIC), 0.8 (BIC)."""
OCTAVES = (1, 2, 4, 8, 16, 32, 64, 128, 257)
BDP_TERCILES = (0.0, 8.0, 20.0, 1e9)


def share_of(row: dict[str, Any]) -> float:
    """The flow's fair share over its experiment's span, Mbit/s: the episode's b, or under a varying rate
    (envs/lfq_env.py, rate shapes) the mean share of that span as logged (``share_mbit``)."""
    return float(row.get("share_mbit") or row["draw"]["bandwidth_mbit"])


def reward_at(row: dict[str, Any], alpha: float) -> float:
    """Paper 001's reward (lfq_actor.reward) of a logged experiment at queue price *alpha*."""
    return reward(row["throughput_mbit"] * 1e6 / 8, row["mean_queue_pkts"], alpha)


def normalised(rows: Sequence[dict[str, Any]], alpha: float) -> np.ndarray:
    """reward / b (b in the reward's units, 1e6 B/s): utilisation minus the queue's price."""
    return np.array([reward_at(r, alpha) / (share_of(r) / 8) for r in rows])


def delay_reward_at(row: dict[str, Any], kappa: float = KAPPA) -> float:
    """lfq_actor.delay_reward of a logged experiment at price *kappa* (already in shares of b)."""
    return delay_reward(row["throughput_mbit"], share_of(row), row["mean_queue_pkts"],
                        row["bdp_pkts"], kappa)


def delay_normalised(rows: Sequence[dict[str, Any]], kappa: float) -> np.ndarray:
    """:func:`delay_reward_at` of each logged experiment."""
    return np.array([delay_reward_at(r, kappa) for r in rows])


PRIVILEGED_CCAS = ("reno", "bbr", "pcc")
"""CCAs with their own privileged input when samples of a scenario space are among the rows (the fourth,
CUBIC, is all three zero)."""
PRIVILEGED_WIFI = ("light", "heavy")
"""The episode's WiFi profile, one input each (wired: both zero; samples from before it was drawn: wired)."""
PRIVILEGED_SHAPES = ("step", "ramp", "variable", "real")
"""The episode's rate shape, one input each (constant: all zero; samples from before it was drawn: constant)."""


LOSS_SCALE = (1e-4, 200.0)
"""The loss input of space rows: log(p / 1e-4) / log(200), so the space's 0.05..2 % maps to 0.3..1 (none: 0)."""


def loss_inputs(row: dict[str, Any]) -> tuple[float, float]:
    """A space row's random loss (envs/lfq_env.py): its mean rate on LOSS_SCALE and Gilbert (bursts) or not;
    rows of before loss was drawn: none."""
    loss = row.get("loss") or {"kind": "none"}
    if loss["kind"] == "none":
        return 0.0, 0.0
    lo, span = LOSS_SCALE
    return math.log(max(loss["p"], lo) / lo) / math.log(span), float(loss["kind"] == "gilbert")


def privileged_inputs(rows: Sequence[dict[str, Any]]) -> np.ndarray:
    """The flow's draw, scaled to ~[0, 1]: bandwidth, RTT, Reno or not, experiment time.  Rows drawn from a
    scenario space (lfq_train collect --space: b 2.5..50 Mbit/s, RTT 2..100 ms, four CCAs, a WiFi medium,
    rate shapes, random loss, durations in round trips) are scaled on a log scale instead, with one input
    per CCA of PRIVILEGED_CCAS, per WiFi profile of PRIVILEGED_WIFI and per rate shape of PRIVILEGED_SHAPES,
    the loss (loss_inputs) and the time the reward spans (seconds from the experiment to the flow's end / 10);
    paper 001's rows alone keep the first form."""
    if any(r.get("space") for r in rows):
        return np.array([[math.log2(share_of(r)) / 6.0, math.log2(r["draw"]["rtt_ms"]) / 7.0,
                          *(float(r["draw"]["cca"] == c) for c in PRIVILEGED_CCAS),
                          *(float((r.get("wifi") or "none") == w) for w in PRIVILEGED_WIFI),
                          *(float((r.get("bottleneck") or "constant") == k) for k in PRIVILEGED_SHAPES),
                          *loss_inputs(r),
                          min(r["draw"]["t_exp_s"], 3.0) / 3.0,
                          (r["draw"]["duration_s"] - r["draw"]["t_exp_s"]) / 10.0] for r in rows], dtype=np.float32)
    return np.array([[r["draw"]["bandwidth_mbit"] / 25.0, r["draw"]["rtt_ms"] / 25.0,
                      float(r["draw"]["cca"] == "reno"), min(r["draw"]["t_exp_s"], 3.0) / 3.0]
                     for r in rows], dtype=np.float32)


def cell_table(rows: Sequence[dict[str, Any]], y: np.ndarray) -> list[dict[str, Any]]:
    """Mean normalised reward per CCA x BDP tercile x limit octave (>= 3 samples), with its SE."""
    lim = np.array([r["limit_exp"] for r in rows])
    bdp = np.array([r["bdp_pkts"] for r in rows])
    cca = np.array([r["draw"]["cca"] for r in rows])
    out = []
    for c in ("reno", "cubic"):
        for b_lo, b_hi in pairwise(BDP_TERCILES):
            for o_lo, o_hi in pairwise(OCTAVES):
                m = (cca == c) & (bdp >= b_lo) & (bdp < b_hi) & (lim >= o_lo) & (lim < o_hi)
                if m.sum() >= 3:
                    out.append({"cca": c, "bdp": (b_lo, b_hi), "octave": (o_lo, o_hi), "n": int(m.sum()),
                                "mean": float(y[m].mean()), "se": float(y[m].std(ddof=1) / np.sqrt(m.sum()))})
    return out


def best_octaves(cells: Sequence[dict[str, Any]]) -> dict[tuple[str, tuple[float, float]], tuple[int, int]]:
    """The octave of highest mean normalised reward in each CCA x BDP tercile."""
    best: dict[tuple[str, tuple[float, float]], dict[str, Any]] = {}
    for c in cells:
        k = (c["cca"], c["bdp"])
        if k not in best or c["mean"] > best[k]["mean"]:
            best[k] = c
    return {k: v["octave"] for k, v in best.items()}


def privileged_optimum(rows: Sequence[dict[str, Any]], y: np.ndarray, *, seed: int = 1,
                       critics: int = CRITICS, epochs: int = EPOCHS) -> np.ndarray:
    """Per logged state, the limit maximising the privileged critic ensemble's mean (module docstring)."""
    import tensorflow as tf

    with contextlib.suppress(RuntimeError):  # TF already initialised by the caller (e.g. a test session)
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.keras.utils.set_random_seed(seed)
    rng = np.random.default_rng(seed)
    c = privileged_inputs(rows)
    a = np.array([[action_for(r["limit_exp"])] for r in rows], dtype=np.float32)
    x = np.concatenate([c, a], axis=1)
    target = (y - y.mean()).astype(np.float32)[:, None]
    grid = np.linspace(-1.0, 1.0, GRID, dtype=np.float32)
    xg = np.concatenate([np.repeat(c, GRID, axis=0), np.tile(grid, len(c))[:, None]], axis=1)
    q_sum = np.zeros(len(xg))
    for k in range(critics):
        init = tf.keras.initializers.GlorotUniform(seed=seed + k)
        layers: list[Any] = [tf.keras.Input((x.shape[1],))]
        for h in HIDDEN:
            layers += [tf.keras.layers.Dense(h, kernel_initializer=init),
                       tf.keras.layers.LeakyReLU(negative_slope=0.01)]
        layers.append(tf.keras.layers.Dense(1, kernel_initializer=init))
        q = tf.keras.Sequential(layers)
        q.compile(tf.keras.optimizers.Adam(LR), "mse")
        boot = rng.choice(len(x), size=len(x), replace=True)
        q.fit(x[boot], target[boot], epochs=epochs, batch_size=BATCH, verbose=0)
        q_sum += q.predict(xg, batch_size=4096, verbose=0)[:, 0]
    best_a = grid[np.argmax(q_sum.reshape(len(c), GRID), axis=1)]
    return np.array([limit_for(float(v)) for v in best_a])


def limit_stats(rows: Sequence[dict[str, Any]], limits: np.ndarray) -> dict[str, Any]:
    """The targets' statistics on late states: per CCA mean limit and correlations; Reno:CUBIC."""
    out: dict[str, Any] = {}
    for c in ("reno", "cubic"):
        m = np.array([r["draw"]["cca"] == c and r["draw"]["t_exp_s"] >= LATE_S for r in rows])
        if m.sum() < 3:
            continue
        lim = limits[m].astype(float)
        col = {k: np.array([r[k] if k == "bdp_pkts" else r["draw"][k] for r in rows])[m]
               for k in ("bdp_pkts", "bandwidth_mbit", "rtt_ms")}
        out[c] = {"n": int(m.sum()), "mean_limit": float(lim.mean()),
                  "limit_over_bdp_median": float(np.median(lim / col["bdp_pkts"])),
                  **{f"corr_{k}": float(np.corrcoef(v, lim)[0, 1]) if lim.std() > 0 else float("nan")
                     for k, v in col.items()}}
    if "reno" in out and "cubic" in out:
        out["reno_cubic"] = out["reno"]["mean_limit"] / out["cubic"]["mean_limit"]
    return out


class MixedSamplesError(ValueError):
    """Samples of CUBIC and of BIC, or of two sender profiles, given together."""


def samples_sender(rows: list[dict[str, Any]]) -> str:
    """The sender profile (testbed/runs/tcp_senders.py) the samples were collected with; samples from
    before profiles were recorded are ``linux``, or ``bic`` in a set with BIC flows."""
    legacy = "bic" if any(r["draw"]["cca"] == "bic" for r in rows if "sender" not in r) else "linux"
    senders = {r.get("sender", legacy) for r in rows}
    if len(senders) > 1:
        raise MixedSamplesError(f"the samples mix senders {' and '.join(sorted(senders))}: "
                                "give files of one of them")
    return senders.pop() if senders else "linux"


def loss_based_slot(rows: list[dict[str, Any]]) -> str:
    """Put BIC samples in the "cubic" slot (module docstring); the name of the CCA that ran, upper case.
    Samples of two loss-based CCAs or of two sender profiles are refused (MixedSamplesError); a scenario
    space's BBR and PCC flows are neither (they keep their names)."""
    samples_sender(rows)
    ran = {r["draw"]["cca"] for r in rows} - {"reno", "bbr", "pcc"}
    if len(ran) > 1:
        raise MixedSamplesError(f"the samples mix {' and '.join(sorted(ran))}: give files of one of them")
    for r in rows:
        if r["draw"]["cca"] == "bic":
            r["draw"]["cca"] = "cubic"
    return (ran.pop() if ran else "cubic").upper()


def markdown(results: dict[float, dict[str, Any]], actor: dict[str, Any] | None, other: str = "CUBIC",
             delay: dict[float, dict[str, Any]] | None = None,
             actor_label: str = "the shipped actor (60 features)") -> str:
    lines = ["| limits on the logged late states | Reno: corr. with BDP (target >= 0.9) | bandwidth | RTT "
             f"| {other}: corr. with BDP | mean limit Reno : {other} (target >= 2) "
             f"| limit / BDP, median (Reno, {other}) |",
             "|---|---|---|---|---|---|---|"]

    def row(name: str, s: dict[str, Any]) -> str:
        r, c = s["reno"], s["cubic"]
        return (f"| {name} | {r['corr_bdp_pkts']:.2f} | {r['corr_bandwidth_mbit']:.2f} | {r['corr_rtt_ms']:.2f} "
                f"| {c['corr_bdp_pkts']:.2f} | {r['mean_limit']:.1f} : {c['mean_limit']:.1f} = "
                f"{s['reno_cubic']:.2f} | {r['limit_over_bdp_median']:.2f}, {c['limit_over_bdp_median']:.2f} |")

    for alpha, res in results.items():
        lines.append(row(f"full information, ALPHA = {alpha:g} /s", res["privileged"]))
    for kappa, stats in (delay or {}).items():
        lines.append(row(f"full information, delay reward KAPPA = {kappa:g}", stats))
    if actor is not None:
        lines.append(row(actor_label, actor))
    lines += ["", "Best limit octave per cell (mean reward / b; no model):", "",
              "| ALPHA | CCA | BDP < 8 | BDP 8-20 | BDP >= 20 |", "|---|---|---|---|---|"]
    for alpha, res in results.items():
        for c in ("reno", "cubic"):
            cells = [res["best_octaves"].get((c, t)) for t in pairwise(BDP_TERCILES)]
            name = c if c == "reno" else other.lower()
            lines.append(f"| {alpha:g} | {name} | " + " | ".join(f"{o[0]}-{o[1] - (o[1] == 257)}" if o else "-"
                                                            for o in cells) + " |")
    return "\n".join(lines) + "\n"


def plot(path: Path, rows: Sequence[dict[str, Any]], results: dict[float, dict[str, Any]],
         actor_limits: np.ndarray | None, other: str = "CUBIC", actor_name: str = "shipped actor") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    alpha0 = next(iter(results))
    res = results[alpha0]
    fig, ax = plt.subplots(1, 2, figsize=(13, 4.6))
    styles = {"reno": "C0", "cubic": "C3"}
    ls = {0.0: ":", 8.0: "--", 20.0: "-"}
    for cell_cca in ("reno", "cubic"):
        for b_lo, b_hi in pairwise(BDP_TERCILES):
            cs = [c for c in res["cells"] if c["cca"] == cell_cca and c["bdp"] == (b_lo, b_hi)]
            if not cs:
                continue
            xs = [np.sqrt(c["octave"][0] * min(c["octave"][1], 256)) for c in cs]
            name = cell_cca if cell_cca == "reno" else other.lower()
            label = f"{name}, BDP {b_lo:g}-{b_hi:g}" if b_hi < 1e8 else f"{name}, BDP >= {b_lo:g}"
            ax[0].errorbar(xs, [c["mean"] for c in cs], yerr=[c["se"] for c in cs], color=styles[cell_cca],
                           ls=ls[b_lo], marker="o", ms=3, capsize=2, label=label)
    ax[0].set(xscale="log", ylim=(0.3, 1.0), xlabel="limit from t_e on (packets, octave midpoint)",
              ylabel="mean reward / b", title=f"logged experiments, ALPHA = {alpha0:g} /s (mean +- SE)")
    ax[0].legend(fontsize=8)
    late = np.array([r["draw"]["t_exp_s"] >= LATE_S for r in rows])
    bdp = np.array([r["bdp_pkts"] for r in rows])
    cca = np.array([r["draw"]["cca"] for r in rows])
    for c in ("reno", "cubic"):
        m = late & (cca == c)
        name = c if c == "reno" else other.lower()
        ax[1].scatter(bdp[m], res["limits"][m], s=9, color=styles[c], alpha=0.55,
                      label=f"{name}: full information's optimum")
        if actor_limits is not None:
            ax[1].scatter(bdp[m], actor_limits[m], s=9, marker="x", color=styles[c], alpha=0.35,
                          label=f"{name}: {actor_name}")
    x = np.linspace(0, 55, 10)
    ax[1].plot(x, x, "k--", lw=0.8, label="1 BDP (Reno's need)")
    k = FULL_LINK_BDP[other.lower()]
    ax[1].plot(x, k * x, "k:", lw=0.8, label=f"{k:g} BDP ({other}'s need)")
    ax[1].set(xlabel="BDP (packets)", ylabel="limit (packets)", yscale="log", ylim=(0.8, 300),
              title=f"limit per logged late state, ALPHA = {alpha0:g} /s")
    ax[1].legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def analyse(rows: Sequence[dict[str, Any]], alphas: Sequence[float], *, seed: int = 1, critics: int = CRITICS,
            epochs: int = EPOCHS) -> dict[float, dict[str, Any]]:
    results: dict[float, dict[str, Any]] = {}
    for alpha in alphas:
        y = normalised(rows, alpha)
        cells = cell_table(rows, y)
        limits = privileged_optimum(rows, y, seed=seed, critics=critics, epochs=epochs)
        results[alpha] = {"cells": cells, "best_octaves": best_octaves(cells), "limits": limits,
                          "privileged": limit_stats(rows, limits)}
        print(f"lfq ceiling: ALPHA {alpha:g} done", file=sys.stderr, flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ccswitch.models.lfq_ceiling", description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, action="append", required=True, help="a samples file of lfq_train collect")
    ap.add_argument("--alpha", type=float, action="append", default=None, help="queue price(s), 1/s (default 10)")
    ap.add_argument("--actor", type=Path, default=None, help="also report this actor file's limits")
    ap.add_argument("--md", type=Path, default=None)
    ap.add_argument("--plot", type=Path, default=None)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--kappa", type=float, action="append", default=[],
                    help="also the full-information optimum under lfq_actor.delay_reward at this price (a deviation)")
    a = ap.parse_args(argv)
    missing = [str(p) for p in a.data if not p.is_file()]
    if missing:
        ap.error(f"no samples file {', '.join(missing)}: collect them first (python -m ccswitch.models.lfq_train "
                 "collect --data FILE)")
    rows = [json.loads(line) for p in a.data for line in p.open() if line.strip()]
    try:
        other = loss_based_slot(rows)
    except MixedSamplesError as e:
        ap.error(str(e))
    results = analyse(rows, a.alpha or [10.0], seed=a.seed)
    delay = {k: limit_stats(rows, privileged_optimum(rows, delay_normalised(rows, k), seed=a.seed)) for k in a.kappa}
    actor_stats, actor_limits = None, None
    shipped = a.actor is None or a.actor.name == "lfq_actor.json"
    if a.actor is not None:
        from .lfq_actor import SampleInputsError, input_names, load_actor, sample_inputs

        act = load_actor(a.actor)
        try:
            obs = sample_inputs(rows, with_derived=act.with_derived, with_empty=act.with_empty, with_rtt=act.with_rtt)
        except SampleInputsError as e:
            ap.error(f"the actor {a.actor} takes inputs the samples lack: {e}")
        actor_limits = np.array([limit_for(float(v)) for v in act.act_batch(obs)])
        actor_stats = limit_stats(rows, actor_limits)
    text = markdown(results, actor_stats, other, delay, "the shipped actor (60 features)" if shipped else
                    f"the actor {a.actor} ({len(input_names(act.with_derived, act.with_empty, act.with_rtt))} "
                    f"features)")
    print(text)
    if a.md is not None:
        a.md.parent.mkdir(parents=True, exist_ok=True)
        a.md.write_text(f"# LFQ: what the logged experiments support ({len(rows)} samples)\n\n"
                        "Generated by `python -m ccswitch.models.lfq_ceiling` (docs/network/lfq.md).\n\n" + text)
    if a.plot is not None:
        plot(a.plot, rows, results, actor_limits, other, "shipped actor" if shipped else f"actor {a.actor.stem}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
