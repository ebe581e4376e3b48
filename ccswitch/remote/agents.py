"""What the policy server decides with: cwnd agents for the `remote` CC, the DQN for ccswitchd.

A cwnd agent maps a batch of CWND_OBS records (protocol.py: one socket's
state over its last step) to CWND_DEC records, in one vectorised call over
every flow of every client of a server batch.  Agents are pluggable
(`CWND_AGENTS`, `ccswitch policy serve --agent NAME`).

Shipped: `delay-aimd`, a stateless delay-target AIMD, as the documented
baseline (and the sender's optional local fallback).  Per flow and step:

* congestion (a loss or a CE mark in the step):  cwnd x 0.85, on top of the
  kernel's own reduction of the window at the loss (the state is read after it);
* queueing delay q = mean RTT of the step - min RTT above the target
  T = max(5 ms, min RTT / 4):  cwnd x max(0.5, 1 - (q - T) / (2 q)), a
  reduction proportional to the excess;
* otherwise, if the flow used its window (mean in-flight >= cwnd / 2):
  Reno's rate of increase, one packet per RTT of the step, at most +25 % per
  step (a 100 ms step is thousands of RTTs on a LAN);
* never below 2 packets; ssthresh 0 (the kernel's cwnd / 2 at a loss); no pacing cap.

It is a baseline, not the paper's learned agent: RL-TCP (ns3-ai) chooses
among four actions each 0.1 s -- cwnd + 1 MSS or + MSS^2 / cwnd, ssthresh
2 MSS or bytesInFlight / 2 -- with a DQN (5-20-20-4) trained online on the
reward segmentsAcked - bytesInFlight - cWnd.  `rltcp_action` below maps that
action space onto CWND_DEC.  The trained agent is `rl-tcp`: a DQN trained
online on the emulated testbed (models/dqn_rltcp.py), exported numpy-only and
loaded by models/rltcp_agent.py (its state, action modes and reward;
docs/remote-control.md): by default the agent trained with the delay reward,
models/rltcp_agent_delay.json (the paper's reward starves the flow;
its agent is models/rltcp_agent_paper.json).

`CcaPolicy` runs the shipped numpy DQN (models/policy.py) on the normalised
feature vectors ccswitchd sends, batched over all its clients' flows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from ccswitch.remote.protocol import CWND_DEC, CWND_MAX

CwndDecide = Callable[[np.ndarray], np.ndarray]


class CwndAgent(Protocol):
    name: str

    def decide(self, obs: np.ndarray) -> np.ndarray:
        """CWND_OBS[N] -> CWND_DEC[N] (same order, same cookies)."""
        ...


@dataclass
class DelayAimd:
    """The baseline delay-target AIMD (module docstring)."""

    name: str = "delay-aimd"
    target_floor_us: float = 5000.0
    decrease_on_congestion: float = 0.85
    max_growth: float = 0.25
    cwnd_min: int = 2

    def decide(self, obs: np.ndarray) -> np.ndarray:
        cwnd = obs["cwnd"].astype(np.float64)
        srtt = np.maximum(obs["srtt_us"].astype(np.float64), 1.0)
        rtt = np.where(obs["rtt_avg_us"] > 0, obs["rtt_avg_us"], obs["srtt_us"]).astype(np.float64)
        min_rtt = np.where(obs["min_rtt_us"] > 0, obs["min_rtt_us"], rtt).astype(np.float64)
        qdelay = np.maximum(rtt - min_rtt, 0.0)
        target = np.maximum(self.target_floor_us, min_rtt / 4)
        congested = (obs["lost"] > 0) | (obs["ce"] > 0)
        over = qdelay > target
        used = obs["inflight_avg"].astype(np.float64) >= cwnd / 2
        grow = np.minimum(np.maximum(obs["step_us"] / srtt, 1.0), np.maximum(cwnd * self.max_growth, 1.0))
        shrink = np.maximum(0.5, 1.0 - (qdelay - target) / np.maximum(2 * qdelay, 1.0))
        new = np.where(congested, cwnd * self.decrease_on_congestion,
                       np.where(over, cwnd * shrink, np.where(used, cwnd + grow, cwnd)))
        out = np.zeros(len(obs), dtype=CWND_DEC)
        out["cookie"] = obs["cookie"]
        out["cwnd"] = np.clip(np.floor(new), self.cwnd_min, CWND_MAX).astype(np.uint32)
        return out


def rltcp_action(obs: np.ndarray, action: np.ndarray) -> np.ndarray:
    """RL-TCP's action space (ns3-ai examples/rl-tcp) applied to CWND_OBS, in packets.

    bit 0 set: cwnd + 1 packet, else cwnd + 1/cwnd (in packets that rounds to
    cwnd + 1 only at cwnd 1: RL-TCP works in bytes, + MSS^2/cwnd bytes);
    action < 3: ssthresh 2 packets, else in-flight / 2.  One step of 0.1 s.
    """
    cwnd = obs["cwnd"].astype(np.int64)
    new = np.where(action & 1, cwnd + 1, cwnd)
    ssthresh = np.where(action < 3, 2, np.maximum(obs["inflight_avg"].astype(np.int64) // 2, 2))
    out = np.zeros(len(obs), dtype=CWND_DEC)
    out["cookie"] = obs["cookie"]
    out["cwnd"] = np.clip(new, 2, CWND_MAX)
    out["ssthresh"] = np.clip(ssthresh, 2, CWND_MAX)
    return out


def rltcp_reward(obs: np.ndarray) -> np.ndarray:
    """RL-TCP's reward, segmentsAcked - bytesInFlight - cWnd, here in packets over the step."""
    return obs["acked"].astype(np.float64) - obs["inflight_avg"] - obs["cwnd"]


def _rl_tcp(path: str | Path | None = None) -> CwndAgent:
    from ccswitch.models.rltcp_agent import load_agent

    return load_agent(path)


CWND_AGENTS: dict[str, Callable[..., CwndAgent]] = {"delay-aimd": DelayAimd, "rl-tcp": _rl_tcp}
FILE_AGENTS = ("rl-tcp",)
"""Agents loaded from a file (`--agent-file`; default models/rltcp_agent_delay.json)."""


def cwnd_agent(name: str, path: str | Path | None = None) -> CwndAgent:
    """The agent *name*; a bad name or agent file raises one ValueError line."""
    if name not in CWND_AGENTS:
        raise ValueError(f"unknown cwnd agent {name!r} (known: {', '.join(CWND_AGENTS)})")
    if path is not None and name not in FILE_AGENTS:
        raise ValueError(f"cwnd agent {name!r} takes no agent file")
    return CWND_AGENTS[name](path) if path is not None else CWND_AGENTS[name]()


class CcaPolicy:
    """The numpy DQN (models/policy.json by default) answering CCA requests."""

    def __init__(self, path: str | Path | None = None):
        from ccswitch.models.policy import load_policy

        self.policy = load_policy(path)
        self.actions = tuple(self.policy.actions)
        self.n_features = self.policy.n_features
        self.policy_id = policy_id(self.policy.checksum)
        self.policy.q_values(np.zeros((2, self.n_features), np.float32))  # BLAS set-up

    def q_values(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(self.policy.q_values(x), dtype=np.float32)


def policy_id(checksum: str) -> bytes:
    """The 8-byte id of a policy file in CCA requests: the first bytes of its sha256 checksum."""
    return bytes.fromhex(checksum.removeprefix("sha256:")[:16].ljust(16, "0"))
