"""Gymnasium environment: RL-TCP (paper 003) setting a real TCP sender's cwnd every 0.1 s on the testbed.

Live, real time, root: a namespace testbed (``Topology(2)``: two clients, a
router, a server) with linkemu in the router as the bottleneck -- 10 Mbit/s
uplink with a 100-packet FIFO (tail drop, paper 003's stage 2) and 20 ms each
way (the paper's two ~10 ms access links; base RTT ~40 ms), 100 Mbit/s
downlink (the paper's access rate; it carries the ACKs).  Client 1 sends one
iperf3 flow whose socket runs the BPF congestion control ``remote``
(bpf/remote.bpf.c); the env sets its cwnd through the same kernel path the
policy server's decisions take (``ccs_remote_dec``, stamped with the time the
state was read; the sender loop ``ccswitch.remote.sender`` does the same
after a round trip to the server).  In training the decision is made in
process, so the control loop's latency is ~1 ms; the closed-loop experiment
(``bench/rltcp_closed_loop.py``) serves the exported agent remotely.
With probability ``p_cubic`` an episode also has one CUBIC flow from client
2, joining at a random step of the episode's first half.

Spaces (the paper's, models/rltcp_agent.py has the details)::

    observation_space  Box(0, 20, (5,), float32)  rltcp_agent.FEATURES: ssthresh, cwnd, packets acked over
                                                  the step, mss, mean in-flight over the step -- packets / 100
                                                  (ssthresh capped at 1000 packets, mss / 1448)
    action_space       Discrete(4)                mode "mult": cwnd x (0.7, 1, 1.1, 1.4) (the default: the
                                                  paper's actions cannot reduce cwnd, see rltcp_agent.py);
                                                  mode "paper": cwnd +1 MSS or +MSS^2/cwnd, ssthresh 2 MSS or
                                                  in-flight / 2 (ns3-ai RL-TCP)
    reward             float                      reward_mode "paper" (default): segmentsAcked - bytesInFlight
                                                  - cWnd over the step, in packets / 100 (the paper's, in one
                                                  unit); "delay": log2 throughput - queueing delay / min RTT -
                                                  loss fraction (rltcp_agent.delay_reward)
    step               0.1 s (the paper's RL-TCP step), wall clock

An episode is ``steps`` steps (default 150: 15 s).  ``reset`` stops the
previous episode's flows, starts a fresh ``remote`` flow (slow start
from the initial window under Reno, the kernel's rule before a decision),
finds its socket cookie (sock_diag, as the sender loop) and observes at once
(the first decision ends slow start).  Each episode has its own one-off
iperf3 servers (a killed test can wedge a reused one).
``step(a)`` writes the decision, waits for the next step boundary and
observes.  ``info``: cwnd, acked, lost, srtt_ms, cubic (competitor running),
kernel mode.  The env owns its topology, linkemu, iperf3 servers and the
``remote`` registration until ``close()`` (also a context manager).
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from ccswitch.bpf import remote as rbpf
from ccswitch.models.rltcp_agent import ACTION_MODES, REWARD_MODES, apply_action, features, reward
from ccswitch.remote.sender import step_observations

__all__ = ["RlTcpEnv"]

REMOTE_PORT, CUBIC_PORT = 5651, 5652


class RlTcpEnv(gym.Env):
    """Module docstring.  Needs root, BPF struct_ops (bpf/remote.bpf.o), iperf3 and the linkemu binary."""

    metadata = {"render_modes": []}  # noqa: RUF012 (gymnasium's convention)

    def __init__(self, *, steps: int = 150, step_s: float = 0.1, p_cubic: float = 0.5, mode: str = "mult",
                 rate_mbit: float = 10.0, delay_ms: float = 20.0, limit_pkts: int = 100,
                 kernel_deadline_s: float = 0.3, workdir: str | Path | None = None,
                 reward_mode: str = "paper") -> None:
        if mode not in ACTION_MODES:
            raise ValueError(f"mode must be one of {', '.join(ACTION_MODES)}, got {mode!r}")
        if reward_mode not in REWARD_MODES:
            raise ValueError(f"reward_mode must be one of {', '.join(REWARD_MODES)}, got {reward_mode!r}")
        self.reward_mode = reward_mode
        self.observation_space = gym.spaces.Box(0.0, 20.0, (5,), np.float32)
        self.action_space = gym.spaces.Discrete(4)
        self.steps, self.step_s, self.p_cubic, self.mode = steps, step_s, p_cubic, mode
        self.rate_mbit, self.delay_ms, self.limit_pkts = rate_mbit, delay_ms, limit_pkts
        self.kernel_deadline_s = kernel_deadline_s
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="rltcp-env-"))
        self._stack: contextlib.ExitStack | None = None
        self._topo: Any = None
        self._handle: rbpf.RemoteHandle | None = None
        self._flows: list[Any] = []
        self._servers: list[Any] = []
        self._cookie = 0
        self._seen: set[int] = set()
        self._prev: dict[int, np.void] = {}
        self._rec: np.ndarray | None = None
        self._stamp = 0
        self._seq = 0
        self._t = 0
        self._next = 0.0
        self._cubic_at = -1
        self.episodes = 0

    # -- resources --

    def _open(self) -> None:
        from ccswitch.testbed.runs.emulator import Emulator, emulator_config, link
        from ccswitch.testbed.runs.netns import run_in
        from ccswitch.testbed.runs.topology import Topology

        stack = contextlib.ExitStack()
        try:
            self._handle = rbpf.ensure_remote()
            stack.callback(self._handle.close)
            self._handle.configure(self.kernel_deadline_s)
            self._topo = stack.enter_context(Topology(2))
            run_in(self._topo.clients[0], ["ip", "link", "set", "lo", "up"])
            cfg = emulator_config(self._topo.client_ifs, self._topo.server_if,
                                  uplink=link(self.rate_mbit, self.delay_ms, limit_pkts=self.limit_pkts),
                                  downlink=link(100.0, self.delay_ms, limit_pkts=1000), interval_ms=1000)
            stack.enter_context(Emulator(self._topo.router, cfg, stats_dir=self.workdir / "emulator"))
            stack.callback(self._stop_flows)
        except BaseException:
            stack.close()
            raise
        self._stack = stack

    def _stop_flows(self) -> None:
        """Kill this episode's iperf3 clients and servers (a killed test can wedge a reused server)."""
        for f in [*self._flows, *self._servers]:
            f.kill()
            with contextlib.suppress(Exception):
                f.close()
        self._flows, self._servers = [], []

    def close(self) -> None:
        if self._stack is not None:
            self._stack.close()
            self._stack = None
        super().close()

    def __enter__(self) -> RlTcpEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- observation --

    def _read(self) -> np.ndarray | None:
        """This step's CWND_OBS record of the controlled socket (None if it is gone)."""
        from ccswitch.testbed.runs.netns import entered

        assert self._handle is not None
        with entered(self._topo.clients[0]):
            rbpf.touch_cookies()
        stamp, self._stamp = self._stamp, rbpf.now_ns()
        cur = self._handle.observations()
        cur = cur[cur["cookie"] == self._cookie]
        if not len(cur):
            return None
        # the step's measured length: a late step (loaded host) is scaled, not read as more throughput
        step_us = (self._stamp - stamp) // 1000 if self._prev and stamp else int(self.step_s * 1e6)
        rec = step_observations(cur, self._prev, max(int(step_us), 1))
        self._prev = {self._cookie: cur[0]}
        return rec

    def _find_socket(self, timeout_s: float = 5.0) -> int:
        """The cookie of the new flow's data socket (the new `remote` socket that delivered most)."""
        from ccswitch.testbed.runs.netns import entered

        assert self._handle is not None
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            with entered(self._topo.clients[0]):
                rbpf.touch_cookies()
            obs = self._handle.observations()
            new = obs[[int(c) not in self._seen for c in obs["cookie"]]] if len(obs) else obs
            if len(new) and int(new["delivered"].max()) > 0:
                return int(new[np.argmax(new["delivered"])]["cookie"])
            time.sleep(0.05)
        raise RuntimeError("the remote flow's socket did not appear in ccs_remote_obs within "
                           f"{timeout_s:g} s (is the `remote` CC registered and the flow running?)")

    def _state(self, info: dict[str, Any]) -> np.ndarray:
        assert self._rec is not None
        return np.clip(features(self._rec)[0], 0.0, 20.0)

    def _info(self, rec: np.ndarray) -> dict[str, Any]:
        assert self._handle is not None
        mode = self._handle.observations()
        mode = mode[mode["cookie"] == self._cookie]
        return {"t": self._t, "cwnd": int(rec["cwnd"][0]), "acked": int(rec["acked"][0]),
                "dt": int(rec["step_us"][0]) / 1e6,
                "lost": int(rec["lost"][0]), "srtt_ms": int(rec["srtt_us"][0]) / 1000,
                "rtt_avg_ms": int(rec["rtt_avg_us"][0]) / 1000, "min_rtt_ms": int(rec["min_rtt_us"][0]) / 1000,
                "inflight": int(rec["inflight_avg"][0]), "cubic": 0 <= self._cubic_at <= self._t,
                "mode": rbpf.MODES[int(mode["mode"][0])] if len(mode) else "gone"}

    # -- gym API --

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        from ccswitch.testbed.runs.iperf import start_flow, start_server

        super().reset(seed=seed)
        if self._stack is None:
            self._open()
        self._stop_flows()  # the last episode's (iperf3 servers take the next test)
        self._seen |= set(int(c) for c in self._handle.observations()["cookie"]) if self._handle else set()
        self._seen.add(self._cookie)
        secs = 3 * self.steps * self.step_s + 10.0  # steps run late on a loaded host; killed at the end
        self._servers = [start_server(self._topo.server, port, bind=self._topo.server_addr)
                         for port in (REMOTE_PORT, CUBIC_PORT)]
        self._flows.append(start_flow(self._topo.clients[0], self._topo.server_addr, REMOTE_PORT, cca="remote",
                                      seconds=secs))
        self._cubic_at = (int(self.np_random.integers(0, self.steps // 2 + 1))
                          if self.np_random.random() < self.p_cubic else -1)
        self._cookie = self._find_socket()
        self._prev, self._seq, self._t = {}, 0, 0
        self._next = time.monotonic()  # the first state is read at once: the first decision ends slow start
        self._rec = self._read()
        if self._rec is None:
            raise RuntimeError("the remote flow ended right after it started")
        self.episodes += 1
        info = self._info(self._rec)
        return self._state(info), info

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        from ccswitch.testbed.runs.iperf import start_flow

        assert self._rec is not None and self._handle is not None
        dec = apply_action(self._rec, np.array([int(action)]), self.mode)
        self._seq += 1
        self._handle.write([self._cookie], rbpf.decision_records(dec["cwnd"], [self._seq], [self._stamp],
                                                                 dec["ssthresh"], dec["max_pacing_Bps"]))
        if self._t == self._cubic_at:
            self._flows.append(start_flow(self._topo.clients[1], self._topo.server_addr, CUBIC_PORT, cca="cubic",
                                          seconds=3 * (self.steps - self._t) * self.step_s + 10.0))
        self._t += 1
        self._next += self.step_s
        now = time.monotonic()
        if self._next < now - self.step_s:  # stalled (a loaded host): do not try to catch up in a burst
            self._next = now
        time.sleep(max(0.0, self._next - now))
        rec = self._read()
        if rec is None:  # the flow ended early: end the episode on the last state
            info = {"t": self._t, "gone": True}
            return self._state(info), 0.0, False, True, info
        self._rec = rec
        info = self._info(rec)
        return self._state(info), float(reward(rec, self.reward_mode)[0]), False, self._t >= self.steps, info
