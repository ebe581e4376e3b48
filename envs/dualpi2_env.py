"""Gymnasium environment: set DualPI2's base probability every control interval on a live emulated link.

Paper 000 trained its A3C agent offline on kernel logs.  Here every episode is a
short *live* run on the namespace testbed (root): linkemu's DualPI2 bottleneck
between two clients and a server, real TCP flows (Classic: CUBIC or Reno,
Not-ECT, in the C queue; L4S: ccswitch's BPF Prague, DSCP 40, in the L queue),
and the agent in control of p' through linkemu's control socket from the first
step.  Observation, action mapping and reward are those the router runs
(:mod:`ccswitch.testbed.runs.dualpi2_agent`: one definition for training and
deployment).

Spaces::

    observation_space  Box(-1, 2, (12,), float32)   OBS_FEATURES, in order: p', Classic and L4S head delay,
                                                     the PI input, Classic and L4S backlog (link time),
                                                     utilisation, offered load, Classic drop and mark
                                                     fractions, L4S mark fraction, Classic delay trend
    action_space       Box(-1, 1, (1,), float32)    mode "step": p' <- p' * 2**(a/2) (clipped to 1e-3..1), the PI
                                                     controller paused; mode "residual": p' = the PI
                                                     controller's p' * 2**a (it keeps running)
    mode "residual-k"                                Box(-1, 2, (15,)): the 12 and k, the L4S packet share
                                                     (interval, ~1 s average); Box(-1, 1, (2,)): the factor
                                                     and k = 2**(1 + a_k); reward_k (the L:C imbalance per
                                                     flow, from the condition's flow counts, is charged)
    mode "k"                                         the same observation and reward; Box(-1, 1, (1,)):
                                                     k = 2**(1 + a) alone, p' the PI controller's
    obs="flows" (k modes)                            Box(-1, 2, (17,)): the 15 and the active flows per class
                                                     (linkemu's l4s_flows, classic_flows: log2(1 + n) / 4)

Episode (``reset``): a fresh condition drawn from :class:`ConditionSpace` with the
env's RNG: link rate log-uniform 10..100 Mbit/s, base RTT 4..40 ms, 1-4
Classic flows (one CCA, CUBIC or Reno) and 0-3 Prague flows; linkemu is
restarted with it, the flows start (with ``warmup_s`` > 0 they first run that
long under DualPI2's own PI controller, so that episodes also see long-lived
flows past slow start, as a router mostly does), and the first observation is
taken one interval later.  ``step`` sets p', waits until the next interval boundary (the
clock is the wall clock: training is real time) and observes.  An episode is
``steps`` intervals (paper 000: 100).  The action mappings (``mode``) are
:data:`ccswitch.models.dualpi2_actor.ACTION_KINDS`.  With ``controller="pi"`` the action is
ignored and DualPI2's own PI controller keeps p' (the baseline's reward on the
same condition).

The env owns one topology for its lifetime (``close()`` removes it; it is also
a context manager).  Several envs run side by side (A3C's workers): each has its
own namespaces and control socket.
"""

from __future__ import annotations

import contextlib
import math
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from ccswitch.models.dualpi2_actor import (
    ACTION_KINDS,
    K_MODES,
    LEASE_INTERVALS,
    Observer,
    action_dims,
    control_params,
    features_for,
    reward,
    reward_k,
)

__all__ = ["Condition", "ConditionSpace", "DualPi2Env"]

L4S_DSCP = 40
FIRST_PORT = 5301
_PRAGUE_LOCK = threading.Lock()  # envs opening side by side (A3C workers) register Prague once


@dataclass(frozen=True)
class Condition:
    rate_mbit: float
    rtt_ms: float
    classic_cca: str
    n_classic: int
    n_l4s: int

    def label(self) -> str:
        return (f"{self.rate_mbit:.0f} Mbit/s, {self.rtt_ms:.0f} ms, {self.n_classic} {self.classic_cca} + "
                f"{self.n_l4s} prague")


@dataclass(frozen=True)
class ConditionSpace:
    """Where episodes are drawn from (module docstring)."""

    rate_mbit: tuple[float, float] = (10.0, 100.0)
    rtt_ms: tuple[float, float] = (4.0, 40.0)
    classic_ccas: tuple[str, ...] = ("cubic", "reno")
    n_classic: tuple[int, int] = (1, 4)
    n_l4s: tuple[int, int] = (0, 3)

    def draw(self, rng: np.random.Generator) -> Condition:
        lo, hi = math.log(self.rate_mbit[0]), math.log(self.rate_mbit[1])
        return Condition(
            rate_mbit=round(math.exp(rng.uniform(lo, hi)), 1),
            rtt_ms=round(float(rng.uniform(*self.rtt_ms)), 1),
            classic_cca=str(rng.choice(self.classic_ccas)),
            n_classic=int(rng.integers(self.n_classic[0], self.n_classic[1] + 1)),
            n_l4s=int(rng.integers(self.n_l4s[0], self.n_l4s[1] + 1)),
        )


def dualpi2_queue(**overrides: Any) -> dict[str, Any]:
    """The L4S scenarios' DualPI2 (Linux defaults, RFC 9332; L4S = DSCP 40): testbed/scenarios/l4s-*.toml."""
    q: dict[str, Any] = {"kind": "dualpi2", "limit_pkts": 10000, "target_ms": 15, "tupdate_ms": 16,
                         "alpha_hz": 0.16, "beta_hz": 3.2, "k": 2, "l_min_th_ms": 1, "l_min_qlen_pkts": 1,
                         "classifier": "dscp", "l_dscp": [L4S_DSCP], "scheduler": "wrr", "c_weight_pct": 10,
                         "drop_on_overload": True}
    q.update(overrides)
    return q


class DualPi2Env(gym.Env):
    """Module docstring.  Needs root, BPF (Prague) and the linkemu binary."""

    metadata = {"render_modes": []}  # noqa: RUF012 (gymnasium's convention)

    def __init__(self, *, interval_s: float = 0.05, steps: int = 100, space: ConditionSpace | None = None,
                 controller: str = "agent", workdir: str | Path | None = None, target_ms: float = 15.0,
                 warmup_s: float = 0.0, mode: str = "step", w_lc: float = 0.5, obs: str = "base") -> None:
        if controller not in ("agent", "pi"):
            raise ValueError(f"controller must be 'agent' or 'pi', got {controller!r}")
        if mode not in ACTION_KINDS:
            raise ValueError(f"mode must be one of {', '.join(ACTION_KINDS)}, got {mode!r}")
        self.mode = mode
        self.w_lc = w_lc  # residual-k: the weight of the L:C term in reward_k
        self.obs = obs  # the k modes' observation option (dualpi2_actor.OBS_KINDS): flows adds the flow counts
        self.observation_space = gym.spaces.Box(-1.0, 2.0, (len(features_for(mode, obs)),), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (action_dims(mode),), np.float32)
        self.interval_s = interval_s
        self.steps = steps
        self.space = space or ConditionSpace()
        self.controller = controller
        self.target_ms = target_ms
        self.warmup_s = warmup_s
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="dualpi2-env-"))
        self.condition: Condition | None = None
        self._stack = contextlib.ExitStack()
        self._episode: contextlib.ExitStack | None = None
        self._topo: Any = None
        self._ctl: Any = None
        self._observer: Observer | None = None
        self._t = 0
        self._next = 0.0
        self._p = 0.0
        self._episodes = 0
        self._flows: list[Any] = []

    # -- resources --

    def _open(self) -> None:
        from ccswitch.bpf.prague import make_default
        from ccswitch.testbed.runs.topology import Topology

        self._topo = self._stack.enter_context(Topology(2))
        self._hold_prague()
        make_default(self._topo.server)        # listeners accept AccECN (testbed/runs/run_setup.py _prague_defaults)
        make_default(self._topo.clients[1])    # client 2 sends L4S

    def _hold_prague(self) -> None:
        """Register Prague unless it is (kernel-wide), and count this process as its user: its holder keeps
        it while any ccswitch process uses it (bpf/holder.py), so a run elsewhere that registered it and ended
        no longer takes it away (seen 27 Nov before the holder: a closed-loop run ending mid-training left 111
        of 200 episodes without L4S traffic, and the L:C term, which is 0 without L4S packets, rewarded it).
        Still checked before every episode with L4S flows, as a cheap guard against a holder killed from
        outside or a registration that is not ccswitch's going away."""
        from ccswitch.bpf.prague import ensure_prague

        with _PRAGUE_LOCK:
            handle = ensure_prague()
        self._stack.callback(handle.close)

    def _check_flows(self) -> None:
        """Every flow of the episode still runs; a flow that exited is an error, not an episode to learn from."""
        for flow in self._flows:
            if flow.proc.poll() is not None:
                try:
                    flow.wait(timeout=1.0)
                    why = "it ended early"
                except Exception as e:  # IperfError: iperf3's own message (e.g. unable to set TCP_CONGESTION)
                    why = str(e)
                raise RuntimeError(f"episode {self._episodes}: a {flow.cca} flow stopped: {why}")

    def _start_episode(self, cond: Condition) -> None:
        from ccswitch.host import available_ccas
        from ccswitch.testbed.runs.emulator import Emulator, emulator_config, link
        from ccswitch.testbed.runs.iperf import IperfFlow, start_server
        from ccswitch.testbed.runs.linkemu_control import LinkemuControl

        topo = self._topo
        ep = contextlib.ExitStack()
        self._episode = ep
        sock = self.workdir / "linkemu.sock"
        cfg = emulator_config(
            topo.client_ifs, topo.server_if, seed=self._episodes + 1, interval_ms=1000,
            uplink=link(cond.rate_mbit, cond.rtt_ms / 2, qdisc=dualpi2_queue(target_ms=self.target_ms)),
            downlink=link(cond.rate_mbit, cond.rtt_ms / 2, limit_pkts=1000),
            control={"socket": str(sock)})
        ep.enter_context(Emulator(topo.router, cfg, stats_dir=self.workdir / "emulator"))
        self._ctl = ep.enter_context(LinkemuControl(sock, connect_timeout=5.0))
        flows = [(1, cond.classic_cca)] * cond.n_classic + [(2, "prague")] * cond.n_l4s
        if cond.n_l4s and "prague" not in available_ccas():
            self._hold_prague()
        self._flows = []
        for i, (client, cca) in enumerate(flows):
            port = FIRST_PORT + i
            ep.enter_context(start_server(topo.server, port, bind=topo.server_addr))
            self._flows.append(ep.enter_context(IperfFlow(topo.clients[client - 1], topo.server_addr, port,
                                                          cca=cca, seconds=3600, interval=1.0)))

    def _end_episode(self) -> None:
        if self._episode is not None:
            ep, self._episode, self._ctl = self._episode, None, None
            ep.close()

    def close(self) -> None:
        self._end_episode()
        self._stack.close()
        self._topo = None

    def __enter__(self) -> DualPi2Env:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- gym API --

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self._end_episode()
        if self._topo is None:
            self._open()
        cond = (options or {}).get("condition") or self.space.draw(self.np_random)
        self.condition = cond
        self._episodes += 1
        self._start_episode(cond)
        if self.warmup_s > 0:  # the flows leave slow start under DualPI2's own PI controller
            time.sleep(self.warmup_s)
        self._check_flows()
        self._observer = Observer(cond.rate_mbit, self.target_ms, extended=self.mode in K_MODES,
                                  flows=self.obs == "flows")
        self._t = 0
        self._next = time.monotonic()
        obs, raw = self._observe()  # counters start here
        self._wait()
        obs, raw = self._observe()
        self._p = raw["p_prime"]
        return obs, {"condition": cond, **raw}

    def _wait(self) -> None:
        self._next += self.interval_s
        time.sleep(max(self._next - time.monotonic(), 0.0))

    def _observe(self) -> tuple[np.ndarray, dict[str, float]]:
        assert self._ctl is not None and self._observer is not None
        st = self._ctl.state("uplink")
        return self._observer.update(st["uplink"], float(st["t_s"]))

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        assert self._ctl is not None, "reset() first"
        flat = np.asarray(action, dtype=np.float64).reshape(-1)
        a: Any = (float(flat[0]), float(flat[1])) if self.mode == "residual-k" else float(flat[0])
        if self.controller == "agent":
            self._ctl.set("uplink", **control_params(self.mode, self._p, a),
                          hold_ms=LEASE_INTERVALS * self.interval_s * 1000)
        self._wait()
        obs, raw = self._observe()
        self._check_flows()
        self._p = raw["p_prime"]
        self._t += 1
        cond = self.condition
        r = (reward_k(raw, cond.n_l4s, cond.n_classic, self.target_ms, w_lc=self.w_lc)
             if self.mode in K_MODES and cond
             else reward(raw, self.target_ms))
        return obs, r, False, self._t >= self.steps, {"condition": self.condition, **raw}
