"""The scenario contract's data model: frozen dataclasses, one per TOML table.

The file format is documented in :mod:`ccswitch.testbed.scenario` (the package
docstring); :mod:`.parse` turns TOML into these objects and is the only place
that validates.  ``None`` fields mean "linkemu's default".
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .model_qdisc import (  # noqa: F401 (re-exported: the queue tables are part of the model)
    CONTROL_SOCKET,
    DUALPI2_CLASSIFIERS,
    DUALPI2_SCHEDULERS,
    FQ_DEFAULT_FLOW_LIMIT_PKTS,
    FQ_DEFAULT_LIMIT_PKTS,
    PIE_DEFAULT_LIMIT_PKTS,
    QDISC_KINDS,
    VDQ_CLASSIFIERS,
    VDQ_CTV_RULES,
    VDQ_POLICIES,
    Codel,
    DualPi2,
    Fq,
    FqCodel,
    FqDualPi2,
    FqPie,
    Lfq,
    Pfifo,
    Pie,
    VdqCsaqm,
    VdqPolicyRule,
)
from .model_qdisc import present_fields as _present

DAEMON_AVAILABLE = True
"""The switching daemon (issue 5) runs in the client namespaces
(:func:`ccswitch.testbed.runs.run_monitors.daemon_session`)."""
DAEMON_POLICIES = ("dqn", "heuristic", "static", "observe")
DAEMON_TICK_S = 0.2
"""Default control tick of ccswitchd in the testbed (the daemon's own default)."""
EMULATORS = ("linkemu", "kernel")
INHERIT_MODES = ("limited", "full")
FLOW_KINDS = ("bulk", "web")
BASE_PORT = 5201
"""iperf3 server port of flows[0]; flows[i] uses BASE_PORT + i."""
BASE_CPORT = 61001
"""iperf3 --cport of flows[0]; flows[i] uses BASE_CPORT + i (the monitor finds flows by it;
above the default ephemeral range 32768-60999, so no control connection takes it)."""
MAX_CLIENTS = 32
MIN_INTERVAL_S = 0.1
FALLBACK_CCAS = ("bbr", "cubic", "pcc", "reno")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
TCP_ECN_MODES = (0, 1, 2)
"""Values of the scenario's ``tcp_ecn`` (Linux net.ipv4.tcp_ecn): 0 no ECN, 1 request and accept it,
2 accept it when the peer asks (the kernel's default)."""


class ScenarioError(ValueError):
    """A scenario file is invalid; the message names the file and the field."""


# ------------------------------------------------------------------ model ---


@dataclass(frozen=True)
class BernoulliLoss:
    p: float

    def to_config(self) -> dict[str, Any]:
        return {"model": "bernoulli", "p": self.p}


@dataclass(frozen=True)
class GilbertLoss:
    """Gilbert-Elliott: per packet good->bad with p_gb, bad->good with p_bg."""

    p_gb: float
    p_bg: float
    loss_good: float = 0.0
    loss_bad: float = 1.0

    def to_config(self) -> dict[str, Any]:
        return {"model": "gilbert", "p_gb": self.p_gb, "p_bg": self.p_bg,
                "loss_good": self.loss_good, "loss_bad": self.loss_bad}



@dataclass(frozen=True)
class LinkDir:
    """One direction of the emulated link (linkemu's ``uplink`` / ``downlink``)."""

    rate_mbit: float | None = None
    """Rate of IP bytes, Mbit/s; None with no trace: unlimited."""
    trace: Path | None = None
    """Mahimahi-format delivery trace (absolute path); replaces rate_mbit."""
    delay_ms: float = 0.0
    """One-way propagation delay after the bottleneck."""
    loss: BernoulliLoss | GilbertLoss | None = None
    qdisc: Pfifo | Codel | DualPi2 | FqCodel | Fq | Lfq | Pie | FqPie | VdqCsaqm | FqDualPi2 | None = None
    """None: linkemu's default (pfifo, 1000 packets)."""
    overhead_bytes: int | None = None
    """Bytes added to each IP packet when charging it to the rate."""
    trace_bytes_per_opportunity: int | None = None

    def to_config(self) -> dict[str, Any]:
        cfg = _present(self)
        cfg.setdefault("rate_mbit", None)
        if self.trace is not None:
            cfg["trace"] = str(self.trace)
        return cfg

    @property
    def queue_limit_pkts(self) -> int:
        """Packets the qdisc holds at most (all its queues together)."""
        if isinstance(self.qdisc, DualPi2):
            return self.qdisc.limit_pkts if self.qdisc.limit_pkts is not None else 10_000
        if isinstance(self.qdisc, FqCodel | Fq | Lfq | FqPie | FqDualPi2):
            return self.qdisc.limit_pkts if self.qdisc.limit_pkts is not None else FQ_DEFAULT_LIMIT_PKTS
        if isinstance(self.qdisc, Pie):
            return self.qdisc.limit_pkts if self.qdisc.limit_pkts is not None else PIE_DEFAULT_LIMIT_PKTS
        if isinstance(self.qdisc, VdqCsaqm):  # byte limits: qmax_0 + qmax_1 at C, in 1500-byte packets
            rate = self.qdisc.rate_mbit or self.rate_mbit
            ms = (self.qdisc.qmax0_ms or 50.0) + (self.qdisc.qmax1_ms or 200.0)
            return max(1, int(rate * 1e6 * ms / 1e3 / 8 / 1500)) if rate else 10_000
        return self.qdisc.limit_pkts if self.qdisc is not None else Pfifo().limit_pkts


@dataclass(frozen=True)
class WifiClient:
    phy_rate_mbit: float
    """PHY rate between the client and the AP, both directions."""
    uplink_phy_rate_mbit: float | None = None


@dataclass(frozen=True)
class Aggregation:
    max_frames: int | None = None
    max_bytes: int | None = None
    max_wait_us: float | None = None
    max_ppdu_us: float | None = None


@dataclass(frozen=True)
class Dist:
    """A distribution of microseconds: constant, uniform, exponential or lognormal."""

    dist: str
    us: float | None = None
    min_us: float | None = None
    max_us: float | None = None
    mean_us: float | None = None
    median_us: float | None = None
    sigma: float | None = None


@dataclass(frozen=True)
class AccessDelay:
    slot_us: float | None = None
    aifs_us: float | None = None
    cw_min: int | None = None
    cw_max: int | None = None
    retry_limit: int | None = None
    collisions: bool | None = None
    extra: Dist | None = None


@dataclass(frozen=True)
class PhyOverheads:
    preamble_us: float | None = None
    sifs_us: float | None = None
    block_ack_us: float | None = None
    mpdu_overhead_bytes: int | None = None


@dataclass(frozen=True)
class Wifi:
    """Shared WiFi medium of the clients (linkemu's ``wifi`` section; None fields: its defaults)."""

    clients: tuple[WifiClient, ...]
    aggregation: Aggregation = field(default_factory=Aggregation)
    access_delay_us: AccessDelay = field(default_factory=AccessDelay)
    phy: PhyOverheads = field(default_factory=PhyOverheads)
    queue: Pfifo | Codel | None = None

    def to_config(self) -> dict[str, Any]:
        cfg = _present(self)
        cfg["clients"] = [_present(c) for c in self.clients]
        return cfg


@dataclass(frozen=True)
class Link:
    emulator: str = "linkemu"
    uplink: LinkDir = field(default_factory=LinkDir)
    downlink: LinkDir = field(default_factory=LinkDir)
    wifi: Wifi | None = None
    client_delay_ms: tuple[float, ...] = ()
    """Extra one-way delay per client on its downlink (ACK) path; empty: none."""


@dataclass(frozen=True)
class Flow:
    index: int
    name: str
    client: int
    """1-based client number."""
    cca: str
    start_s: float
    duration_s: float
    kind: str = "bulk"
    """"bulk" (judged by the fairness targets) or "web" (a short flow beside them: it loads
    the path but is left out of the fair-share metrics; see FLOW_KINDS)."""

    @property
    def end_s(self) -> float:
        return self.start_s + self.duration_s

    @property
    def port(self) -> int:
        return BASE_PORT + self.index

    @property
    def cport(self) -> int:
        return BASE_CPORT + self.index


@dataclass(frozen=True)
class Switch:
    at_s: float
    flow: str
    cca: str
    inherit: str = "limited"


@dataclass(frozen=True)
class RemoteDecisions:
    """``[daemon.remote]``: the daemons' DQN forward pass runs on a policy server (issue 15).

    The runner starts ``ccswitch policy serve`` in the server namespace (beyond the
    bottleneck, as an edge server would be: the requests cross the router's queue) with a
    fresh shared key, and points every daemon's ``policy.remote`` at it."""

    latency_ms: float = 0.0
    """The server holds every answer this long (``--added-latency-ms``: an emulated control path)."""
    deadline_ms: float = 0.0
    """How long a daemon waits for an answer before its local policy decides; 0 = latency_ms + 150."""
    l4s: bool = False
    """Requests and answers as L4S (DSCP 40 + ECT(1)) instead of classic."""
    joint: bool = False
    """One decision per path: every managed flow to the same remote address, on every client,
    gets the mean of their Q-values (ccswitch/remote/joint.py), so they move together."""
    server: str = ""
    """Filled in by the runner: the server's HOST:PORT."""
    key_file: Path | None = None
    """Filled in by the runner: the run's shared key file."""

    @property
    def effective_deadline_ms(self) -> float:
        return self.deadline_ms or self.latency_ms + 150.0


@dataclass(frozen=True)
class DaemonSettings:
    """ccswitchd in the client namespaces (scenario ``daemon = true`` or ``[daemon]``)."""

    policy: str = "dqn"
    tick_s: float = DAEMON_TICK_S
    inherit: str = "limited"
    cca: str | None = None
    """The choice of ``policy = "static"``."""
    cca_by_client: tuple[tuple[int, str], ...] = ()
    """``policy = "static"``: these (client, CCA) pairs instead of ``cca`` (the deviation arms)."""
    clients: tuple[int, ...] = ()
    """Clients running the daemon; empty: every client with a flow."""
    guard: tuple[tuple[str, Any], ...] = ()
    """Overrides of the daemon config's ``[guard]`` table, as (key, value) pairs."""
    policy_file: Path | None = None
    """``policy = "dqn"`` with this policy file instead of the shipped models/policy.json."""
    remote: RemoteDecisions | None = None
    """``policy = "dqn"`` decided by a policy server in the server namespace (``[daemon.remote]``)."""

    def runs_on(self, client: int) -> bool:
        return not self.clients or client in self.clients


@dataclass(frozen=True)
class Capture:
    tshark: bool = True
    snaplen: int = 96
    emulator_per_packet: bool = False


@dataclass(frozen=True)
class Scenario:
    name: str
    duration_s: float
    clients: int
    flows: tuple[Flow, ...]
    link: Link = field(default_factory=Link)
    switches: tuple[Switch, ...] = ()
    description: str = ""
    repetitions: int = 1
    seeds: tuple[int, ...] = (1,)
    sample_interval_s: float = 1.0
    daemon: DaemonSettings | None = None
    """None: no daemon (static CCAs plus the scripted switches)."""
    tcp_ecn: int | None = None
    """net.ipv4.tcp_ecn of the client namespaces (the senders): 1 = classic ECN (RFC 3168)
    negotiated on every flow, 0 = never, 2 = only when asked; None: left at the kernel's default
    (2, so the testbed's flows negotiate no ECN).  The server namespace keeps 2 (accepts ECN).
    Prague negotiates (Accurate) ECN whatever this is (it is the client's default CCA)."""
    capture: Capture = field(default_factory=Capture)
    source: Path | None = None
    text: str = ""
    """The TOML text the scenario was read from (copied into every run folder)."""

    def flow(self, name: str) -> Flow:
        for f in self.flows:
            if f.name == name:
                return f
        raise KeyError(name)

    def flows_of(self, client: int) -> list[Flow]:
        return [f for f in self.flows if f.client == client]

    def cca_at(self, flow: Flow, t_s: float) -> str:
        """The CCA the script gives *flow* at time *t_s* (switches at t_s already applied)."""
        cca = flow.cca
        for sw in self.switches:
            if sw.flow == flow.name and sw.at_s <= t_s:
                cca = sw.cca
        return cca

    def phase_bounds(self) -> list[float]:
        """[0, switch times..., duration]: the phases the metrics are split into."""
        return [0.0, *sorted({sw.at_s for sw in self.switches}), self.duration_s]

    def emulator_config(self, client_ifs: Sequence[str], server_if: str, seed: int,
                        stats_dir: Path, interval_ms: int = 1000,
                        control_socket: Path | None = None) -> dict[str, Any]:
        """The linkemu config (contract of testbed/linkemu/README.md).  With router agents, linkemu's
        control socket is *control_socket* (default ``stats_dir/linkemu.sock``; a UNIX socket path
        holds at most 107 bytes, so the runner passes a short private one)."""
        return {
            "client_ifs": list(client_ifs),
            "server_if": server_if,
            "seed": seed,
            "uplink": self.link.uplink.to_config(),
            "downlink": self.link.downlink.to_config(),
            "wifi": self.link.wifi.to_config() if self.link.wifi else None,
            "stats": {"dir": str(stats_dir), "interval_ms": interval_ms,
                      "per_packet": self.capture.emulator_per_packet},
        } | ({"client_delay_ms": list(self.link.client_delay_ms)} if self.link.client_delay_ms else {}) | (
            {"control": {"socket": str(control_socket or stats_dir / CONTROL_SOCKET)}} if self.router_agents() else {})

    def router_agents(self) -> dict[str, DualPi2 | Lfq]:
        """Directions ("uplink", "downlink") whose dualpi2 or lfq queue is run by an agent (``agent``)."""
        return {name: d.qdisc for name, d in (("uplink", self.link.uplink), ("downlink", self.link.downlink))
                if isinstance(d.qdisc, DualPi2 | Lfq) and d.qdisc.agent is not None}


