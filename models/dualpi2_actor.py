"""The DualPI2 actor file and what it defines: paper 000's agent's observation, action and reward.

Numpy only (no TensorFlow): the router side (``testbed/runs/dualpi2_agent.py``, the
loop beside linkemu), the training env (``envs/dualpi2_env.py``), the trainer
(``models/a3c_dualpi2.py``) and the scenario parser (which checks an ``agent``
file) all use these definitions.

Paper 000 puts an A3C agent beside a dual-queue coupled AQM: every control
interval it reads the queue's state and sets the marking/drop probability.
Here the AQM is linkemu's DualPI2 (RFC 9332) and the agent talks to it through
linkemu's control socket (:mod:`ccswitch.testbed.runs.linkemu_control`):

1. ``state`` of the bottleneck direction -> the observation below (12 numbers,
   each scaled to about 0..1 like the paper's min-max normalisation);
2. the actor network (numpy only; trained by ``ccswitch.models.a3c_dualpi2``)
   gives the action a in [-1, 1];
3. one of four action mappings (the actor file's ``action.kind``, :data:`ACTION_KINDS`):

   * ``step`` (paper 000: the agent sets p' itself): p' <- clip(p' * 2**(ACTION_SCALE * a),
     P_MIN, P_MAX) (ACTION_SCALE 0.5), sent as ``set base_prob``; the PI controller is paused;
   * ``residual-k`` (issue 14's stretch item): ``residual``'s factor and, from a second output a_k,
     the coupling factor k = 2**(1 + K_SCALE * a_k) in [K_MIN, K_MAX] = [1, 4] (a_k = 0: RFC 9332's
     k = 2, so an untrained actor is still plain DualPI2), sent as ``set prob_scale, k``.  Its
     observation is the 12 numbers and OBS_FEATURES_K's three (k now, the L4S class's share of the
     packets through the queue over the interval and over about one second), its reward
     :func:`reward_k` (``reward`` minus the per-flow L:C imbalance, which training can count because
     the env knows its flows).  linkemu's lease (``hold_ms``) covers k too (a k not renewed is the
     configuration's again), and the router loop also puts k back to the scenario's value when it
     stops or fails (:mod:`ccswitch.testbed.runs.dualpi2_agent`);
   * ``k``: ``residual-k`` without the factor: the one output sets k as a_k above, sent as ``set k``
     with the lease, and the PI controller alone sets p' (same observation and reward).  Why: trained
     together, the factor drifted to its bound and took k with it (docs/l4s.md);
   * ``residual``: the PI controller keeps running and the agent sets a factor on its p',
     2**(RESIDUAL_SCALE * a) (x0.5..x2), sent as ``set prob_scale``.  a = 0 is DualPI2 as it
     is, so even an untrained actor is the PI controller, and training only has to learn
     corrections (residual policy learning: Johannink et al. 2019, Silver et al. 2018).  The PI
     integrator stays in the loop, so the delay the queue settles at is still the target's;
     what the agent changes is how p' moves on the way (flows arriving, leaving, slow start).

   The modes that set k take an observation option (the actor file's ``observation``, :data:`OBS_KINDS`):
   ``base`` (the above; files without the key) or ``flows``, OBS_FEATURES_KF: OBS_FEATURES_K and the active
   flows per class (log2(1 + n_L) / 4, log2(1 + n_C) / 4, from linkemu's ``l4s_flows``, ``classic_flows``:
   5-tuples with a packet in the last 200 ms).  Why: the per-flow L:C balance and the k that evens it depend on
   how many flows of each class share the link, which class shares alone do not tell (docs/l4s.md).

   Each is sent with a lease of LEASE_INTERVALS intervals (``hold_ms``): if the agent dies
   or hangs, linkemu's PI controller takes p' back, and the configuration's k returns, within the lease.

Where this deviates from the paper, and why:

* **Action** (``step``): the paper's action is p itself.  Ours is a change of p' in log
  space (at most x1.41 or /1.41 per interval).  The state carries p', so the two
  can express the same controllers; the relative step makes a random initial
  policy a random walk around the current p' instead of a jump anywhere in
  [0, 1], which is what lets 100 episodes of 100 steps learn anything.
* **Reward**: the paper's reward is the queue delay alone, whose optimum is
  p' = 1 (an empty queue and an idle link).  Ours (:func:`reward`) pays for
  utilisation and charges for the Classic queue delay away from DualPI2's
  target (more above it than below) and for Classic drops, so the optimum is
  the PI controller's job: full link, Classic delay at the target, few drops.
* **State**: the paper lists p, queue delay, drops, queue length and bytes sent
  per sub-queue.  DualPI2 has two queues (C and L) and one p', so the 12
  numbers are those per class plus utilisation, offered load and the delay
  trend (:data:`OBS_FEATURES`).

The actor file (``ccswitch-dualpi2-actor``, JSON like the DQN's policy file,
checksummed) is the one contract between training and the router; scenario
files select it with ``agent`` in a dualpi2 queue table.

This module holds the actor network and its file.  The definitions live beside it and are importable from
here as well: the observation and action spaces (:mod:`ccswitch.models.dualpi2_spaces`), the observer
(:mod:`ccswitch.models.dualpi2_observer`) and the reward (:mod:`ccswitch.models.dualpi2_reward`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

# The definitions, re-exported: callers import them from here (`X as X`: neither in __all__ nor used here).
from .dualpi2_observer import F32, STATE_KEYS, STATE_KEYS_K, STATE_KEYS_KF, Observer, state_keys_for
from .dualpi2_reward import LC_CAP as LC_CAP
from .dualpi2_reward import lc_imbalance, reward, reward_k
from .dualpi2_spaces import (
    ACTION_KINDS,
    ACTION_SCALE,
    K_MAX,
    K_MIN,
    K_MODES,
    K_SCALE,
    LEASE_INTERVALS,
    OBS_FEATURES,
    OBS_FEATURES_K,
    OBS_FEATURES_KF,
    OBS_KINDS,
    P_MAX,
    P_MIN,
    RESIDUAL_SCALE,
    action_dims,
    control_params,
    coupling_k,
    features_for,
    k_output,
    next_base_prob,
    prob_scale,
)
from .dualpi2_spaces import CLIP as CLIP
from .dualpi2_spaces import SHARE_EMA as SHARE_EMA
from .policy import PolicyError, decode_array, encode_layers, plain_json, read_signed, write_signed

__all__ = [
    "ACTION_KINDS",
    "ACTOR_FORMAT",
    "K_MODES",
    "LEASE_INTERVALS",
    "OBS_FEATURES",
    "OBS_FEATURES_K",
    "OBS_FEATURES_KF",
    "OBS_KINDS",
    "STATE_KEYS",
    "STATE_KEYS_K",
    "STATE_KEYS_KF",
    "Actor",
    "ActorError",
    "Observer",
    "action_dims",
    "annotate_actor",
    "control_params",
    "coupling_k",
    "features_for",
    "k_output",
    "lc_imbalance",
    "load_actor",
    "next_base_prob",
    "prob_scale",
    "reward",
    "reward_k",
    "save_actor",
    "state_keys_for",
]

ACTOR_FORMAT = "ccswitch-dualpi2-actor"
ACTOR_VERSION = 1


class ActorError(ValueError):
    """An actor file is missing, unreadable, corrupt or does not fit this ccswitch."""


# ----------------------------------------------------------------- actor ---


@dataclass
class Actor:
    """The actor's mean network: tanh(relu(relu(x W0 + b0) W1 + b1) W2 + b2) -> a in [-1, 1]."""

    kernels: list[np.ndarray]
    biases: list[np.ndarray]
    interval_s: float
    target_ms: float = 15.0
    mode: str = "step"  # the action mapping, a key of ACTION_KINDS
    obs: str = "base"  # the observation option (OBS_KINDS; the file's ``observation``, absent: base)
    training: dict[str, Any] = field(default_factory=dict)
    evaluation: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None
    checksum: str = ""

    def act(self, obs: np.ndarray) -> float:
        # np.dot, not @: for a vector and a matrix both are one BLAS gemv (the same numbers, checked by
        # tests/test_dualpi2_agent.py against @), and np.dot is the cheaper call (issue 14).
        x = obs if type(obs) is np.ndarray and obs.dtype is F32 else np.asarray(obs, dtype=np.float32)
        for k, b in zip(self.kernels[:-1], self.biases[:-1], strict=True):
            x = np.maximum(np.dot(x, k) + b, 0.0)
        return float(np.tanh(np.dot(x, self.kernels[-1]) + self.biases[-1])[0])

    def act_all(self, obs: np.ndarray) -> tuple[float, ...]:
        """Every output (``residual-k``: (factor, k)); the first is :meth:`act`'s."""
        x = obs if type(obs) is np.ndarray and obs.dtype is F32 else np.asarray(obs, dtype=np.float32)
        for k, b in zip(self.kernels[:-1], self.biases[:-1], strict=True):
            x = np.maximum(np.dot(x, k) + b, 0.0)
        return tuple(map(float, np.tanh(np.dot(x, self.kernels[-1]) + self.biases[-1])))


def save_actor(path: str | Path, *, kernels: Sequence[np.ndarray], biases: Sequence[np.ndarray],
               interval_s: float, target_ms: float = 15.0, mode: str = "step",
               training: Mapping[str, Any] | None = None, evaluation: Mapping[str, Any] | None = None,
               obs: str = "base") -> str:
    """Write an actor file; returns its checksum.  *obs* other than ``base`` is recorded as ``observation``
    (files without it are ``base``: those written before the option are byte-for-byte what they were)."""
    action: dict[str, Any] = (
        {"kind": ACTION_KINDS["residual"], "scale": RESIDUAL_SCALE} if mode == "residual"
        else {"kind": ACTION_KINDS["residual-k"], "scale": RESIDUAL_SCALE, "k_scale": K_SCALE, "k_min": K_MIN,
              "k_max": K_MAX} if mode == "residual-k"
        else {"kind": ACTION_KINDS["k"], "k_scale": K_SCALE, "k_min": K_MIN, "k_max": K_MAX} if mode == "k"
        else {"kind": ACTION_KINDS["step"], "scale": ACTION_SCALE, "p_min": P_MIN, "p_max": P_MAX})
    doc: dict[str, Any] = {
        "format": ACTOR_FORMAT, "version": ACTOR_VERSION,
        "features": list(features_for(mode, obs)), "interval_s": interval_s, "target_ms": target_ms,
        **({"observation": obs} if obs != "base" else {}),
        "action": action,
        "network": {"hidden_activation": "relu", "output_activation": "tanh",
                    "layers": encode_layers(kernels, biases)},
        "training": plain_json(training),
        "evaluation": plain_json(evaluation),
    }
    return write_signed(path, doc)


def load_actor(path: str | Path) -> Actor:
    """Load and check an actor file; every problem is one :class:`ActorError` line naming the file."""
    p = Path(path)
    doc = read_signed(p, fmt=ACTOR_FORMAT, version=ACTOR_VERSION, what="DualPI2 actor", error=ActorError,
                      hint="train one with `python -m ccswitch.models.a3c_dualpi2 train`, or use "
                           "models/dualpi2_a3c.json")
    try:
        return _build_actor(p, doc)
    except PolicyError as e:
        raise ActorError(str(e)) from None
    except (KeyError, TypeError, IndexError, ValueError) as e:
        raise ActorError(f"{p}: malformed actor file ({type(e).__name__}: {e})") from None


def _build_actor(p: Path, doc: dict[str, Any]) -> Actor:
    act = doc["action"]
    if act.get("kind") == ACTION_KINDS["residual"]:
        mode, ok = "residual", act.get("scale") == RESIDUAL_SCALE
    elif act.get("kind") == ACTION_KINDS["residual-k"]:
        mode, ok = "residual-k", ((act.get("scale"), act.get("k_scale"), act.get("k_min"), act.get("k_max"))
                                  == (RESIDUAL_SCALE, K_SCALE, K_MIN, K_MAX))
    elif act.get("kind") == ACTION_KINDS["k"]:
        mode, ok = "k", (act.get("k_scale"), act.get("k_min"), act.get("k_max")) == (K_SCALE, K_MIN, K_MAX)
    else:
        mode, ok = "step", (act.get("scale"), act.get("p_min"), act.get("p_max")) == (ACTION_SCALE, P_MIN, P_MAX)
    obs = doc.get("observation", "base")
    if obs not in OBS_KINDS or (obs != "base" and mode not in K_MODES):
        raise ActorError(f"{p}: observation {obs!r} is not one this ccswitch knows for its action mapping "
                         f"(the modes that set k: {', '.join(OBS_KINDS)}; the others: base)")
    features = features_for(mode, obs)
    if tuple(doc["features"]) != features:
        raise ActorError(f"{p}: its features are not this ccswitch's observation ({len(features)} "
                         f"features: {', '.join(features)}); train it again")
    if not ok:
        raise ActorError(f"{p}: trained for another action mapping ({act}); train it again")
    layers = doc["network"]["layers"]
    kernels = [decode_array(la["kernel"], f"{p}: network.layers[{i}].kernel") for i, la in enumerate(layers)]
    biases = [decode_array(la["bias"], f"{p}: network.layers[{i}].bias") for i, la in enumerate(layers)]
    outputs = action_dims(mode)
    shapes_ok = bool(kernels) and kernels[0].shape[0] == len(features) and kernels[-1].shape[1] == outputs
    for i, (k, b) in enumerate(zip(kernels, biases, strict=True)):
        shapes_ok = shapes_ok and k.ndim == 2 and b.shape == (k.shape[1],)
        shapes_ok = shapes_ok and (i == 0 or kernels[i - 1].shape[1] == k.shape[0])
    if not shapes_ok:
        raise ActorError(f"{p}: the layers do not chain from {len(features)} inputs to {outputs} output(s): "
                         f"{[list(k.shape) for k in kernels]}")
    interval = float(doc["interval_s"])
    if not 0.001 <= interval <= 10.0:
        raise ActorError(f"{p}: interval_s {interval} is outside 0.001..10 s")
    return Actor(kernels, biases, interval, float(doc.get("target_ms", 15.0)), mode, obs,
                 doc.get("training", {}), doc.get("evaluation", {}), p, str(doc["checksum"]))


def annotate_actor(path: str | Path, evaluation: Mapping[str, Any]) -> str:
    """Record closed-loop results in an actor file (key ``evaluation``); the checksum covers them."""
    p = Path(path)
    doc = json.loads(p.read_text())
    load_actor(p)  # refuse to re-sign a corrupt file
    doc["evaluation"] = plain_json(evaluation)
    return write_signed(p, doc)
