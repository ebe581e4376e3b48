"""The scenario contract's data model: frozen dataclasses, one per TOML table.

The file format is documented in :mod:`ccswitch.testbed.scenario` (the package
docstring); :mod:`.parse` turns TOML into these objects and is the only place
that validates.  ``None`` fields mean "linkemu's default".
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

DAEMON_AVAILABLE = True
"""The switching daemon (issue 5) runs in the client namespaces
(:func:`ccswitch.testbed.runs.runner.daemon_session`)."""
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


def _present(obj: Any) -> dict[str, Any]:
    """A dataclass as a dict without its None fields (None = linkemu's default)."""
    out = {}
    for f in fields(obj):
        v = getattr(obj, f.name)
        if v is None:
            continue
        if is_dataclass(v):
            v = v.to_config() if hasattr(v, "to_config") else _present(v)
        out[f.name] = v
    return out


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
class Pfifo:
    limit_pkts: int = 1000

    def to_config(self) -> dict[str, Any]:
        return {"kind": "pfifo", "limit_pkts": self.limit_pkts}


@dataclass(frozen=True)
class Codel:
    target_ms: float = 5.0
    interval_ms: float = 100.0
    limit_pkts: int = 1000
    ecn: bool = False

    def to_config(self) -> dict[str, Any]:
        return {"kind": "codel", "target_ms": self.target_ms, "interval_ms": self.interval_ms,
                "limit_pkts": self.limit_pkts, "ecn": self.ecn}


CONTROL_SOCKET = "linkemu.sock"
"""linkemu's control socket in a run's emulator folder (only when a router agent needs it)."""


@dataclass(frozen=True)
class DualPi2:
    """DualPI2 (RFC 9332) in linkemu; None fields take linkemu's defaults (Linux sch_dualpi2's).

    Classic PI: ``target_ms`` 15, ``tupdate_ms`` 16, ``alpha_hz`` 0.16, ``beta_hz`` 3.2;
    coupling ``k`` 2; native L4S AQM: a step at ``l_min_th_ms`` 1 (a ramp up to
    ``l_max_th_ms``), only with >= ``l_min_qlen_pkts`` 1 other L packets queued;
    ``classifier`` "ecn" (ECT(1)/CE -> L) or "dscp" (``l_dscp`` values -> L);
    ``scheduler`` "wrr" (``c_weight_pct`` 10) or "tsfifo" (``tshift_ms`` 50);
    ``drop_on_overload`` true; ``limit_pkts`` 10000 in both queues.

    ``agent`` (a path, relative to the scenario file): an actor file of paper 000's A3C agent
    (``models/dualpi2_a3c.json``); the runner then sets p' from it every ``agent_interval_ms``
    (default: the interval it was trained with) through linkemu's control socket, the PI
    controller taking over if the agent stops (testbed/runs/dualpi2_agent.py).  Not linkemu fields.
    """

    limit_pkts: int | None = None
    target_ms: float | None = None
    tupdate_ms: float | None = None
    alpha_hz: float | None = None
    beta_hz: float | None = None
    k: float | None = None
    l_min_th_ms: float | None = None
    l_max_th_ms: float | None = None
    l_min_qlen_pkts: int | None = None
    classifier: str | None = None
    l_dscp: tuple[int, ...] | None = None
    scheduler: str | None = None
    c_weight_pct: float | None = None
    tshift_ms: float | None = None
    drop_on_overload: bool | None = None
    agent: Path | None = None
    agent_interval_ms: float | None = None

    def to_config(self) -> dict[str, Any]:
        cfg: dict[str, Any] = {"kind": "dualpi2", **_present(self)}
        cfg.pop("agent", None)
        cfg.pop("agent_interval_ms", None)
        if self.l_dscp is not None:
            cfg["l_dscp"] = list(self.l_dscp)
        return cfg


DUALPI2_CLASSIFIERS = ("ecn", "dscp")
DUALPI2_SCHEDULERS = ("wrr", "tsfifo")


@dataclass(frozen=True)
class FqCodel:
    """fq_codel (RFC 8290) in linkemu; None fields take linkemu's defaults (Linux sch_fq_codel's).

    ``flows`` 1024 hash queues, DRR ``quantum`` 1514 bytes, per-queue CoDel ``target_ms`` 5 /
    ``interval_ms`` 100, ``limit_pkts`` 10240 in all queues (beyond it the fattest queue loses
    its head packet), ``ecn`` false (Linux: true; the testbed's TCP flows negotiate ECN only with
    the scenario's ``tcp_ecn = 1``).
    """

    flows: int | None = None
    quantum: int | None = None
    target_ms: float | None = None
    interval_ms: float | None = None
    limit_pkts: int | None = None
    ecn: bool | None = None

    def to_config(self) -> dict[str, Any]:
        return {"kind": "fq_codel", **_present(self)}


@dataclass(frozen=True)
class Fq:
    """Per-flow fair queuing without AQM in linkemu: fq_codel's queues and DRR, a static limit per flow.

    ``flow_limit_pkts`` 100 (tail drop per flow queue; the papers also use 1000), ``limit_pkts``
    10240 in all queues, ``flows`` 1024, ``quantum`` 1514; None fields take these defaults.
    """

    flow_limit_pkts: int | None = None
    limit_pkts: int | None = None
    flows: int | None = None
    quantum: int | None = None

    def to_config(self) -> dict[str, Any]:
        return {"kind": "fq", **_present(self)}


@dataclass(frozen=True)
class Lfq:
    """lfq in linkemu: fq's queues and DRR with a per-flow limit an agent sets at run time.

    Each flow starts with ``default_limit_pkts`` (100); linkemu's control socket
    (:mod:`ccswitch.testbed.runs.linkemu_control`) reads its paper-001 features and sets its
    limit (1..``limit_pkts``).  ``limit_pkts`` 10240 in all queues, ``flows`` 1024,
    ``quantum`` 1514, ``idle_timeout_ms`` 3000 (a queue idle that long starts a new flow);
    None fields take these defaults.
    """

    default_limit_pkts: int | None = None
    limit_pkts: int | None = None
    flows: int | None = None
    quantum: int | None = None
    idle_timeout_ms: float | None = None

    def to_config(self) -> dict[str, Any]:
        return {"kind": "lfq", **_present(self)}


@dataclass(frozen=True)
class Pie:
    """PIE (RFC 8033) in linkemu; None fields take linkemu's defaults (Linux sch_pie's).

    ``target_ms`` 15 and ``tupdate_ms`` 15 (queue delay target, probability update interval),
    gains ``alpha`` 0.125 and ``beta`` 1.25 Hz (Linux's ``alpha 2 beta 20`` sixteenths, 0..2;
    auto-tuned by RFC 8033's probability ranges), burst allowance ``max_burst_ms`` 150,
    ``limit_pkts`` 1000 (tail drop), ``ecn`` false (mark ECT packets instead of dropping while
    p <= 10 %), ``bytemode`` false.  Paper 000's PIE settings are these defaults.
    """

    target_ms: float | None = None
    tupdate_ms: float | None = None
    alpha: float | None = None
    beta: float | None = None
    max_burst_ms: float | None = None
    limit_pkts: int | None = None
    ecn: bool | None = None
    bytemode: bool | None = None

    def to_config(self) -> dict[str, Any]:
        return {"kind": "pie", **_present(self)}


@dataclass(frozen=True)
class FqPie:
    """fq_pie (Linux sch_fq_pie) in linkemu: fq_codel's queues and DRR with a PIE per queue.

    PIE fields as :class:`Pie` (each queue its own drop probability), plus ``flows`` 1024,
    ``quantum`` 1514, ``ecn_prob_pct`` 10 (with ``ecn``: mark while the queue's p is at most
    this) and ``limit_pkts`` 10240 in all queues (beyond it the arriving packet is dropped, as
    Linux); None fields take these defaults.  Paper 000 uses ``flows = 6``.
    """

    flows: int | None = None
    quantum: int | None = None
    target_ms: float | None = None
    tupdate_ms: float | None = None
    alpha: float | None = None
    beta: float | None = None
    max_burst_ms: float | None = None
    limit_pkts: int | None = None
    ecn: bool | None = None
    ecn_prob_pct: float | None = None
    bytemode: bool | None = None

    def to_config(self) -> dict[str, Any]:
        return {"kind": "fq_pie", **_present(self)}


@dataclass(frozen=True)
class FqDualPi2:
    """fq_dualpi2 in linkemu: paper 000's L4S AQM, FQ-PIE turned into hashed pairs of L4S and Classic queues.

    ``flows`` 6 FIFOs in all (even: ``flows`` / 2 pairs); a packet's 5-tuple hash picks its pair,
    a non-zero ECN field (ECT(0), ECT(1), CE) its pair's L4S queue, Not-ECT its Classic queue.
    Each pair's PIE controller (``target_ms`` 15, ``tupdate_ms`` 15, ``alpha`` 0.125, ``beta``
    1.25, ``max_burst_ms`` 150, as :class:`Pie`) on its Classic queue's delay gives p': Classic
    packets are dropped with p'^2, L4S packets CE-marked with max(native, ``k`` p'), ``k`` 2, the
    native AQM a step at ``l_min_th_ms`` 1.  DRR (``quantum`` 1514) between the pairs, the L queue
    first within a pair, the Classic queue keeping ``c_weight_pct`` 10 % of the pair's bytes when
    both are backlogged; ``limit_pkts`` 10240 in all queues (the arrival is dropped beyond it);
    ``drop_on_overload`` true (k p' > 1: L4S packets dropped with p'^2 before marking; false: p'
    capped at 1/k).  None fields take these defaults.
    """

    flows: int | None = None
    quantum: int | None = None
    target_ms: float | None = None
    tupdate_ms: float | None = None
    alpha: float | None = None
    beta: float | None = None
    max_burst_ms: float | None = None
    limit_pkts: int | None = None
    k: float | None = None
    l_min_th_ms: float | None = None
    c_weight_pct: float | None = None
    drop_on_overload: bool | None = None

    def to_config(self) -> dict[str, Any]:
        return {"kind": "fq_dualpi2", **_present(self)}


@dataclass(frozen=True)
class VdqPolicyRule:
    """One marker rule of vdq_csaqm: a flow whose 5-tuple matches every field given gets ``policy``."""

    policy: str
    src: str | None = None
    dst: str | None = None
    proto: int | None = None
    sport: int | None = None
    dport: int | None = None

    def to_config(self) -> dict[str, Any]:
        return _present(self)


@dataclass(frozen=True)
class VdqCsaqm:
    """VDQ-CSAQM (paper 004) in linkemu: per-flow packet-value marking + the virtual dual queue core-stateless AQM.

    ``rate_mbit`` C (None: the link's rate_mbit, required without one); virtual queue rates
    ``vq0_rate`` 0.9 and ``vq1_rate`` 0.984 of C; physical queues ``qmax0_ms`` 50 (L4S) and
    ``qmax1_ms`` 200 (Classic) at C; VQ delay targets ``target0_ms`` 1 and ``target1_ms`` 20; CTV
    update ``tupdate_ms`` 10; ``classifier`` "ecn" (ECT(1)/CE -> L4S) or "dscp" (``l_dscp``);
    ``classic_ecn`` true (false: drop ECT Classic packets below the CTV instead of marking);
    marker: ``default_policy`` "gold" (or "silver", "voice"), ``policies`` rules (first match wins),
    ``rate_window_ms`` 100, ``idle_timeout_ms`` 3000.  None fields take these defaults.
    """

    rate_mbit: float | None = None
    vq0_rate: float | None = None
    vq1_rate: float | None = None
    qmax0_ms: float | None = None
    qmax1_ms: float | None = None
    target0_ms: float | None = None
    target1_ms: float | None = None
    tupdate_ms: float | None = None
    classifier: str | None = None
    l_dscp: tuple[int, ...] | None = None
    classic_ecn: bool | None = None
    default_policy: str | None = None
    policies: tuple[VdqPolicyRule, ...] | None = None
    rate_window_ms: float | None = None
    idle_timeout_ms: float | None = None

    def to_config(self) -> dict[str, Any]:
        cfg: dict[str, Any] = {"kind": "vdq_csaqm", **_present(self)}
        if self.l_dscp is not None:
            cfg["l_dscp"] = list(self.l_dscp)
        if self.policies is not None:
            cfg["policies"] = [r.to_config() for r in self.policies]
        return cfg


VDQ_POLICIES = ("gold", "silver", "voice")
VDQ_CLASSIFIERS = ("ecn", "dscp")

FQ_DEFAULT_LIMIT_PKTS = 10_240
"""linkemu's ``limit_pkts`` default of fq_codel, fq, lfq, fq_pie and fq_dualpi2 (Linux fq_codel's 10 * 1024)."""
FQ_DEFAULT_FLOW_LIMIT_PKTS = 100
"""fq's ``flow_limit_pkts`` and lfq's ``default_limit_pkts`` default."""
PIE_DEFAULT_LIMIT_PKTS = 1000
"""linkemu's (Linux sch_pie's) ``limit_pkts`` default of pie."""
QDISC_KINDS = ("pfifo", "codel", "dualpi2", "fq_codel", "fq", "lfq", "pie", "fq_pie", "vdq_csaqm", "fq_dualpi2")


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
class DaemonSettings:
    """ccswitchd in the client namespaces (scenario ``daemon = true`` or ``[daemon]``)."""

    policy: str = "dqn"
    tick_s: float = DAEMON_TICK_S
    inherit: str = "limited"
    cca: str | None = None
    """The choice of ``policy = "static"``."""
    clients: tuple[int, ...] = ()
    """Clients running the daemon; empty: every client with a flow."""
    guard: tuple[tuple[str, Any], ...] = ()
    """Overrides of the daemon config's ``[guard]`` table, as (key, value) pairs."""
    policy_file: Path | None = None
    """``policy = "dqn"`` with this policy file instead of the shipped models/policy.json."""

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
                        stats_dir: Path, interval_ms: int = 1000) -> dict[str, Any]:
        """The linkemu config (contract of testbed/linkemu/README.md)."""
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
            {"control": {"socket": str(stats_dir / CONTROL_SOCKET)}} if self.router_agents() else {})

    def router_agents(self) -> dict[str, DualPi2]:
        """Directions ("uplink", "downlink") whose dualpi2 queue is run by an agent (``agent``)."""
        return {name: d.qdisc for name, d in (("uplink", self.link.uplink), ("downlink", self.link.downlink))
                if isinstance(d.qdisc, DualPi2) and d.qdisc.agent is not None}


