"""RL-TCP (paper 003 / ns3-ai) for the `remote` CC: state, actions, reward and the numpy-only agent file.

One definition for the training env (``envs/rltcp_env.py``), the trainer
(``models/dqn_rltcp.py``) and the policy server (``ccswitch policy serve
--agent rl-tcp``, registered in ``ccswitch/remote/agents.py``).  Numpy only.

ns3-ai's RL-TCP (examples/rl-tcp, the agent paper 003 runs on its remote
server) acts every 0.1 s on one socket:

* **state** (5 numbers): ssThresh, cWnd, segmentsAcked (over the step),
  segmentSize, bytesInFlight -- here from one CWND_OBS record
  (``protocol.py``; the sender loop differences the kernel's counters over
  the step), **in packets and scaled** (:func:`features`): ssthresh
  (capped at 1000) / 100, cwnd / 100, packets delivered in the step (scaled
  to 0.1 s by the step's measured length, ``step_us``) / 100,
  mss / 1448, mean in-flight over the step / 100.  ns3-ai feeds raw bytes
  to the network; unscaled inputs of 10^4-10^6 would saturate a 5-20-20-4
  ReLU net, so this is a deviation of units, not of content.  The segment
  size is constant on a path; it is kept because it is the paper's state
  (the network learns it as a bias).
* **actions** (4, one Q-value each; :data:`ACTION_MODES`):

  * ``paper``: ns3-ai's: bit 0 set -> cwnd + 1 MSS, else + MSS^2 / cwnd
    (rounds to + 0 packets: the kernel's cwnd is whole packets); action < 3
    -> ssthresh 2 MSS, else bytesInFlight / 2 (``agents.rltcp_action``);
  * ``mult`` (what the shipped agent is trained with): cwnd x
    :data:`MULT_FACTORS` (0.7, 1, 1.1, 1.4), ssthresh left to the kernel
    (cwnd / 2 at a loss).  **Why a second mode:** every paper action
    *increases* cwnd, by at most one packet per 0.1 s (10 packets/s); the
    window only shrinks when the kernel reacts to a loss, so the agent can
    pick how fast to fill the queue but never drain it.  On the 10 Mbit/s x
    40 ms training path (BDP ~35 packets) the paper's best fixed action
    still fills the link in ~2 s (bench/rltcp_paper_actions.py; the premise
    that it cannot did not hold there), but it keeps a standing queue, and
    at 100 Mbit/s (BDP ~350) the climb would take ~34 s.  A multiplicative
    step reaches the BDP from 10 in 4 steps and can shrink as fast; it
    keeps the paper's 4-way network (5-20-20-4), state, reward and step.
* **reward**: segmentsAcked - bytesInFlight - cWnd (``agents.rltcp_reward``),
  here in packets / 100 (:data:`REWARD_SCALE`).  ns3-ai mixes units
  (segments acked minus *bytes*), so its reward is ~ -2 cwnd in bytes and is
  maximised by the smallest window.  In packets, per 0.1-s step at a 40 ms
  RTT, acked ~ cwnd x 2.5 below the BDP and the link rate above it, so the
  reward peaks near cwnd = BDP alone -- but against CUBIC in a full FIFO
  (RTT ~160 ms) acked ~ 0.6 cwnd and the optimum is again the floor: the
  reward itself yields to a queue-filling competitor.
* reward mode ``delay`` (:data:`REWARD_MODES`, :func:`delay_reward`; the
  training option ``--reward delay``), to test whether the starvation comes
  from the paper's reward: per step

      r = (log2(1 + acked) - DELAY_BETA * min(qdelay / min RTT, QDELAY_CAP)
           - LOSS_WEIGHT * lost / (acked + lost)) * DELAY_REWARD_SCALE

  with acked per STEP_S (as in the state), qdelay = the step's mean RTT -
  the connection's min RTT (0 when the step had no RTT sample).  Why this
  shape (constants in one place, :data:`DELAY_REWARD`): the throughput term
  is **log** throughput -- the utility of Kelly's proportional fairness and
  of Copa/Vivace (Copa maximises log throughput - delta log delay) -- so
  it is link independent (doubling the rate is worth +1 at 1 and at 100
  Mbit/s; no link-rate constant to pick) and it rewards the *first* packets
  most: against CUBIC at RTT 160 ms a cwnd of 2 (1.25 packets per step)
  scores 1.2, a fair share (~43) 5.5, so holding the floor is no longer
  optimal.  Queueing delay is charged relative to the min RTT (Aurora,
  Orca and Copa charge latency, not the window): a standing queue of one
  base RTT costs DELAY_BETA = 1, i.e. as much as halving the throughput;
  alone on the training path (BDP ~35, 2.5 packets acked per packet of
  cwnd per step at 40 ms) the marginal gain of the last packet below the
  BDP, 1 / (35 ln 2) = 0.041, exceeds the marginal penalty above it,
  DELAY_BETA / 35 = 0.029 -- the optimum is the BDP with at most a short
  queue.  A queue the competitor builds costs the same whatever the agent
  does, so it does not push the agent to the floor.  Loss is charged as
  the step's loss *fraction* (Aurora's loss rate; link independent):
  LOSS_WEIGHT = 10, so 10 % loss costs as much as halving the throughput
  (overrunning the FIFO with x 1.4 loses 30+ %).  QDELAY_CAP = 10 keeps a
  stalled step from dominating the TD targets.  DELAY_REWARD_SCALE = 0.1
  brings returns (gamma 0.8) to ~[-5, 4], near the paper reward's range.
  The state is the paper's: the queueing delay is not observed directly, the
  network can infer the RTT from acked / in-flight (= 0.1 s / RTT) on a
  path whose base RTT does not change.  The agent file records the reward
  it was trained for (``"reward": {"mode": ...}``; files without it were
  trained with ``paper``).
* cwnd of every decision clipped to [CWND_MIN, CWND_MAX] (2..400 packets;
  400 x 1448 B ~ the paper's 500 KB socket buffers).

The agent file (``ccswitch-rltcp-agent``, JSON, checksummed like the policy
file)::

    {"format": "ccswitch-rltcp-agent", "version": 1, "features": [5 names],
     "action": {"mode": "mult", "factors": [...]}, "step_s": 0.1,
     "reward": {"mode": "paper" | "delay", "constants": {...}},   (absent: "paper")
     "network": {"hidden_activation": "relu", "layers": [{"kernel": ARRAY, "bias": ARRAY}, ...]},
     "training": {...}, "checksum": "sha256:..."}

:func:`load_agent` fails with one :class:`AgentError` line naming the file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ccswitch.remote.agents import rltcp_action, rltcp_reward
from ccswitch.remote.protocol import CWND_DEC

from .policy import PolicyError, decode_array, encode_layers, plain_json, read_signed, write_signed

__all__ = ["ACTION_MODES", "AGENT_FORMAT", "DEFAULT_AGENT", "DELAY_REWARD", "FEATURES", "MULT_FACTORS", "REWARD_MODES",
           "AgentError", "RlTcpAgent", "apply_action", "delay_reward", "features", "load_agent", "reward", "save_agent"]

AGENT_FORMAT = "ccswitch-rltcp-agent"
AGENT_VERSION = 1
DEFAULT_AGENT = Path(__file__).resolve().parent / "rltcp_agent_delay.json"
"""The agent `ccswitch policy serve --agent rl-tcp` serves: the delay reward's (the paper's reward starves the
flow against CUBIC; its agent is models/rltcp_agent_paper.json, docs/remote-control.md)."""
FEATURES: tuple[str, ...] = ("ssthresh", "cwnd", "acked", "mss", "inflight")
"""The paper's 5-number state, in order (module docstring: units and scales)."""
PKT_SCALE = 100.0
SSTHRESH_CAP = 1000.0
MSS_SCALE = 1448.0
REWARD_SCALE = 100.0
STEP_S = 0.1
"""The paper's step; acked counts are scaled to it by the step's measured length (CWND_OBS step_us)."""
MULT_FACTORS: tuple[float, ...] = (0.7, 1.0, 1.1, 1.4)
ACTION_MODES: dict[str, str] = {"paper": "ns3-ai RL-TCP: cwnd +1 MSS or +MSS^2/cwnd; ssthresh 2 MSS or inflight/2",
                                "mult": "cwnd x (0.7, 1, 1.1, 1.4); ssthresh: the kernel's"}
N_ACTIONS = 4
DELAY_REWARD: dict[str, float] = {
    "DELAY_BETA": 1.0,           # per base RTT of queueing delay (qdelay / min RTT)
    "QDELAY_CAP": 10.0,          # qdelay / min RTT is capped here
    "LOSS_WEIGHT": 10.0,         # per unit of the step's loss fraction lost / (acked + lost)
    "DELAY_REWARD_SCALE": 0.1,   # the whole reward
}
"""The delay reward's constants, in one place (module docstring: why these values)."""
REWARD_MODES: dict[str, str] = {
    "paper": "segmentsAcked - bytesInFlight - cWnd, packets / 100 (ns3-ai RL-TCP)",
    "delay": "(log2(1 + acked) - DELAY_BETA min(qdelay / min RTT, QDELAY_CAP) - LOSS_WEIGHT lost / (acked + lost))"
             " * DELAY_REWARD_SCALE",
}
CWND_MIN, CWND_MAX = 2, 400


class AgentError(ValueError):
    """An agent file is missing, unreadable, corrupt or does not fit this ccswitch."""


def features(obs: np.ndarray) -> np.ndarray:
    """CWND_OBS[N] -> float32[N, 5], the scaled state (FEATURES)."""
    x = np.empty((len(obs), len(FEATURES)), dtype=np.float32)
    x[:, 0] = np.minimum(obs["ssthresh"].astype(np.float64), SSTHRESH_CAP) / PKT_SCALE
    x[:, 1] = obs["cwnd"] / PKT_SCALE
    x[:, 2] = acked_per_step(obs) / PKT_SCALE
    x[:, 3] = obs["mss"] / MSS_SCALE
    x[:, 4] = obs["inflight_avg"] / PKT_SCALE
    return x


def acked_per_step(obs: np.ndarray) -> np.ndarray:
    """Packets acked in the step, per STEP_S: a late step (a loaded host) is not mistaken for more throughput."""
    return obs["acked"] * (STEP_S * 1e6 / np.maximum(obs["step_us"].astype(np.float64), 1.0))


def reward(obs: np.ndarray, mode: str = "paper") -> np.ndarray:
    """The step's reward under *mode* (REWARD_MODES): the paper's, in packets / REWARD_SCALE, acked per
    STEP_S (module docstring), or :func:`delay_reward`."""
    if mode == "delay":
        return delay_reward(obs)
    if mode != "paper":
        raise ValueError(f"unknown reward mode {mode!r} (known: {', '.join(REWARD_MODES)})")
    norm = obs.copy()
    norm["acked"] = np.round(acked_per_step(obs))
    return rltcp_reward(norm) / REWARD_SCALE


def delay_reward(obs: np.ndarray) -> np.ndarray:
    """log2 throughput minus relative queueing delay and loss fraction (module docstring; DELAY_REWARD)."""
    c = DELAY_REWARD
    acked = acked_per_step(obs)
    min_rtt = obs["min_rtt_us"].astype(np.float64)
    mean_rtt = obs["rtt_avg_us"].astype(np.float64)
    ok = (min_rtt > 0) & (mean_rtt > 0)  # a step without an RTT sample is not charged
    qdelay = np.where(ok, np.maximum(mean_rtt - min_rtt, 0.0) / np.where(ok, min_rtt, 1.0), 0.0)
    lost = obs["lost"].astype(np.float64)
    loss = lost / np.maximum(obs["acked"].astype(np.float64) + lost, 1.0)
    return (np.log2(1.0 + acked) - c["DELAY_BETA"] * np.minimum(qdelay, c["QDELAY_CAP"])
            - c["LOSS_WEIGHT"] * loss) * c["DELAY_REWARD_SCALE"]


def apply_action(obs: np.ndarray, action: np.ndarray, mode: str = "mult") -> np.ndarray:
    """CWND_OBS[N] and actions int[N] in 0..3 -> CWND_DEC[N], cwnd within [CWND_MIN, CWND_MAX]."""
    action = np.asarray(action, dtype=np.int64)
    if action.shape != (len(obs),) or (len(action) and (action.min() < 0 or action.max() >= N_ACTIONS)):
        raise ValueError(f"actions must be {len(obs)} integers in 0..{N_ACTIONS - 1}")
    if mode == "paper":
        out = rltcp_action(obs, action)
    elif mode == "mult":
        out = np.zeros(len(obs), dtype=CWND_DEC)
        out["cookie"] = obs["cookie"]
        new = np.floor(obs["cwnd"].astype(np.float64) * np.asarray(MULT_FACTORS)[action])
        # x1.1 of a small window rounds to no change: grow by at least one packet
        new = np.where(action >= 2, np.maximum(new, obs["cwnd"].astype(np.float64) + 1), new)
        out["cwnd"] = new.astype(np.int64)
    else:
        raise ValueError(f"unknown action mode {mode!r} (known: {', '.join(ACTION_MODES)})")
    out["cwnd"] = np.clip(out["cwnd"], CWND_MIN, CWND_MAX)
    return out


@dataclass
class RlTcpAgent:
    """The trained Q-network, greedy: relu(relu(x K0 + b0) K1 + b1) K2 + b2 -> argmax -> action."""

    kernels: list[np.ndarray]
    biases: list[np.ndarray]
    mode: str = "mult"
    step_s: float = 0.1
    reward: str = "paper"  # the reward it was trained for (REWARD_MODES)
    training: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None
    checksum: str = ""
    name: str = "rl-tcp"

    def q_values(self, x: np.ndarray) -> np.ndarray:
        h = np.asarray(x, dtype=np.float32)
        for k, b in zip(self.kernels[:-1], self.biases[:-1], strict=True):
            h = np.maximum(h @ k + b, 0.0)
        return h @ self.kernels[-1] + self.biases[-1]

    def act(self, obs: np.ndarray) -> np.ndarray:
        return np.argmax(self.q_values(features(obs)), axis=1)

    def decide(self, obs: np.ndarray) -> np.ndarray:
        """CWND_OBS[N] -> CWND_DEC[N]: the cwnd agent interface of the policy server."""
        if not len(obs):
            return np.zeros(0, dtype=CWND_DEC)
        return apply_action(obs, self.act(obs), self.mode)


def save_agent(path: str | Path, *, kernels: Sequence[np.ndarray], biases: Sequence[np.ndarray],
               mode: str = "mult", step_s: float = 0.1, reward_mode: str = "paper",
               training: Mapping[str, Any] | None = None) -> str:
    """Write an agent file; returns its checksum."""
    if mode not in ACTION_MODES:
        raise ValueError(f"unknown action mode {mode!r}")
    if reward_mode not in REWARD_MODES:
        raise ValueError(f"unknown reward mode {reward_mode!r}")
    doc: dict[str, Any] = {
        "format": AGENT_FORMAT, "version": AGENT_VERSION, "features": list(FEATURES), "step_s": step_s,
        "action": {"mode": mode, "factors": list(MULT_FACTORS) if mode == "mult" else None,
                   "description": ACTION_MODES[mode]},
        "reward": {"mode": reward_mode, "description": REWARD_MODES[reward_mode],
                   "constants": dict(DELAY_REWARD) if reward_mode == "delay" else {"REWARD_SCALE": REWARD_SCALE}},
        "network": {"hidden_activation": "relu", "output_activation": "linear",
                    "layers": encode_layers(kernels, biases)},
        "training": plain_json(training),
    }
    return write_signed(path, doc)


def load_agent(path: str | Path | None = None) -> RlTcpAgent:
    """Load and check an agent file (default DEFAULT_AGENT); problems raise one AgentError line."""
    p = Path(path) if path is not None else DEFAULT_AGENT
    doc = read_signed(p, fmt=AGENT_FORMAT, version=AGENT_VERSION, what="RL-TCP agent", article="an",
                      error=AgentError, hint="train one with `python -m ccswitch.models.dqn_rltcp train`, then "
                                             "`export`; or use models/rltcp_agent_delay.json")
    try:
        return _build(p, doc)
    except PolicyError as e:
        raise AgentError(f"{p}: {e}") from None
    except (KeyError, TypeError, ValueError) as e:
        raise AgentError(f"{p}: malformed agent file ({type(e).__name__}: {e})") from None


def _build(p: Path, doc: dict[str, Any]) -> RlTcpAgent:
    if list(doc["features"]) != list(FEATURES):
        raise AgentError(f"{p}: features {doc['features']} do not match this ccswitch's {list(FEATURES)}")
    mode = doc["action"]["mode"]
    if mode not in ACTION_MODES:
        raise AgentError(f"{p}: unknown action mode {mode!r} (known: {', '.join(ACTION_MODES)})")
    if mode == "mult" and [float(f) for f in doc["action"]["factors"]] != list(MULT_FACTORS):
        raise AgentError(f"{p}: action factors {doc['action']['factors']} differ from {list(MULT_FACTORS)}")
    rew = doc.get("reward", {"mode": "paper"})  # version-1 files written before the field: the paper's
    reward_mode = rew.get("mode") if isinstance(rew, dict) else None
    if reward_mode not in REWARD_MODES:
        raise AgentError(f"{p}: unknown reward mode {reward_mode!r} (known: {', '.join(REWARD_MODES)})")
    layers = doc["network"]["layers"]
    if not isinstance(layers, list) or not layers:
        raise AgentError(f"{p}: network.layers must be a non-empty list")
    kernels = [decode_array(lay["kernel"], f"network.layers[{i}].kernel") for i, lay in enumerate(layers)]
    biases = [decode_array(lay["bias"], f"network.layers[{i}].bias") for i, lay in enumerate(layers)]
    width = len(FEATURES)
    for i, (k, b) in enumerate(zip(kernels, biases, strict=True)):
        if k.ndim != 2 or k.shape[0] != width or b.shape != (k.shape[1],):
            raise AgentError(f"{p}: layer {i} has kernel {list(k.shape)} and bias {list(b.shape)}, expected "
                             f"[{width}, n] and [n]")
        if not (np.isfinite(k).all() and np.isfinite(b).all()):
            raise AgentError(f"{p}: layer {i} has non-finite weights")
        width = k.shape[1]
    if width != N_ACTIONS:
        raise AgentError(f"{p}: the network has {width} outputs, RL-TCP has {N_ACTIONS} actions")
    return RlTcpAgent(kernels, biases, mode=mode, step_s=float(doc["step_s"]), reward=reward_mode,
                      training=dict(doc.get("training", {})),
                      path=p, checksum=str(doc["checksum"]))
