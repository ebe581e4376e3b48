"""Train paper 001's LFQ agent: collect experiments on the live testbed, fit a critic and an actor, export.

    python -m ccswitch.models.lfq_train collect --episodes 200 [--data results/lfq/train.jsonl]
        [--actor models/lfq_actor.json --pre actor --explore around] [--seed 1] [--sender linux]
        [--startup LIMIT:SECONDS] [--space testbed/scenarios/space.toml]
    python -m ccswitch.models.lfq_train train [--data results/lfq/train.jsonl [--data round2.jsonl]]
        [--derived] [--empty] [--rtt] [--reward paper|paper-share|delay] [--critic router|privileged]
        [--critic-data FILE] [--hp NAME=VALUE]
        [--out models/lfq_actor.json]
        [--plot docs/network/lfq-training.png] [--seed 1]

**Paper 001's online learning** (section VI): an actor network outputs each
flow's buffer limit; during every flow, at a random time t_e in [0, T/2], the
limit is changed once (the actor's +-1) and kept to the end; a critic network
V(s) predicts the reward of the rest of the flow (MSE on the observed reward);
the actor is pulled (MAE) towards the tried limit if the reward beat the
critic's prediction, towards the opposite one if not.  Batch 40, ~10^5 flows.

**Ours** (the deviations, each for the same reason: our flows are real TCP in
real time, ~8 s per episode of 3 flows, so ~10^3 flows in an hour, not 10^5):

1. *collect* (``envs/lfq_env.py``): every flow's experiment draws its limit
   log-uniformly in 1..256 (or 1/4..4 BDP, ``--explore bdp``; or around the actor's, ``--explore around``)
   instead of +-1, so that every sample says something about the whole range;
   samples go to a JSON-lines file (appended: collection is resumable and
   rounds accumulate).
2. *critic* Q(s, a): the paper's critic sees the state only, because its
   actor's action is fixed (+-1) by the state; ours takes the action (the
   limit's log2 scale, a in [-1, 1]) as an input, so that a logged batch can
   train it for any action (off-policy, as DDPG/TD3's critics).  MSE on the
   observed reward, as the paper's.
3. *actor*: trained to maximise Q(s, actor(s)) (the deterministic policy
   gradient), i.e. the limit the critic deems best for each logged state, over
   the logged states, in place of the paper's +-1 MAE step per flow.
   The critic is an ensemble (CRITICS networks, each on a bootstrap of the
   samples); the actor maximises their mean minus PESSIMISM x their spread, so
   it avoids limits where the few samples disagree (a standard guard of
   offline actor-critic against the actor exploiting the critic's errors).

``train --critic privileged`` (an asymmetric actor-critic, Pinto et al. 2018): the critics see the
flow's draw (bandwidth, RTT, CCA, experiment time: lfq_ceiling.privileged_inputs) instead of the
router's features; the actor still sees only the router's inputs and is trained through those critics
as above.  The draw is known when training, never at run time, and it explains most of the reward that
the features explain only through ~10^3 noisy samples (held-out MSE about half the router critics'),
so the gradient the actor follows is far less noisy.  The actor file and the router side are unchanged.

``train --critic privileged --critic-data FILE``: the critics also learn from FILE's samples, the actor
does not (it needs its inputs at each state, the critics only the draw): samples collected before linkemu
reported an input the actor takes still teach the critics what each limit earned.

``collect --startup 8:1`` holds every flow at 8 packets until it is 1 s old and puts its experiment after
that (a deviation: lfq_actor's "Start-up"); ``train`` writes the samples' start-up into the actor file, so
the router applies the start-up the actor was trained behind (samples of different start-ups: one error line).

``collect --space testbed/scenarios/space.toml`` draws each episode's rate and each flow's RTT and CCA
(CUBIC, BBR, PCC, Reno) from the scenario space the matrix draws from, not from paper 001's distribution
(envs/lfq_env.py "The scenario space"; docs/network/lfq.md "An actor for the scenario space"); train its
samples with ``--reward paper-share`` (b spans 2.5..50 Mbit/s) and ``--critic privileged``.  Its flows
last at least ~94 round trips and cross the space's random loss (envs/lfq_env.py "Durations");
``train --min-round-trips 90`` keeps, of samples collected before that, the flows that did.

``--reward delay`` trains on lfq_actor.delay_reward instead of paper 001's reward (a deviation, not the
shipped actor's: docs/network/lfq.md "More data"); ``--reward paper-share`` on paper 001's reward divided by the
flow's fair share b (:data:`REWARDS`; docs/network/lfq.md "What limits Reno's throughput").

Every hyperparameter is in :data:`HP` (``train --hp NAME=VALUE`` overrides one for a run).  The actor file
(:mod:`ccswitch.models.lfq_actor`) records them, the sample count and the fit.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .lfq_actor import (
    KAPPA,
    SampleInputsError,
    Startup,
    action_for,
    input_names,
    limit_for,
    load_actor,
    sample_inputs,
    save_actor,
)
from .lfq_ceiling import (
    FULL_LINK_BDP,
    LATE_S,
    MixedSamplesError,
    limit_stats,
    loss_based_slot,
    privileged_inputs,
    samples_sender,
)
from .lfq_samples import REWARDS, load_samples, long_enough, sample_reward, samples_startup

if TYPE_CHECKING:
    from ccswitch.testbed.scenario.space import Space

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATA = Path("results/lfq/train.jsonl")
DEFAULT_OUT = REPO / "models" / "lfq_actor.json"

HP: dict[str, Any] = {
    "interval_s": 0.01,          # control interval (the router loop's and the episodes')
    "flows_per_run": 3,          # TCP flows per episode (envs/lfq_env.py), plus one UDP filler
    "hidden": (64, 64),          # hidden layers of actor and critics (leaky ReLU)
    "leak": 0.01,                # leaky ReLU slope (the paper's "leaky ReLU")
    "critics": 5,                # critic ensemble size (bootstrap samples)
    "critic_epochs": 100,        # passes over the samples per critic (held-out MSE is flat from ~100 on)
    "critic_lr": 1e-3,           # Adam
    "critic_l2": 1e-3,           # weight decay on critic kernels (few samples)
    "actor_epochs": 200,         # passes over the logged states
    "actor_lr": 1e-3,            # Adam
    "pessimism": 1.0,            # actor maximises mean(Q) - pessimism * std(Q) over the ensemble
    "batch": 128,                # minibatch (the paper's: 40)
    "val_frac": 0.15,            # held out to report the critic's fit
}


# --------------------------------------------------------------- collect ---


def collect(episodes: int, data: Path, *, actor_path: Path | None, pre: str, explore: str, seed: int,
            sender: str = "linux", startup: Startup | None = None, space: Space | None = None) -> None:
    """*startup*: the young flows' limit (None: the actor's, if it has one, else none); *space*: draw the
    flows from that scenario space instead of paper 001's distribution."""
    from ccswitch.bpf.pcc import pcc_held
    from ccswitch.envs.lfq_env import LfqEpisodes
    from ccswitch.testbed.runs.tcp_senders import held_loss_based

    actor = load_actor(actor_path) if actor_path else None
    if startup is None and actor is not None:
        startup = actor.startup
    data.parent.mkdir(parents=True, exist_ok=True)
    done = sum(1 for _ in data.open()) if data.is_file() else 0
    t0 = time.monotonic()
    # A new seed per invocation and resumed count: a resumed collection draws new flows.
    with held_loss_based(sender), pcc_held(space is not None and space.cca_mix.get("pcc", 0) > 0), \
            LfqEpisodes(flows_per_run=HP["flows_per_run"], interval_s=HP["interval_s"],
                        seed=seed * 100_003 + done, sender=sender, space=space) as env, data.open("a") as out:
        for i in range(1, episodes + 1):
            samples = env.episode(actor=actor, pre=pre, explore=explore, startup=startup)
            for s in samples:
                s["pre"], s["explore"] = pre, explore
                out.write(json.dumps(s) + "\n")
            out.flush()
            el = time.monotonic() - t0
            print(f"lfq collect: episode {i}/{episodes}, {len(samples)} samples ({done} in the file before), "
                  f"{el:.0f} s, ETA {el / i * (episodes - i):.0f} s", file=sys.stderr, flush=True)


# ----------------------------------------------------------------- train ---


def _mlp(tf: Any, n_in: int, out_act: str | None, seed: int) -> Any:
    init = tf.keras.initializers.GlorotUniform(seed=seed)
    layers = [tf.keras.Input((n_in,))]
    for h in HP["hidden"]:
        layers.append(tf.keras.layers.Dense(h, kernel_initializer=init))
        layers.append(tf.keras.layers.LeakyReLU(negative_slope=HP["leak"]))
    layers.append(tf.keras.layers.Dense(1, activation=out_act, kernel_initializer=init))
    return tf.keras.Sequential(layers)


def _fit_critic(tf: Any, q: Any, x: np.ndarray, y: np.ndarray, xv: np.ndarray, yv: np.ndarray,
                rng: np.random.Generator) -> tuple[list[float], list[float]]:
    """MSE regression with Adam and L2 on the kernels, in minibatches; per-epoch train / held-out MSE."""
    opt = tf.keras.optimizers.Adam(HP["critic_lr"])
    kernels = [v for v in q.trainable_variables if "kernel" in v.name]

    @tf.function
    def step(xb: Any, yb: Any) -> Any:
        with tf.GradientTape() as tape:
            mse = tf.reduce_mean(tf.square(q(xb, training=True) - yb))
            loss = mse + HP["critic_l2"] * tf.add_n([tf.reduce_sum(tf.square(k)) for k in kernels])
        opt.apply_gradients(zip(tape.gradient(loss, q.trainable_variables), q.trainable_variables, strict=True))
        return mse

    @tf.function
    def mse_of(xb: Any, yb: Any) -> Any:
        return tf.reduce_mean(tf.square(q(xb, training=False) - yb))

    xt, yt = tf.constant(x), tf.constant(y)
    tr_curve, va_curve = [], []
    for _ in range(HP["critic_epochs"]):
        perm = rng.permutation(len(x))
        for i in range(0, len(x), HP["batch"]):
            b = perm[i:i + HP["batch"]]
            step(tf.gather(xt, b), tf.gather(yt, b))
        tr_curve.append(float(mse_of(xt, yt)))
        if len(xv):
            va_curve.append(float(mse_of(tf.constant(xv), tf.constant(yv))))
    return tr_curve, va_curve


CRITIC_INPUTS = ("router", "privileged")
"""What the critics see of a state (``train --critic``): the actor's inputs, or the flow's draw
(lfq_ceiling.privileged_inputs: bandwidth, RTT, CCA, experiment time) -- an asymmetric actor-critic."""


def train(data: list[Path] | Path, out: Path, plot: Path | None, seed: int, *, with_derived: bool = False,
          with_empty: bool = False, with_rtt: bool = False, reward_kind: str = "paper",
          critic_inputs: str = "router", critic_data: list[Path] | None = None,
          min_round_trips: float = 0.0) -> dict[str, Any]:
    """*critic_data*: more samples for the privileged critics only; *min_round_trips*: only flows that lasted
    that many round trips (module docstring)."""
    files = [data] if isinstance(data, Path) else list(data)
    rows = long_enough([r for f in files for r in load_samples(f)], min_round_trips, files)
    try:  # the 60, then optionally the derived, empty_frac and RTT inputs (lfq_actor.input_names)
        obs = sample_inputs(rows, with_derived=with_derived, with_empty=with_empty, with_rtt=with_rtt)
    except SampleInputsError as e:
        raise SampleInputsError(f"{', '.join(map(str, files))}: {e}") from None
    extra_files = list(critic_data or [])
    if extra_files and critic_inputs != "privileged":
        raise MixedSamplesError("--critic-data trains the critics on samples the actor does not see: it needs "
                                "--critic privileged")
    extra = long_enough([r for f in extra_files for r in load_samples(f)], min_round_trips, extra_files)
    startup = samples_startup(rows + extra, files + extra_files)
    other = loss_based_slot(rows + extra)  # BIC samples: stats and plot in the "cubic" slot, named BIC

    import tensorflow as tf  # after the samples' checks: a bad file is refused without TF's start-up

    with contextlib.suppress(RuntimeError):  # TF already initialised by the caller (e.g. a test session)
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.keras.utils.set_random_seed(seed)
    n_in = obs.shape[1]
    # The critics' view of a state (CRITIC_INPUTS): the actor's inputs, or the flow's draw (privileged);
    # privileged critics also learn from the --critic-data samples, after the actor's (indices >= len(rows)).
    every = rows + extra
    crit = obs if critic_inputs == "router" else privileged_inputs(every)
    act = np.array([[action_for(r["limit_exp"])] for r in every], dtype=np.float32)
    rew = np.array([[sample_reward(r, reward_kind)] for r in every], dtype=np.float32)
    rng = np.random.default_rng(seed)
    idx = rng.permutation(len(every))
    n_val = int(len(every) * HP["val_frac"])
    val, tr = idx[:n_val], idx[n_val:]
    tr_actor = tr[tr < len(rows)]  # the actor's states: its own samples' (they have its inputs)
    # Rewards are ~0..3 (paper: bytes/s / 1e6) or ~-1..1 (delay): centred for the critics' output layer.
    r_mean = float(rew[tr].mean())
    x = np.concatenate([crit, act], axis=1)

    critics, curves = [], {"critic_train": [], "critic_val": [], "actor_objective": []}
    for c in range(HP["critics"]):
        boot = rng.choice(tr, size=len(tr), replace=True)
        q = _mlp(tf, crit.shape[1] + 1, None, seed + 1 + c)
        tr_curve, va_curve = _fit_critic(tf, q, x[boot], rew[boot] - r_mean, x[val], rew[val] - r_mean, rng)
        critics.append(q)
        curves["critic_train"].append(tr_curve)
        curves["critic_val"].append(va_curve)
        print(f"lfq train: critic {c + 1}/{HP['critics']}: train MSE {tr_curve[-1]:.4f}, held-out MSE "
              f"{va_curve[-1] if va_curve else float('nan'):.4f} (held-out reward variance "
              f"{float(rew[val].var()) if n_val else float('nan'):.4f})", file=sys.stderr, flush=True)

    actor = _mlp(tf, n_in, "tanh", seed)
    opt = tf.keras.optimizers.Adam(HP["actor_lr"])
    states, crit_states = tf.constant(obs[tr_actor]), tf.constant(crit[tr_actor])

    @tf.function
    def actor_step(s: Any, cs: Any) -> Any:
        with tf.GradientTape() as tape:
            a = actor(s, training=True)
            xa = tf.concat([cs, a], axis=1)
            qs = tf.stack([q(xa, training=False) for q in critics], axis=0)
            objective = tf.reduce_mean(tf.reduce_mean(qs, axis=0) - HP["pessimism"] * tf.math.reduce_std(qs, axis=0))
            loss = -objective
        opt.apply_gradients(zip(tape.gradient(loss, actor.trainable_variables), actor.trainable_variables,
                                strict=True))
        return objective

    n = len(tr_actor)
    for _ in range(HP["actor_epochs"]):
        perm = rng.permutation(n)
        batches = (perm[i:i + HP["batch"]] for i in range(0, n, HP["batch"]))
        objs = [float(actor_step(tf.gather(states, b), tf.gather(crit_states, b))) for b in batches]
        curves["actor_objective"].append(float(np.mean(objs)) + r_mean)
    print(f"lfq train: actor objective {curves['actor_objective'][-1]:.4f}", file=sys.stderr, flush=True)

    dense = [la for la in actor.layers if isinstance(la, tf.keras.layers.Dense)]
    kernels = [la.kernel.numpy() for la in dense]
    biases = [la.bias.numpy() for la in dense]
    limits = [limit_for(float(a)) for a in actor(obs, training=False).numpy()[:, 0]]
    fit = {(k if k != "cubic" else other.lower()): v for k, v in _fit_summary(rows, limits).items()}
    training = {"hyperparameters": {k: list(v) if isinstance(v, tuple) else v for k, v in HP.items()},
                "samples": len(rows), "critic_only_samples": len(extra),
                **({"min_round_trips": min_round_trips} if min_round_trips > 0 else {}),
                "episodes": len({(r.get("pre"), r["episode"], r["t"] // 1000) for r in rows}),
                "data": ", ".join(str(f) for f in files),
                "critic_data": ", ".join(str(f) for f in extra_files), "seed": seed,
                "inputs": len(input_names(with_derived, with_empty, with_rtt)),
                "rounds": sorted({f"{r.get('pre', 'random')}/{r.get('explore', 'uniform')}" for r in rows}),
                "algorithm": "offline actor-critic (module docstring)"
                             + (", privileged critics" if critic_inputs == "privileged" else ""),
                "reward": reward_kind if reward_kind != "delay" else f"{reward_kind} (kappa {KAPPA:g})",
                "fit_on_training_states": fit,
                "critic_val_mse_last": [c[-1] if c else None for c in curves["critic_val"]],
                "reward_var_val": float(rew[val].var()) if n_val else None}
    checksum = save_actor(out, kernels=kernels, biases=biases, interval_s=HP["interval_s"], leak=HP["leak"],
                          training=training, with_derived=with_derived, with_empty=with_empty, with_rtt=with_rtt,
                          startup=startup)
    print(f"lfq train: wrote {out} ({checksum}); on the training states: {fit}", file=sys.stderr)
    if plot is not None:
        _plot(plot, curves, rows, limits, other.lower())
    return training


def _fit_summary(rows: list[dict[str, Any]], limits: list[int]) -> dict[str, Any]:
    """The actor's limit on the logged states against the flow's BDP, per CCA (late states only)."""
    stats = limit_stats(rows, np.array(limits))
    return {cca: {"n": st["n"], "mean_limit": round(st["mean_limit"], 2),
                  "corr_limit_bdp": round(st["corr_bdp_pkts"], 3)}
            for cca, st in stats.items() if cca in ("reno", "cubic")}


def _plot(path: Path, curves: dict[str, Any], rows: list[dict[str, Any]], limits: list[int],
          other: str = "cubic") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 3, figsize=(15, 4.2))
    for i, (tr, va) in enumerate(zip(curves["critic_train"], curves["critic_val"], strict=True)):
        ax[0].plot(tr, color="C0", alpha=0.6, label="train" if i == 0 else None)
        if va:
            ax[0].plot(va, color="C1", alpha=0.6, label="held out" if i == 0 else None)
    ax[0].set(title="critics: MSE of the reward (centred)", xlabel="epoch", yscale="log")
    ax[0].legend()
    ax[1].plot(curves["actor_objective"])
    ax[1].set(title="actor: mean Q(s, actor(s)) - pessimism x std", xlabel="epoch", ylabel="reward")
    for cca, c in (("reno", "C0"), ("cubic", "C3")):
        pts = [(r["bdp_pkts"], lim) for r, lim in zip(rows, limits, strict=True)
               if r["draw"]["cca"] == cca and r["draw"]["t_exp_s"] >= LATE_S]
        if pts:
            b, lim = np.array(pts).T
            ax[2].scatter(b, lim, s=8, color=c, alpha=0.6, label=cca if cca == "reno" else other)
    x = np.linspace(0, 55, 10)
    ax[2].plot(x, x, "k--", lw=0.8, label="1 BDP (Reno's need)")
    k = FULL_LINK_BDP[other]
    ax[2].plot(x, k * x, "k:", lw=0.8, label=f"{k:g} BDP ({other.upper()}'s)")
    ax[2].set(title="actor's limit on logged states (t_e >= 1 s)", xlabel="BDP (packets)", ylabel="limit (packets)")
    ax[2].legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _startup_arg(text: str) -> Startup:
    try:
        return Startup.parse(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _tunable() -> list[str]:
    """The entries of :data:`HP` that ``train --hp`` may override: the numeric ones of training (the control
    interval and the flows per episode belong to the data and the router, not to a fit)."""
    return [k for k, v in HP.items() if isinstance(v, (int, float)) and k not in ("interval_s", "flows_per_run")]


def _hp_arg(text: str) -> tuple[str, float | int]:
    """``NAME=VALUE`` for a numeric entry of :data:`HP`, of its type (argparse's one-line error otherwise)."""
    name, sep, value = text.partition("=")
    numeric = _tunable()
    if not sep or name not in numeric:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE with NAME one of {', '.join(numeric)}, got {text!r}")
    kind = type(HP[name])
    try:
        return name, kind(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{name} takes {'an integer' if kind is int else 'a number'}, "
                                         f"got {value!r}") from None


def main(argv: list[str] | None = None) -> int:
    from ccswitch.testbed.runs.tcp_senders import SENDERS

    ap = argparse.ArgumentParser(prog="python -m ccswitch.models.lfq_train", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect", help="run training episodes on the testbed (root), append samples")
    c.add_argument("--episodes", type=int, default=100)
    c.add_argument("--data", type=Path, default=DEFAULT_DATA)
    c.add_argument("--actor", type=Path, default=None)
    c.add_argument("--pre", choices=("random", "bdp", "actor"), default="random",
                   help="behaviour limit before t_e: log-uniform 1..256, log-uniform 1/4..2.8 BDP, or the actor's")
    c.add_argument("--explore", choices=("uniform", "bdp", "around"), default="uniform",
                   help="the experiment's limit: log-uniform 1..256, log-uniform 1/4..4 BDP, or around the actor's")
    c.add_argument("--seed", type=int, default=1)
    c.add_argument("--sender", choices=list(SENDERS), default="linux",
                   help="the clients' TCP (testbed/runs/tcp_senders.py): SACK per CCA, and CUBIC (linux, "
                        "no-sack) or BIC (bpf/bic.bpf.c; the others) for the paper's BIC")
    c.add_argument("--startup", type=_startup_arg, default=None, metavar="LIMIT:SECONDS",
                   help="hold each flow at LIMIT packets until it is SECONDS old, experiment after that "
                        "(default: the --actor's start-up, else none)")
    c.add_argument("--space", type=Path, default=None, metavar="FILE",
                   help="draw rates, RTTs and CCAs from this scenario space file (testbed/scenarios/space.toml) "
                        "instead of paper 001's distribution; needs --sender linux")
    t = sub.add_parser("train", help="fit critics and actor on the samples, write the actor file")
    t.add_argument("--data", type=Path, action="append", default=None,
                   help=f"a samples file; repeat for several rounds (default {DEFAULT_DATA})")
    t.add_argument("--derived", action="store_true",
                   help="also feed the 30 derived inputs (lfq_actor.derived; not in paper 001)")
    t.add_argument("--empty", action="store_true",
                   help="also feed the 10 empty_frac inputs (lfq_actor.empty_inputs; not in paper 001)")
    t.add_argument("--rtt", action="store_true",
                   help="also feed the 12 RTT inputs: linkemu's handshake RTT and the BDP it gives with the "
                        "out rate (lfq_actor.rtt_inputs; not in paper 001)")
    t.add_argument("--critic", choices=CRITIC_INPUTS, default="router",
                   help="the critics' inputs: the actor's (router), or the flow's bandwidth, RTT, CCA and "
                        "experiment time (privileged: an asymmetric actor-critic; the actor still sees the router's)")
    t.add_argument("--critic-data", type=Path, action="append", default=None,
                   help="more samples for the privileged critics only (e.g. collected before linkemu measured "
                        "an input the actor takes); repeatable")
    t.add_argument("--hp", type=_hp_arg, action="append", default=[], metavar="NAME=VALUE",
                   help=f"override a hyperparameter of HP for this run (recorded in the actor file); one of "
                        f"{', '.join(_tunable())}")
    t.add_argument("--out", type=Path, default=DEFAULT_OUT)
    t.add_argument("--plot", type=Path, help="write the training curves here (default: none)")
    t.add_argument("--seed", type=int, default=1)
    t.add_argument("--min-round-trips", type=float, default=0.0, metavar="N",
                   help="train only on flows that lasted at least N round trips (duration / RTT): the space's "
                        "samples of before durations were drawn in round trips keep their short-RTT flows")
    t.add_argument("--reward", choices=REWARDS, default="paper",
                   help="paper: paper 001's reward as logged; paper-share: the same over the flow's fair share; "
                        "delay: utilisation minus KAPPA x the queue in BDPs (deviations, docs/network/lfq.md)")
    a = ap.parse_args(argv)
    if a.cmd == "collect":
        from ccswitch.testbed.runs.netns_lifecycle import sigterm_as_exit
        from ccswitch.testbed.scenario.model import ScenarioError
        from ccswitch.testbed.scenario.space import load_space

        rows = load_samples(a.data) if a.data.is_file() and a.data.stat().st_size else []
        had = samples_sender(rows) if rows else None
        if had is not None and had != a.sender:
            ap.error(f"{a.data} holds samples of sender {had}, not {a.sender}: give --sender {had} "
                     "to add to it, or another --data")
        space = None
        if a.space is not None:
            if a.sender != "linux":
                ap.error("--space draws its CCAs as the kernel runs them: use it with --sender linux")
            try:
                space = load_space(a.space)
            except ScenarioError as e:
                ap.error(str(e))
        name = space.name if space is not None else None
        spaces = {r.get("space") for r in rows}
        if rows and spaces != {name}:
            ap.error(f"{a.data} holds samples of space {sorted(map(str, spaces))}, not {name}: "
                     "collect different distributions into different --data files")

        with sigterm_as_exit():  # kill tears the episode's namespaces and linkemu down
            collect(a.episodes, a.data, actor_path=a.actor, pre=a.pre, explore=a.explore, seed=a.seed,
                    sender=a.sender, startup=a.startup, space=space)
    else:
        HP.update(dict(a.hp))  # this process only: the actor file records the values it was trained with
        try:
            train(a.data or [DEFAULT_DATA], a.out, a.plot, a.seed, with_derived=a.derived, with_empty=a.empty,
                  with_rtt=a.rtt, reward_kind=a.reward, critic_inputs=a.critic, critic_data=a.critic_data,
                  min_round_trips=a.min_round_trips)
        except (MixedSamplesError, SampleInputsError) as e:
            ap.error(str(e))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
