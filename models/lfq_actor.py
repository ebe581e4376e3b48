"""The LFQ actor file and what it defines: paper 001's agent's observation, action and reward.

Numpy only (no TensorFlow): the router side (``testbed/runs/lfq_agent.py``, the loop
beside linkemu), the training episodes (``envs/lfq_env.py``), the trainer
(``models/lfq_train.py``) and the scenario parser (which checks an lfq ``agent``
file) all use these definitions.

Paper 001 ("LFQ: Online Learning of Per-flow Queuing Policies using Deep
Reinforcement Learning") puts a neural network beside fair queuing: for every
flow it outputs that flow's maximum buffer size (tail-drop limit, packets) from
per-flow observations.  Here the queue is linkemu's ``lfq`` (fq with a per-flow
limit, ``testbed/linkemu/src/qdisc/lfq.rs``) and the agent talks to it through
linkemu's control socket (:mod:`ccswitch.testbed.runs.linkemu_control`):

1. ``state`` of the bottleneck direction lists the active flows, each with the
   paper's six features as 10 EWMAs (``lfq_features.rs``): queue size, its
   standard deviation, the limit, incoming and outgoing rate, time since the
   last loss.  :func:`observation` scales them (:data:`SCALES`) into the 60
   inputs, in the order of :data:`OBS_FEATURES`.
2. The actor network (numpy only) maps the 60 inputs to a in [-1, 1]
   (tanh); :func:`limit_for` maps a to the limit on a log scale:
   limit = round(2 ** (LOG2_MIN + (a + 1) / 2 * (LOG2_MAX - LOG2_MIN))), 1..256 packets.
3. One ``set`` with every flow's new limit (``flows: [{queue, limit_pkts}]``),
   only for flows whose limit changes.

Reward (the paper's equation 1 as its authors' code computes it, ``rl.cc``):
r = (throughput [B/s] - ALPHA * mean queue [packets] * MTU [B]) / 1e6 over the
rest of the flow after a decision, ALPHA = 10 /s: one packet held in the queue
for the whole flow costs as much as 10 MTU/s (0.12 Mbit/s) of throughput.

Where this deviates from the paper, and why (docs/network/lfq.md has the whole list):

* **Output**: the paper's network outputs the limit itself (linear output,
  targets +-1 packet).  Ours outputs a in [-1, 1] mapped log-scale to 1..256
  packets: the optimal limits span 1..~60 packets (a BDP of 5 Mbit/s x 5 ms is
  2 packets, of 25 Mbit/s x 25 ms 52), and a bounded output keeps the actor
  inside what the critic was trained on.
* **Input scaling**: the authors divide queue sizes by 100, rates by 10000 pps
  and times by 10 s; ours rates by 1000 pps (at 5..25 Mbit/s the rates are
  400..2100 pps: /10000 leaves them all near 0.1 and the network hardly sees
  the bandwidth, the feature the limit most depends on).
* **Derived inputs** (optional, an actor file says whether it takes them): 30 numbers computed
  from the 60 (:func:`derived`): per EWMA, the packets between drops (log scale), the buffer's
  fill and the trough of its sawtooth, relative to the limit.  The paper's 60 hold this
  information only through products and ratios of two features.
* **Empty inputs** (optional, likewise): the share of the flow's arrivals that found its queue
  empty (:func:`empty_inputs`, 10 EWMAs kept by linkemu): what tells a flow whose queue runs dry
  after each drop (Reno under a limit below its BDP) from one whose queue does not (BIC).
* **RTT inputs** (optional, likewise): the flow's handshake RTT as linkemu's lfq measures it (its SYN to
  its next packet, ``handshake_rtt_s`` in the flow's state) and the bandwidth-delay product it gives with
  each out-rate EWMA (:func:`rtt_inputs`).  Paper 001's inputs hold the RTT only through the sawtooth's
  period; its ns-3 agent learned limits that grow with the RTT from ~10^5 flows, ours from ~10^3 did not
  (docs/network/lfq.md "The RTT a router can see").
* **Start-up** (optional, an actor file says whether it has one): for a flow younger than
  ``startup.seconds`` the limit is ``startup.limit_pkts`` whatever the network says
  (:class:`Startup`).  Paper 001 lets the network decide from a flow's first packet on; with tail
  drop, slow start overshoots any limit by up to its window and NewReno without SACK then repairs
  the burst of drops one per round trip, which costs it more than any later limit can win back
  (docs/network/lfq.md "A start-up limit").
* **Network**: two hidden layers of 64 (leaky ReLU) instead of three of 256:
  we train on ~10^3 real-time flows, not the paper's ~10^5 simulated ones.

The actor file (``ccswitch-lfq-actor``, JSON, checksummed like the DQN's policy
file) is the one contract between training and the router; scenario files
select it with ``agent`` in an lfq queue table.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .policy import PolicyError, decode_array, encode_layers, plain_json, read_signed, write_signed

__all__ = [
    "ACTOR_FORMAT",
    "ALPHA",
    "DERIVED_FEATURES",
    "EMPTY_FEATURES",
    "FEATURE_NAMES",
    "LOG2_MAX",
    "LOG2_MIN",
    "MTU",
    "OBS_FEATURES",
    "RTT_FEATURES",
    "SCALES",
    "Actor",
    "ActorError",
    "K",
    "SampleInputsError",
    "Startup",
    "action_for",
    "derived",
    "empty_inputs",
    "handshake_rtt_s",
    "input_names",
    "limit_for",
    "load_actor",
    "observation",
    "reward",
    "rtt_inputs",
    "sample_inputs",
    "save_actor",
]

ACTOR_FORMAT = "ccswitch-lfq-actor"
ACTOR_VERSION = 1

K = 10
"""EWMAs per feature (linkemu's lfq_features.rs: weights 2^-5 .. 2^-14)."""
SCALES: dict[str, float] = {
    "queue_pkts": 100.0,       # the authors' /100
    "queue_std_pkts": 100.0,   # the authors' /100
    "limit_pkts": 100.0,       # the authors' /100
    "in_rate_pps": 1000.0,     # the authors' /10000; module docstring: /1000
    "out_rate_pps": 1000.0,
    "since_loss_s": 10.0,      # the authors' /10 s
}
"""Each of the paper's six features (linkemu's names) and what it is divided by."""
FEATURE_NAMES: tuple[str, ...] = tuple(SCALES)
OBS_FEATURES: tuple[str, ...] = tuple(f"{n}[{k}]" for n in FEATURE_NAMES for k in range(K))
"""The observation, in order: the six features' 10 averages each (60 numbers)."""
CLIP = 20.0
"""Every input is clipped to [-CLIP, CLIP] (a time since loss of 200 s; queues of 2000 packets)."""
DERIVED_NAMES: tuple[str, ...] = ("loss_gap_log2pkts", "fill", "trough")
"""Optional inputs computed from the 60 (:func:`derived`; not in paper 001, docs/network/lfq.md says why)."""
DERIVED_FEATURES: tuple[str, ...] = tuple(f"{n}[{k}]" for n in DERIVED_NAMES for k in range(K))
"""The derived inputs, in order, after :data:`OBS_FEATURES` in an actor that takes them (90 inputs)."""
EMPTY_FEATURES: tuple[str, ...] = tuple(f"empty_frac[{k}]" for k in range(K))
"""Optional inputs read from linkemu (:func:`empty_inputs`; not in paper 001): the share of the flow's arrivals
that found its queue empty, 10 EWMAs, unscaled.  Last in an actor that takes them."""
RTT_SCALE_S = 0.1
"""The handshake RTT input is divided by this (100 ms: the paper's draws' 5..25 ms read 0.05..0.25)."""
RTT_FEATURES: tuple[str, ...] = ("handshake_rtt", "rtt_known", *(f"bdp_log2[{k}]" for k in range(K)))
"""Optional inputs (:func:`rtt_inputs`; not in paper 001), last in an actor that takes them: the handshake
RTT / RTT_SCALE_S, 1 if the flow has one (else 0 and every RTT input 0), and per out-rate EWMA k
log2(1 + out_rate_pps[k] x RTT) / 8, the flow's BDP in packets at the rate it gets, on a log scale."""
LOG2_MIN, LOG2_MAX = 0.0, 8.0
"""The limit's range on the log2 scale: 1..256 packets."""
ALPHA = 10.0
"""The reward's trade-off (1/s): the authors' ``alpha = 10.0`` (rl.cc)."""
MTU = 1500
"""Bytes per packet in the reward's queue term (the testbed's IP MTU; the authors' segment 1446)."""


class ActorError(ValueError):
    """An actor file is missing, unreadable, corrupt or does not fit this ccswitch."""


STARTUP_MAX_S = 10.0
"""The longest start-up an actor file may ask for (a flow of paper 001's distribution lasts 3.75..6.25 s)."""


@dataclass(frozen=True)
class Startup:
    """A flow's limit while it is young (module docstring, "Start-up"): *limit_pkts* until its age (linkemu's
    ``age_s``, from its first packet) reaches *seconds*; the actor's limit from then on."""

    seconds: float
    limit_pkts: int

    def __post_init__(self) -> None:
        if not 0.0 < self.seconds <= STARTUP_MAX_S:
            raise ValueError(f"start-up seconds must be in (0, {STARTUP_MAX_S:g}], got {self.seconds}")
        if not 2 ** LOG2_MIN <= self.limit_pkts <= 2 ** LOG2_MAX:
            raise ValueError(f"start-up limit must be {2 ** LOG2_MIN:.0f}..{2 ** LOG2_MAX:.0f} packets, "
                             f"got {self.limit_pkts}")

    @classmethod
    def parse(cls, text: str) -> Startup:
        """``LIMIT:SECONDS`` (the command lines' form), e.g. ``8:1``; ValueError names what is wrong."""
        lim, sep, secs = text.partition(":")
        try:
            limit_pkts, seconds = int(lim), float(secs)
        except ValueError:
            sep = ""
        if not sep:
            raise ValueError(f"expected LIMIT:SECONDS, e.g. 8:1 (packets until the flow is 1 s old), got {text!r}")
        return cls(seconds=seconds, limit_pkts=limit_pkts)

    def as_dict(self) -> dict[str, Any]:
        """The form an actor file and a training sample keep it in (:meth:`from_dict` reads it back)."""
        return {"seconds": self.seconds, "limit_pkts": self.limit_pkts}

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> Startup:
        return cls(seconds=float(doc["seconds"]), limit_pkts=int(doc["limit_pkts"]))


def observation(features: Mapping[str, Sequence[float]]) -> np.ndarray:
    """The 60 inputs from one flow's ``features`` object of linkemu's state (missing: zeros)."""
    out = np.concatenate([_ewmas(features, name) / SCALES[name] for name in FEATURE_NAMES]).astype(np.float32)
    np.nan_to_num(out, copy=False, nan=0.0, posinf=CLIP, neginf=-CLIP)
    return np.clip(out, -CLIP, CLIP, out=out)


def _ewmas(features: Mapping[str, Sequence[float]], name: str) -> np.ndarray:
    """Feature *name*'s K averages from one flow's ``features``, unscaled (missing or short: zeros after)."""
    out = np.zeros(K, dtype=np.float64)
    vals = features.get(name) or ()
    n = min(len(vals), K)
    if n:
        out[:n] = np.asarray(vals[:n], dtype=np.float64)
    return out


def derived(obs: np.ndarray) -> np.ndarray:
    """The 30 derived inputs from observations [..., 60] (:func:`observation`'s scaling), per EWMA k:

    * ``loss_gap_log2pkts[k]`` = log2(1 + since_loss_s[k] x out_rate_pps[k]) / 10: the packets the flow
      sends between its drops (the average of the count since the last drop, so about half the gap), on
      a log scale.  For Reno that is ~3/8 W^2 with W = BDP + limit; for CUBIC it grows with the time
      CUBIC takes to return to W (~ W^(1/3) s, whatever the RTT): with the rate and the limit, the RTT
      and the CCA are in it, but only through a product, which 10^3 samples do not teach a small
      network.
    * ``fill[k]`` = queue_pkts[k] / limit_pkts[k]: how full the flow keeps its buffer.
    * ``trough[k]`` = max(queue_pkts[k] - sqrt(3) queue_std_pkts[k], 0) / limit_pkts[k]: the bottom of
      the queue's sawtooth (a linear ramp between a and b has mean (a + b) / 2 and deviation
      (b - a) / sqrt(12)) relative to the limit.  After a drop Reno halves its window and CUBIC keeps
      0.7 of it, so with the same limit and BDP Reno's trough is lower (or the queue empties).
    """
    x = np.asarray(obs, dtype=np.float32)
    cols = {n: x[..., i * K:(i + 1) * K].astype(np.float64) * SCALES[n] for i, n in enumerate(FEATURE_NAMES)}
    lim = np.maximum(cols["limit_pkts"], 1.0)
    gap = np.log2(1.0 + np.maximum(cols["since_loss_s"], 0.0) * np.maximum(cols["out_rate_pps"], 0.0)) / 10.0
    fill = cols["queue_pkts"] / lim
    trough = np.maximum(cols["queue_pkts"] - math.sqrt(3.0) * cols["queue_std_pkts"], 0.0) / lim
    out = np.concatenate([gap, fill, trough], axis=-1).astype(np.float32)
    np.nan_to_num(out, copy=False, nan=0.0, posinf=CLIP, neginf=-CLIP)
    return np.clip(out, -CLIP, CLIP, out=out)


def empty_inputs(features: Mapping[str, Sequence[float]]) -> np.ndarray:
    """The 10 ``empty_frac`` inputs from one flow's ``features`` (missing: zeros; a linkemu from before them).

    Not in paper 001 (linkemu's lfq_features.rs says why): after a drop Reno halves its window and BIC keeps
    0.8 of it, so with a limit below the BDP Reno's queue runs dry for part of each sawtooth, and its share of
    the link goes unused, where BIC's does not.  With the limit input this is what tells the agent which flows
    need a longer buffer: the 60 inputs hold it only through products and ratios of EWMAs."""
    out = _ewmas(features, "empty_frac").astype(np.float32)
    np.nan_to_num(out, copy=False, nan=0.0, posinf=1.0, neginf=0.0)
    return np.clip(out, 0.0, 1.0, out=out)


def rtt_inputs(obs: np.ndarray, rtt_s: float | None) -> np.ndarray:
    """The 12 :data:`RTT_FEATURES` of one flow from its 60 inputs (:func:`observation`) and its handshake RTT
    (linkemu's ``handshake_rtt_s``; None, or not a positive number: unknown, all 12 are 0).

    Why the product: the limit that keeps a Reno flow's link busy is its BDP, rate x RTT.  The rate is in the
    60 inputs, the RTT now too, but a small network learns a product of two inputs from ~10^3 samples poorly
    (the derived inputs' note); log2 of it is what the limit's own log2 scale needs."""
    out = np.zeros(len(RTT_FEATURES), dtype=np.float32)
    if rtt_s is None or not math.isfinite(rtt_s) or rtt_s <= 0.0:
        return out
    i = FEATURE_NAMES.index("out_rate_pps")
    rate = np.maximum(np.asarray(obs, dtype=np.float64)[i * K:(i + 1) * K] * SCALES["out_rate_pps"], 0.0)
    out[0] = min(rtt_s / RTT_SCALE_S, CLIP)
    out[1] = 1.0
    out[2:] = np.log2(1.0 + rate * rtt_s) / 8.0
    return out


class SampleInputsError(ValueError):
    """Training samples that lack inputs the actor is to take (collected before linkemu reported them)."""


def sample_inputs(rows: Sequence[Mapping[str, Any]], *, with_derived: bool = False, with_empty: bool = False,
                  with_rtt: bool = False) -> np.ndarray:
    """An actor's inputs (:func:`input_names`) for training samples (``envs/lfq_env.py``'s ``obs``, ``empty``
    and ``handshake_rtt_s`` at the experiment), rows x inputs.  Samples without what an input needs:
    :class:`SampleInputsError`, one line naming how many and the flag to drop."""
    obs = np.array([r["obs"] for r in rows], dtype=np.float32).reshape(len(rows), len(OBS_FEATURES))
    empty = rtts = None
    if with_empty:
        bad = sum(len(r.get("empty") or ()) != len(EMPTY_FEATURES) for r in rows)
        if bad:
            raise SampleInputsError(f"{bad} of {len(rows)} samples have no empty_frac inputs (collected before "
                                    "linkemu reported them): collect again, or train without --empty")
        empty = np.array([r["empty"] for r in rows], dtype=np.float32).reshape(len(rows), K)
    if with_rtt:
        bad = sum("handshake_rtt_s" not in r for r in rows)
        if bad:
            raise SampleInputsError(f"{bad} of {len(rows)} samples have no handshake_rtt_s (collected before "
                                    "linkemu measured it): collect again, or train without --rtt")
        rtts = [r["handshake_rtt_s"] for r in rows]
    return _assemble(obs, with_derived, empty, rtts)


def _assemble(obs: np.ndarray, with_derived: bool, empty: np.ndarray | None,
              rtts: Sequence[float | None] | None) -> np.ndarray:
    """The one order of an actor's inputs (:func:`input_names`), for the router and for training alike: the 60,
    the derived ones if *with_derived*, the *empty* ones if given, the RTT ones if *rtts* are given."""
    parts = [obs, derived(obs)] if with_derived else [obs]
    if empty is not None:
        parts.append(empty)
    if rtts is not None:
        parts.append(np.stack([rtt_inputs(o, r) for o, r in zip(obs, rtts, strict=True)]) if len(obs)
                     else np.zeros((0, len(RTT_FEATURES)), dtype=np.float32))
    return np.concatenate(parts, axis=1)


def limit_for(action: float) -> int:
    """The per-flow limit (packets) for action a in [-1, 1] (module docstring, step 2)."""
    a = -1.0 if not action >= -1.0 else 1.0 if action > 1.0 else float(action)  # NaN -> -1
    return max(1, round(2.0 ** (LOG2_MIN + (a + 1.0) / 2.0 * (LOG2_MAX - LOG2_MIN))))


def action_for(limit: float) -> float:
    """The inverse of :func:`limit_for` (before rounding): the action that gives *limit* packets."""
    lg = math.log2(min(max(float(limit), 2.0 ** LOG2_MIN), 2.0 ** LOG2_MAX))
    return 2.0 * (lg - LOG2_MIN) / (LOG2_MAX - LOG2_MIN) - 1.0


KAPPA = ALPHA * 0.015
"""The delay-priced reward's price of a queue one BDP deep, in shares of b (``delay_reward``): ALPHA x the
draws' mean RTT (15 ms), so that at that RTT it prices a packet as paper 001's reward does."""


def delay_reward(throughput_mbit: float, bandwidth_mbit: float, mean_queue_pkts: float, bdp_pkts: float,
                 kappa: float = KAPPA) -> float:
    """A deviation from paper 001 (docs/network/lfq.md "More data"): the flow's utilisation of
    its share b (clipped at 1) minus *kappa* x its mean queue in BDPs, i.e. the queueing delay over the base
    RTT.  It needs b and the RTT, which the trainer knows from each experiment's draw; the actor at run time
    needs neither (its inputs stay the 60 features)."""
    return min(throughput_mbit / bandwidth_mbit, 1.0) - kappa * mean_queue_pkts / bdp_pkts


def reward(throughput_bps: float, mean_queue_pkts: float, alpha: float = ALPHA) -> float:
    """Paper 001's reward over the rest of a flow: (throughput [B/s] - alpha * queue * MTU) / 1e6.

    *throughput_bps* in bytes per second (as the authors' ``sent_bytes / time``); *alpha* the queue's
    price, 1/s (the shipped ALPHA; models/lfq_ceiling.py tries others)."""
    return (throughput_bps - alpha * mean_queue_pkts * MTU) / 1e6


# ----------------------------------------------------------------- actor ---


@dataclass
class Actor:
    """The actor: tanh(leaky_relu(... leaky_relu(x W0 + b0) ...) Wn + bn) -> a in [-1, 1] per flow."""

    kernels: list[np.ndarray]
    biases: list[np.ndarray]
    interval_s: float
    leak: float = 0.01
    training: dict[str, Any] = field(default_factory=dict)
    evaluation: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None
    checksum: str = ""
    with_derived: bool = False  # inputs: OBS_FEATURES, then DERIVED_FEATURES (:func:`derived`)
    with_empty: bool = False    # ... then EMPTY_FEATURES (:func:`empty_inputs`)
    with_rtt: bool = False      # ... then RTT_FEATURES (:func:`rtt_inputs`)
    startup: Startup | None = None  # a young flow's limit (:class:`Startup`); None: the network's from the start

    def act_batch(self, obs: np.ndarray) -> np.ndarray:
        """Actions for a (flows, 60) batch of observations."""
        x = np.asarray(obs, dtype=np.float32)
        for k, b in zip(self.kernels[:-1], self.biases[:-1], strict=True):
            x = np.dot(x, k) + b
            x = np.where(x > 0, x, self.leak * x)
        return np.tanh(np.dot(x, self.kernels[-1]) + self.biases[-1])[..., 0]

    def act(self, obs: np.ndarray) -> float:
        return float(self.act_batch(np.asarray(obs, dtype=np.float32)[None, :])[0])

    def limits(self, features: Sequence[Mapping[str, Sequence[float]]],
               ages_s: Sequence[float] | None = None, rtts_s: Sequence[float | None] | None = None) -> list[int]:
        """The limit for each flow's ``features`` (one batched forward pass); with *ages_s* (each flow's
        ``age_s``) and a :attr:`startup`, a flow younger than its seconds gets its limit instead.  *rtts_s*:
        each flow's ``handshake_rtt_s`` (None: unknown), read by an actor :attr:`with_rtt`."""
        if not features:
            return []
        obs = np.stack([observation(f) for f in features])
        empty = np.stack([empty_inputs(f) for f in features]) if self.with_empty else None
        rtts: list[float | None] | None = None
        if self.with_rtt:  # a flow with no RTT gets the 'unknown' inputs
            rtts = list(rtts_s) if rtts_s is not None else [None] * len(features)
        acts = self.act_batch(_assemble(obs, self.with_derived, empty, rtts))
        out = [limit_for(float(a)) for a in acts]
        if self.startup is not None and ages_s is not None:
            young = self.startup
            out = [young.limit_pkts if age < young.seconds else lim for lim, age in zip(out, ages_s, strict=True)]
        return out

    def limits_of(self, flows: Sequence[Mapping[str, Any]]) -> list[int]:
        """:meth:`limits` for flows as linkemu's lfq state lists them (``features``, ``age_s``,
        ``handshake_rtt_s``): what the router loop and the training episodes call."""
        feats = [f.get("features") or {} for f in flows]
        ages = [float(f.get("age_s", math.inf)) for f in flows] if self.startup else None
        rtts = [handshake_rtt_s(f) for f in flows] if self.with_rtt else None
        return self.limits(feats, ages, rtts)


def handshake_rtt_s(flow: Mapping[str, Any]) -> float | None:
    """A flow's handshake RTT in seconds from its control-socket state (linkemu's ``handshake_rtt_s``), or
    None when it has none usable (absent, not a number, not finite, or not positive)."""
    try:
        rtt = float(flow["handshake_rtt_s"])
    except (KeyError, TypeError, ValueError):
        return None
    return rtt if math.isfinite(rtt) and rtt > 0.0 else None


def input_names(with_derived: bool = False, with_empty: bool = False, with_rtt: bool = False) -> tuple[str, ...]:
    """An actor's inputs in order: the 60 of paper 001, then optionally the derived, empty and RTT ones."""
    return (OBS_FEATURES + (DERIVED_FEATURES if with_derived else ()) + (EMPTY_FEATURES if with_empty else ())
            + (RTT_FEATURES if with_rtt else ()))


def save_actor(path: str | Path, *, kernels: Sequence[np.ndarray], biases: Sequence[np.ndarray],
               interval_s: float, leak: float = 0.01, training: Mapping[str, Any] | None = None,
               evaluation: Mapping[str, Any] | None = None, with_derived: bool = False,
               with_empty: bool = False, with_rtt: bool = False, startup: Startup | None = None) -> str:
    """Write an actor file; returns its checksum.  *with_derived*, *with_empty*, *with_rtt*: the network also
    takes the 30 :data:`DERIVED_FEATURES`, then the 10 :data:`EMPTY_FEATURES`, then the 12
    :data:`RTT_FEATURES`, after the 60 (the file's ``features`` lists its inputs: :func:`input_names`).
    *startup*: a young flow's limit (:class:`Startup`; the file
    has no ``startup`` key without one, as before it existed)."""
    doc: dict[str, Any] = {
        "format": ACTOR_FORMAT, "version": ACTOR_VERSION,
        "features": list(input_names(with_derived, with_empty, with_rtt)),
        "scales": dict(SCALES), "interval_s": interval_s,
        "action": {"kind": "log2 limit", "log2_min": LOG2_MIN, "log2_max": LOG2_MAX},
        "reward": {"alpha_per_s": ALPHA, "mtu_bytes": MTU},
        "network": {"hidden_activation": "leaky_relu", "leak": leak, "output_activation": "tanh",
                    "layers": encode_layers(kernels, biases)},
        "training": plain_json(training),
        "evaluation": plain_json(evaluation),
    }
    if startup is not None:
        doc["startup"] = startup.as_dict()
    return write_signed(path, doc)


def load_actor(path: str | Path) -> Actor:
    """Load and check an actor file; every problem is one :class:`ActorError` line naming the file."""
    p = Path(path)
    doc = read_signed(p, fmt=ACTOR_FORMAT, version=ACTOR_VERSION, what="LFQ actor", article="an",
                      error=ActorError, hint="train one with `python -m ccswitch.models.lfq_train train`, or use "
                                             "models/lfq_actor.json")
    try:
        return _build_actor(p, doc)
    except PolicyError as e:
        raise ActorError(str(e)) from None
    except (KeyError, TypeError, IndexError, ValueError, AttributeError) as e:
        raise ActorError(f"{p}: malformed LFQ actor file ({type(e).__name__}: {e})") from None


def _build_actor(p: Path, doc: dict[str, Any]) -> Actor:
    feats = tuple(doc["features"])
    kinds = [(d, e, r) for d in (False, True) for e in (False, True) for r in (False, True)
             if input_names(d, e, r) == feats]
    if not kinds or doc["scales"] != SCALES:
        raise ActorError(f"{p}: its features or their scaling are not this ccswitch's observation "
                         f"({len(OBS_FEATURES)} inputs: {', '.join(FEATURE_NAMES)} x {K}, optionally then "
                         f"{', '.join(DERIVED_NAMES)} x {K}, then empty_frac x {K}, then handshake_rtt, "
                         f"rtt_known, bdp_log2 x {K}); train it again")
    with_derived, with_empty, with_rtt = kinds[0]
    n_in = len(feats)
    act = doc["action"]
    if (act.get("log2_min"), act.get("log2_max")) != (LOG2_MIN, LOG2_MAX):
        raise ActorError(f"{p}: trained for another action mapping ({act}); train it again")
    net = doc["network"]
    layers = net["layers"]
    kernels = [decode_array(la["kernel"], f"{p}: network.layers[{i}].kernel") for i, la in enumerate(layers)]
    biases = [decode_array(la["bias"], f"{p}: network.layers[{i}].bias") for i, la in enumerate(layers)]
    ok = bool(kernels) and kernels[0].ndim == 2 and kernels[0].shape[0] == n_in
    ok = ok and kernels[-1].ndim == 2 and kernels[-1].shape[1] == 1
    for i, (k, b) in enumerate(zip(kernels, biases, strict=True)):
        ok = ok and k.ndim == 2 and b.shape == (k.shape[1],)
        ok = ok and (i == 0 or kernels[i - 1].shape[1] == k.shape[0])
    if not ok:
        raise ActorError(f"{p}: the layers do not chain from {n_in} inputs to 1 output: "
                         f"{[list(k.shape) for k in kernels]}")
    interval = float(doc["interval_s"])
    if not 0.001 <= interval <= 10.0:
        raise ActorError(f"{p}: interval_s {interval} is outside 0.001..10 s")
    startup = None
    if doc.get("startup") is not None:
        try:
            startup = Startup.from_dict(doc["startup"])
        except ValueError as e:
            raise ActorError(f"{p}: startup: {e}; train it again") from None
    return Actor(kernels, biases, interval, float(net.get("leak", 0.01)), doc.get("training", {}),
                 doc.get("evaluation", {}), p, str(doc["checksum"]), with_derived, with_empty, with_rtt, startup)
