"""Scenario files: the one typed, validated definition of a testbed experiment.

A scenario is a TOML file (examples in ``testbed/scenarios/``)::

    name = "paper002-s1"                 # default: the file name without .toml
    description = "CUBIC vs BBR->CUBIC"
    duration_s = 100                     # length of a run
    clients = 2                          # client namespaces (default: highest flows[].client)
    repetitions = 1                      # runs; seeds default to 1..repetitions
    seeds = [1]                          # one per repetition (the emulator's random seed)
    sample_interval_s = 1.0              # monitor and iperf3 interval, >= 0.1
    daemon = false                       # the switching daemon ccswitchd on every client (or a
                                         # [daemon] table below: on, with settings)

    [link]                               # maps 1:1 onto linkemu's config (testbed/linkemu/README.md);
    emulator = "linkemu"                 # fields left out take linkemu's defaults.  Or "kernel":
                                         # bridge + htb + pfifo, uplink rate and pfifo only
    client_delay_ms = [0, 35]            # optional, one per client: extra delay on the ACKs to each
                                         # client (its RTT grows by that; e.g. a 5/40 ms RTT mix)
    [link.uplink]                        # client -> server (the direction the flows send)
    rate_mbit = 100                      # IP bytes; or trace = "file" (Mahimahi, relative to this file)
    delay_ms = 2.0                       # one-way delay
    qdisc = { kind = "pfifo", limit_pkts = 50 }    # or { kind = "codel", target_ms, interval_ms, ... }
                                         # or { kind = "dualpi2", target_ms = 15, ... } (RFC 9332;
                                         # fields: see DualPi2 below and testbed/linkemu/README.md)
    loss = { model = "bernoulli", p = 0.001 }      # optional; or { model = "gilbert", p_gb, p_bg, ... }
    overhead_bytes = 14                  # optional, charged per packet
    [link.downlink]                      # server -> client; default: the uplink without its loss
    [link.wifi]                          # optional shared WiFi medium of the clients
    clients = [{ phy_rate_mbit = 300 }, { phy_rate_mbit = 300 }]   # one per client
    aggregation = { max_frames = 64 }    # max_frames, max_bytes, max_wait_us, max_ppdu_us
    access_delay_us = { cw_min = 15 }    # slot_us, aifs_us, cw_min, cw_max, retry_limit, collisions,
                                         # extra = { dist = "exponential", mean_us = 200 }
    phy = { preamble_us = 40 }           # preamble_us, sifs_us, block_ack_us, mpdu_overhead_bytes
    queue = { kind = "pfifo", limit_pkts = 1000 }  # each station's queue

    [[flows]]                            # one iperf3 flow each, client -> server
    client = 1                           # 1-based client number
    cca = "cubic"
    start_s = 0                          # default 0
    duration_s = 100                     # default: until the end of the run
    name = "C1"                          # default: C<client>; switches refer to it

    [[switches]]                         # scripted switches of live flows
    at_s = 25
    flow = "C2"
    cca = "cubic"
    inherit = "limited"                  # or "full"

    [daemon]                             # optional: ccswitchd in each client namespace (= daemon on)
    policy = "dqn"                       # dqn (the shipped policy), heuristic (paper 002's evaluation
                                         # function), static, observe (decide and log, never switch)
    tick_s = 0.2                         # the daemon's control tick
    inherit = "limited"                  # inheritance mode of its switches ("limited" or "full")
    cca = "cubic"                        # policy = "static": the CCA every managed flow is put on
    policy_file = "my-policy.json"       # policy = "dqn": this policy file instead of the shipped one
    clients = [1, 2]                     # clients that run it (default: every client with a flow)
    guard = { min_dwell_s = 2.0 }        # overrides of the daemon's [guard] table (daemon/ defines
                                         # the keys; checked by the daemon's own config validator)

    [capture]                            # optional
    tshark = true                        # pcapng of the server's veth (headers only)
    snaplen = 96
    emulator_per_packet = false          # linkemu's packets.csv

Every mistake is reported as one :class:`ScenarioError` naming the file and
the field, e.g. ``s.toml: flows[1].cca: unknown congestion control 'vegas'
(available: bbr, cubic, pcc, reno)``.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from typing import Any

__all__ = [
    "BASE_CPORT",
    "BASE_PORT",
    "DAEMON_AVAILABLE",
    "DAEMON_POLICIES",
    "EMULATORS",
    "AccessDelay",
    "Aggregation",
    "BernoulliLoss",
    "Capture",
    "Codel",
    "DaemonSettings",
    "Dist",
    "DualPi2",
    "Flow",
    "GilbertLoss",
    "Link",
    "LinkDir",
    "Pfifo",
    "PhyOverheads",
    "Scenario",
    "ScenarioError",
    "Switch",
    "Wifi",
    "WifiClient",
    "load_scenario",
    "parse_scenario",
]

DAEMON_AVAILABLE = True
"""The switching daemon (issue 5) runs in the client namespaces
(:func:`ccswitch.testbed.runner.daemon_session`)."""
DAEMON_POLICIES = ("dqn", "heuristic", "static", "observe")
DAEMON_TICK_S = 0.2
"""Default control tick of ccswitchd in the testbed (the daemon's own default)."""
EMULATORS = ("linkemu", "kernel")
INHERIT_MODES = ("limited", "full")
BASE_PORT = 5201
"""iperf3 server port of flows[0]; flows[i] uses BASE_PORT + i."""
BASE_CPORT = 61001
"""iperf3 --cport of flows[0]; flows[i] uses BASE_CPORT + i (the monitor finds flows by it;
above the default ephemeral range 32768-60999, so no control connection takes it)."""
MAX_CLIENTS = 32
MIN_INTERVAL_S = 0.1
FALLBACK_CCAS = ("bbr", "cubic", "pcc", "reno")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


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


@dataclass(frozen=True)
class DualPi2:
    """DualPI2 (RFC 9332) in linkemu; None fields take linkemu's defaults (Linux sch_dualpi2's).

    Classic PI: ``target_ms`` 15, ``tupdate_ms`` 16, ``alpha_hz`` 0.16, ``beta_hz`` 3.2;
    coupling ``k`` 2; native L4S AQM: a step at ``l_min_th_ms`` 1 (a ramp up to
    ``l_max_th_ms``), only with >= ``l_min_qlen_pkts`` 1 other L packets queued;
    ``classifier`` "ecn" (ECT(1)/CE -> L) or "dscp" (``l_dscp`` values -> L);
    ``scheduler`` "wrr" (``c_weight_pct`` 10) or "tsfifo" (``tshift_ms`` 50);
    ``drop_on_overload`` true; ``limit_pkts`` 10000 in both queues.
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

    def to_config(self) -> dict[str, Any]:
        cfg: dict[str, Any] = {"kind": "dualpi2", **_present(self)}
        if self.l_dscp is not None:
            cfg["l_dscp"] = list(self.l_dscp)
        return cfg


DUALPI2_CLASSIFIERS = ("ecn", "dscp")
DUALPI2_SCHEDULERS = ("wrr", "tsfifo")


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
    qdisc: Pfifo | Codel | DualPi2 | None = None
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
        if isinstance(self.qdisc, DualPi2):
            return self.qdisc.limit_pkts if self.qdisc.limit_pkts is not None else 10_000
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
        } | ({"client_delay_ms": list(self.link.client_delay_ms)} if self.link.client_delay_ms else {})


# ------------------------------------------------------------- validation ---


class _Table:
    """A TOML table being read: typed getters, unknown-key check, error paths."""

    def __init__(self, data: Any, path: str, err: _Err) -> None:
        self.path = path
        self.err = err
        if not isinstance(data, dict):
            err(path, f"must be a table, got {_tname(data)}")
        self.data: dict[str, Any] = data
        self.used: set[str] = set()

    def here(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def has(self, key: str) -> bool:
        return key in self.data

    def raw(self, key: str, default: Any = None) -> Any:
        self.used.add(key)
        return self.data.get(key, default)

    def number(self, key: str, default: float | None = None, *, required: bool = False,
               lo: float | None = None, hi: float | None = None, lo_open: bool = False) -> float | None:
        if key not in self.data:
            if required:
                self.err(self.here(key), "missing (a number is required)")
            self.used.add(key)
            return default
        v = self.raw(key)
        if isinstance(v, bool) or not isinstance(v, int | float):
            self.err(self.here(key), f"must be a number, got {_tname(v)} {v!r}")
        v = float(v)
        if v != v or v in (float("inf"), float("-inf")):
            self.err(self.here(key), f"must be a finite number, got {v}")
        if lo is not None and (v <= lo if lo_open else v < lo):
            self.err(self.here(key), f"must be {'>' if lo_open else '>='} {lo:g}, got {v:g}")
        if hi is not None and v > hi:
            self.err(self.here(key), f"must be <= {hi:g}, got {v:g}")
        return v

    def integer(self, key: str, default: int | None = None, *, required: bool = False,
                lo: int | None = None, hi: int | None = None) -> int | None:
        if key not in self.data:
            if required:
                self.err(self.here(key), "missing (an integer is required)")
            self.used.add(key)
            return default
        v = self.raw(key)
        if isinstance(v, bool) or not isinstance(v, int):
            self.err(self.here(key), f"must be an integer, got {_tname(v)} {v!r}")
        if lo is not None and v < lo:
            self.err(self.here(key), f"must be >= {lo}, got {v}")
        if hi is not None and v > hi:
            self.err(self.here(key), f"must be <= {hi}, got {v}")
        return int(v)

    def string(self, key: str, default: str | None = None, *, required: bool = False,
               choices: Iterable[str] | None = None) -> str | None:
        if key not in self.data:
            if required:
                self.err(self.here(key), "missing (a string is required)")
            self.used.add(key)
            return default
        v = self.raw(key)
        if not isinstance(v, str):
            self.err(self.here(key), f"must be a string, got {_tname(v)} {v!r}")
        if choices is not None:
            opts = list(choices)
            if v not in opts:
                self.err(self.here(key), f"unknown value {v!r} (use one of: {', '.join(opts)})")
        return v

    def boolean(self, key: str, default: bool) -> bool:
        if key not in self.data:
            self.used.add(key)
            return default
        v = self.raw(key)
        if not isinstance(v, bool):
            self.err(self.here(key), f"must be true or false, got {_tname(v)} {v!r}")
        return v

    def table(self, key: str) -> _Table | None:
        if key not in self.data:
            self.used.add(key)
            return None
        return _Table(self.raw(key), self.here(key), self.err)

    def array(self, key: str) -> list[Any]:
        if key not in self.data:
            self.used.add(key)
            return []
        v = self.raw(key)
        if not isinstance(v, list):
            self.err(self.here(key), f"must be an array, got {_tname(v)}")
        return v

    def done(self) -> None:
        """Error on the first key nobody asked for."""
        for key in self.data:
            if key not in self.used:
                known = sorted(self.used)
                self.err(self.here(key), f"unknown field (expected one of: {', '.join(known)})")


class _Err:
    def __init__(self, where: str) -> None:
        self.where = where

    def __call__(self, path: str, msg: str) -> Any:
        raise ScenarioError(f"{self.where}: {path}: {msg}" if path else f"{self.where}: {msg}")


def _tname(v: Any) -> str:
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "array",
            dict: "table"}.get(type(v), type(v).__name__)


def _optional(t: _Table, spec: dict[str, tuple[str, float | None, float | None]]) -> dict[str, Any]:
    """Read the optional fields of *spec* (name -> (kind, lo, hi)) that *t* sets.

    kind: "num" (lo <= v <= hi), "pos" (0 < v <= hi), "int" or "bool".
    """
    out: dict[str, Any] = {}
    for key, (kind, lo, hi) in spec.items():
        if not t.has(key):
            t.used.add(key)
        elif kind == "bool":
            out[key] = t.boolean(key, False)
        elif kind == "int":
            out[key] = t.integer(key, lo=None if lo is None else int(lo), hi=None if hi is None else int(hi))
        elif kind == "pos":
            out[key] = t.number(key, lo=0.0, lo_open=True, hi=hi)
        else:
            out[key] = t.number(key, lo=lo, hi=hi)
    return out


def _loss(t: _Table) -> BernoulliLoss | GilbertLoss:
    model = t.string("model", required=True, choices=("bernoulli", "gilbert"))
    if model == "bernoulli":
        p = float(t.number("p", required=True, lo=0.0, hi=1.0) or 0.0)
        t.done()
        return BernoulliLoss(p)
    p_gb = float(t.number("p_gb", required=True, lo=0.0, hi=1.0) or 0.0)
    p_bg = float(t.number("p_bg", required=True, lo=0.0, hi=1.0) or 0.0)
    if p_gb + p_bg == 0:
        t.err(t.here("p_bg"), "p_gb and p_bg cannot both be 0")
    loss_good = float(t.number("loss_good", 0.0, lo=0.0, hi=1.0) or 0.0)
    loss_bad = t.number("loss_bad", 1.0, lo=0.0, hi=1.0)
    t.done()
    return GilbertLoss(p_gb, p_bg, loss_good, 1.0 if loss_bad is None else loss_bad)


def _dualpi2(t: _Table) -> DualPi2:
    """The dualpi2 qdisc table; ranges as linkemu checks them (config.rs DualPi2::validate)."""
    v = _optional(t, {"limit_pkts": ("int", 1, 10_000_000), "target_ms": ("pos", None, 60_000.0),
                      "tupdate_ms": ("num", 0.1, 60_000.0), "alpha_hz": ("pos", None, 1e9),
                      "beta_hz": ("num", 0.0, 1e9), "k": ("num", 0.5, 64.0),
                      "l_min_th_ms": ("num", 0.0, 60_000.0), "l_max_th_ms": ("num", 0.0, 60_000.0),
                      "l_min_qlen_pkts": ("int", 0, 10_000_000), "c_weight_pct": ("num", 0.0, 100.0),
                      "tshift_ms": ("num", 0.0, 60_000.0), "drop_on_overload": ("bool", None, None)})
    lo = v.get("l_min_th_ms", 1.0)
    if "l_max_th_ms" in v and v["l_max_th_ms"] < lo:
        t.err(t.here("l_max_th_ms"), f"must be >= l_min_th_ms ({lo:g}), got {v['l_max_th_ms']:g}")
    classifier = t.string("classifier", None, choices=DUALPI2_CLASSIFIERS)
    scheduler = t.string("scheduler", None, choices=DUALPI2_SCHEDULERS)
    dscp: tuple[int, ...] | None = None
    if t.has("l_dscp"):
        raw = t.array("l_dscp")
        for i, d in enumerate(raw):
            if isinstance(d, bool) or not isinstance(d, int) or not 0 <= d <= 63:
                t.err(f"{t.here('l_dscp')}[{i}]", f"must be a DSCP value 0..63, got {d!r}")
        dscp = tuple(raw)
    else:
        t.used.add("l_dscp")
    if classifier == "dscp" and not dscp:
        t.err(t.here("l_dscp"), 'classifier = "dscp" needs at least one DSCP value (0..63)')
    if dscp is not None and classifier != "dscp":
        t.err(t.here("l_dscp"), 'only used with classifier = "dscp" (remove it or set the classifier)')
    t.done()
    return DualPi2(classifier=classifier, scheduler=scheduler, l_dscp=dscp, **v)


def _qdisc(t: _Table) -> Pfifo | Codel | DualPi2:
    kind = t.string("kind", required=True, choices=("pfifo", "codel", "dualpi2"))
    if kind == "dualpi2":
        return _dualpi2(t)
    limit = int(t.integer("limit_pkts", 1000, lo=1, hi=10_000_000) or 1000)
    if kind == "pfifo":
        q: Pfifo | Codel = Pfifo(limit)
    else:
        q = Codel(target_ms=float(t.number("target_ms", 5.0, lo=0.0, lo_open=True, hi=60_000.0) or 5.0),
                  interval_ms=float(t.number("interval_ms", 100.0, lo=0.0, lo_open=True, hi=60_000.0) or 100.0),
                  limit_pkts=limit, ecn=t.boolean("ecn", False))
    t.done()
    return q


def _link_dir(t: _Table | None, base_dir: Path, default: LinkDir) -> LinkDir:
    if t is None:
        return default
    rate = t.number("rate_mbit", None, lo=0.0, lo_open=True, hi=1e6)
    trace_s = t.string("trace")
    trace: Path | None = None
    if trace_s is not None:
        if rate is not None:
            t.err(t.here("trace"), "give rate_mbit or trace, not both")
        trace = (base_dir / trace_s).resolve()
        if not trace.is_file():
            t.err(t.here("trace"), f"trace file {trace} does not exist")
    elif rate is None and not t.has("rate_mbit"):
        rate, trace = default.rate_mbit, default.trace
    delay = float(t.number("delay_ms", default.delay_ms, lo=0.0, hi=100_000.0) or 0.0)
    lt = t.table("loss")
    qt = t.table("qdisc")
    extra = _optional(t, {"overhead_bytes": ("int", 0, 65_535), "trace_bytes_per_opportunity": ("int", 1, 1 << 20)})
    t.done()
    return LinkDir(rate_mbit=rate, trace=trace, delay_ms=delay, loss=_loss(lt) if lt is not None else None,
                   qdisc=_qdisc(qt) if qt is not None else default.qdisc,
                   overhead_bytes=extra.get("overhead_bytes", default.overhead_bytes),
                   trace_bytes_per_opportunity=extra.get("trace_bytes_per_opportunity",
                                                         default.trace_bytes_per_opportunity))


def _dist(t: _Table) -> Dist:
    kind = t.string("dist", required=True, choices=("constant", "uniform", "exponential", "lognormal"))
    need = {"constant": ("us",), "uniform": ("min_us", "max_us"), "exponential": ("mean_us",),
            "lognormal": ("median_us", "sigma")}[kind or "constant"]
    vals = {k: t.number(k, required=True, lo=0.0) for k in need}
    if kind == "uniform" and (vals["max_us"] or 0.0) < (vals["min_us"] or 0.0):
        t.err(t.here("max_us"), "must be >= min_us")
    if kind == "lognormal" and not vals["median_us"]:
        t.err(t.here("median_us"), "must be > 0")
    t.done()
    return Dist(dist=kind or "constant", **vals)


def _wifi(t: _Table, clients: int) -> Wifi:
    rows = t.array("clients")
    if len(rows) != clients:
        t.err(t.here("clients"), f"needs one entry per client ({clients}), got {len(rows)}")
    stations = []
    for i, row in enumerate(rows):
        rt = _Table(row, f"{t.here('clients')}[{i}]", t.err)
        rate = float(rt.number("phy_rate_mbit", required=True, lo=0.0, lo_open=True, hi=1e5) or 0.0)
        up = rt.number("uplink_phy_rate_mbit", None, lo=0.0, lo_open=True, hi=1e5)
        rt.done()
        stations.append(WifiClient(rate, up))
    agg = Aggregation()
    if (at := t.table("aggregation")) is not None:
        agg = Aggregation(**_optional(at, {"max_frames": ("int", 1, 1024), "max_bytes": ("int", 1600, 1 << 24),
                                           "max_wait_us": ("num", 0.0, 1e6), "max_ppdu_us": ("pos", None, 1e6)}))
        at.done()
    acc = AccessDelay()
    if (dt := t.table("access_delay_us")) is not None:
        vals = _optional(dt, {"slot_us": ("pos", None, 1e5), "aifs_us": ("num", 0.0, 1e6),
                              "cw_min": ("int", 0, 65_535), "cw_max": ("int", 0, 65_535),
                              "retry_limit": ("int", 0, 255), "collisions": ("bool", None, None)})
        lo_cw, hi_cw = vals.get("cw_min", 15), vals.get("cw_max", 1023)
        if lo_cw > hi_cw:
            dt.err(dt.here("cw_max"), f"must be >= cw_min ({lo_cw}), got {hi_cw}")
        xt = dt.table("extra")
        acc = AccessDelay(**vals, extra=_dist(xt) if xt is not None else None)
        dt.done()
    phy = PhyOverheads()
    if (pt := t.table("phy")) is not None:
        phy = PhyOverheads(**_optional(pt, {"preamble_us": ("num", 0.0, 1e4), "sifs_us": ("num", 0.0, 1e4),
                                            "block_ack_us": ("num", 0.0, 1e4),
                                            "mpdu_overhead_bytes": ("int", 0, 1024)}))
        pt.done()
    qt = t.table("queue")
    queue = _qdisc(qt) if qt is not None else None
    if isinstance(queue, DualPi2):
        t.err(f"{t.here('queue')}.kind", "dualpi2 is supported on link.uplink/downlink only, not WiFi queues")
    wifi = Wifi(tuple(stations), agg, acc, phy, queue)
    t.done()
    return wifi


def _link(t: _Table | None, base_dir: Path, clients: int) -> Link:
    if t is None:
        return Link()
    emulator = t.string("emulator", "linkemu", choices=EMULATORS) or "linkemu"
    up = _link_dir(t.table("uplink"), base_dir, LinkDir())
    down = _link_dir(t.table("downlink"), base_dir, replace(up, loss=None))
    wt = t.table("wifi")
    wifi = _wifi(wt, clients) if wt is not None else None
    delays = t.array("client_delay_ms")
    if delays:
        if len(delays) != clients:
            t.err(t.here("client_delay_ms"), f"needs one value per client ({clients}), got {len(delays)}")
        for i, d in enumerate(delays):
            if isinstance(d, bool) or not isinstance(d, int | float) or not 0 <= d <= 60_000:
                t.err(f"{t.here('client_delay_ms')}[{i}]", f"must be a number of ms in 0..60000, got {d!r}")
    t.done()
    link = Link(emulator=emulator, uplink=up, downlink=down, wifi=wifi,
                client_delay_ms=tuple(float(d) for d in delays))
    if emulator == "kernel":
        _check_kernel_link(link, t)
    return link


def _check_kernel_link(link: Link, t: _Table) -> None:
    """The kernel fallback (bridge + htb + pfifo) only shapes the uplink's rate."""
    kernel = "with emulator = \"kernel\" (bridge + htb + pfifo on the uplink; use linkemu)"
    if link.wifi is not None:
        t.err(t.here("wifi"), f"not supported {kernel}")
    if any(link.client_delay_ms):
        t.err(t.here("client_delay_ms"), f"not supported {kernel}")
    for name, d in (("uplink", link.uplink), ("downlink", link.downlink)):
        if d.trace is not None:
            t.err(f"{t.here(name)}.trace", f"not supported {kernel}")
        if d.delay_ms:
            t.err(f"{t.here(name)}.delay_ms", f"must be 0 {kernel}")
        if d.loss is not None:
            t.err(f"{t.here(name)}.loss", f"not supported {kernel}")
        if d.qdisc is not None and not isinstance(d.qdisc, Pfifo):
            t.err(f"{t.here(name)}.qdisc.kind", f"only \"pfifo\" {kernel}")


def _flows(rows: list[Any], clients: int, duration: float, ccas: Sequence[str], err: _Err) -> list[Flow]:
    if not rows:
        err("flows", "at least one [[flows]] entry is required")
    flows: list[Flow] = []
    names: set[str] = set()
    for i, row in enumerate(rows):
        t = _Table(row, f"flows[{i}]", err)
        client = int(t.integer("client", required=True, lo=1, hi=clients) or 1)
        cca = t.string("cca", required=True) or ""
        if cca not in ccas:
            err(t.here("cca"), f"unknown congestion control {cca!r} (available: {', '.join(ccas)})")
        start = float(t.number("start_s", 0.0, lo=0.0) or 0.0)
        if start >= duration:
            err(t.here("start_s"), f"must be before the end of the run ({duration:g} s), got {start:g}")
        dur = float(t.number("duration_s", duration - start, lo=1.0) or 0.0)
        if start + dur > duration + 1e-9:
            err(t.here("duration_s"), f"start_s + duration_s = {start + dur:g} s exceeds the run's "
                                      f"duration_s = {duration:g}")
        name = t.string("name", f"C{client}") or ""
        if not _NAME_RE.match(name):
            err(t.here("name"), f"{name!r} is not a valid name (letters, digits, '.', '_', '-')")
        if name in names:
            err(t.here("name"), f"duplicate flow name {name!r} (give each flow of a client its own name)")
        names.add(name)
        t.done()
        flows.append(Flow(index=i, name=name, client=client, cca=cca, start_s=start, duration_s=dur))
    return flows


def _switches(rows: list[Any], flows: Sequence[Flow], ccas: Sequence[str], err: _Err) -> list[Switch]:
    by_name = {f.name: f for f in flows}
    out = []
    for i, row in enumerate(rows):
        t = _Table(row, f"switches[{i}]", err)
        at = float(t.number("at_s", required=True, lo=0.0, lo_open=True) or 0.0)
        name = t.string("flow", required=True) or ""
        if name not in by_name:
            err(t.here("flow"), f"no flow named {name!r} (flows: {', '.join(by_name)})")
        f = by_name[name]
        if not f.start_s < at < f.end_s:
            err(t.here("at_s"), f"{at:g} s is outside flow {name}'s lifetime ({f.start_s:g}-{f.end_s:g} s)")
        cca = t.string("cca", required=True) or ""
        if cca not in ccas:
            err(t.here("cca"), f"unknown congestion control {cca!r} (available: {', '.join(ccas)})")
        inherit = t.string("inherit", "limited", choices=INHERIT_MODES) or "limited"
        t.done()
        out.append(Switch(at_s=at, flow=name, cca=cca, inherit=inherit))
    return sorted(out, key=lambda s: s.at_s)


def _daemon(top: _Table, clients: int, ccas: Sequence[str], err: _Err,
            base_dir: Path) -> DaemonSettings | None:
    """``daemon = true|false`` or a ``[daemon]`` table (the daemon on, with settings)."""
    raw = top.data.get("daemon", False)
    if isinstance(raw, bool):
        top.boolean("daemon", False)
        if raw and not DAEMON_AVAILABLE:
            err("daemon", "the switching daemon is not available here; set daemon = false")
        return DaemonSettings() if raw else None
    if not isinstance(raw, dict):
        err("daemon", f"must be true, false or a table ([daemon] with settings), got {_tname(raw)} {raw!r}")
    t = top.table("daemon")
    assert t is not None
    policy = t.string("policy", "dqn", choices=DAEMON_POLICIES) or "dqn"
    tick = float(t.number("tick_s", DAEMON_TICK_S, lo=0.1, hi=10.0) or DAEMON_TICK_S)
    inherit = t.string("inherit", "limited", choices=INHERIT_MODES) or "limited"
    cca = t.string("cca")
    if cca is not None and cca not in ccas:
        err(t.here("cca"), f"unknown congestion control {cca!r} (available: {', '.join(ccas)})")
    if policy == "static" and cca is None:
        err(t.here("cca"), 'missing: policy = "static" needs the CCA to put every flow on (e.g. cca = "cubic")')
    if policy != "static" and cca is not None:
        err(t.here("cca"), f'only used with policy = "static" (policy is {policy!r}); remove it')
    on = t.array("clients")
    if not all(isinstance(c, int) and not isinstance(c, bool) and 1 <= c <= clients for c in on):
        err(t.here("clients"), f"must be an array of client numbers 1..{clients}, got {on!r}")
    if len(set(on)) != len(on):
        err(t.here("clients"), f"lists a client twice: {on!r}")
    guard: list[tuple[str, Any]] = []
    if (gt := t.table("guard")) is not None:
        for key, v in gt.data.items():
            gt.used.add(key)
            if not re.match(r"^[a-z][a-z0-9_]*$", key):
                err(gt.here(key), "is not a valid key (lower-case letters, digits, '_')")
            if isinstance(v, dict | list):
                err(gt.here(key), f"must be a number, boolean or string, got {_tname(v)}")
            guard.append((key, v))
    policy_file = None
    if (pf := t.string("policy_file")) is not None:
        policy_file = (base_dir / pf).resolve()
        if policy != "dqn":
            err(t.here("policy_file"), f'only used with policy = "dqn" (policy is {policy!r}); remove it')
        elif not policy_file.is_file():
            err(t.here("policy_file"), f"no such file: {policy_file} (a path relative to the scenario file)")
    t.done()
    if not DAEMON_AVAILABLE:
        err("daemon", "the switching daemon is not available here; remove the [daemon] table")
    settings = DaemonSettings(policy=policy, tick_s=tick, inherit=inherit, cca=cca,
                              clients=tuple(sorted(int(c) for c in on)), guard=tuple(guard),
                              policy_file=policy_file)
    from .daemons import check_settings  # the daemon's own config validator (daemon/config.py)

    for problem in check_settings(settings):  # "guard.margin: must be >= 0, got -1.0"
        key, _, msg = problem.partition(": ")
        err(f"daemon.{key}" if key.startswith("guard.") and msg else "daemon", msg if msg else problem)
    return settings


def default_ccas() -> list[str]:
    """CCAs a scenario may use here: the kernel's list plus ccswitch's BPF PCC and Prague."""
    from ccswitch.host import available_ccas

    try:
        found = set(available_ccas())
    except OSError:
        found = set(FALLBACK_CCAS)
    return sorted(found | {"pcc", "prague"})


def parse_scenario(text: str, where: str = "scenario", *, base_dir: Path | None = None,
                   ccas: Sequence[str] | None = None, source: Path | None = None) -> Scenario:
    """Validate TOML *text*; *where* prefixes error messages (usually the file name)."""
    err = _Err(where)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ScenarioError(f"{where}: invalid TOML: {e}") from None
    ccas = sorted(ccas) if ccas is not None else default_ccas()
    base_dir = base_dir or Path.cwd()
    top = _Table(data, "", err)

    default_name = source.stem if source else "scenario"
    name = top.string("name", default_name) or default_name
    if not _NAME_RE.match(name):
        err("name", f"{name!r} is not a valid name (letters, digits, '.', '_', '-'; at most 64)")
    description = top.string("description", "") or ""
    duration = float(top.number("duration_s", required=True, lo=1.0, hi=86_400.0) or 0.0)
    interval = float(top.number("sample_interval_s", 1.0, lo=MIN_INTERVAL_S, hi=60.0) or 1.0)
    if interval > duration:
        err("sample_interval_s", f"must not exceed duration_s ({duration:g}), got {interval:g}")

    raw_flows = top.array("flows")
    max_client = max((r.get("client", 1) for r in raw_flows if isinstance(r, dict)
                      and isinstance(r.get("client"), int) and not isinstance(r.get("client"), bool)),
                     default=1)
    clients = int(top.integer("clients", max(1, max_client), lo=1, hi=MAX_CLIENTS) or 1)

    daemon = _daemon(top, clients, ccas, err, base_dir)

    repetitions = top.integer("repetitions", None, lo=1, hi=1000)
    seeds_raw = top.raw("seeds")
    if seeds_raw is not None:
        if not isinstance(seeds_raw, list) or not seeds_raw or not all(
                isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds_raw):
            err("seeds", "must be a non-empty array of non-negative integers")
        if repetitions is not None and len(seeds_raw) != repetitions:
            err("seeds", f"has {len(seeds_raw)} entries but repetitions = {repetitions} (one seed per run)")
        seeds = tuple(int(s) for s in seeds_raw)
    else:
        seeds = tuple(range(1, (repetitions or 1) + 1))

    link = _link(top.table("link"), base_dir, clients)
    flows = _flows(raw_flows, clients, duration, ccas, err)
    switches = _switches(top.array("switches"), flows, ccas, err)

    ct = top.table("capture")
    capture = Capture()
    if ct is not None:
        capture = Capture(tshark=ct.boolean("tshark", True),
                          snaplen=int(ct.integer("snaplen", 96, lo=64, hi=65535) or 96),
                          emulator_per_packet=ct.boolean("emulator_per_packet", False))
        ct.done()
    top.done()
    return Scenario(
        name=name, description=description, duration_s=duration, clients=clients, flows=tuple(flows),
        link=link, switches=tuple(switches), repetitions=len(seeds), seeds=seeds,
        sample_interval_s=interval, daemon=daemon, capture=capture, source=source, text=text,
    )


def load_scenario(path: str | Path, *, ccas: Sequence[str] | None = None) -> Scenario:
    """Read and validate a scenario file; raises :class:`ScenarioError` (one line)."""
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise ScenarioError(f"{p}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ScenarioError(f"{p}: cannot read: {e}") from None
    return parse_scenario(text, p.name, base_dir=p.parent.resolve(), ccas=ccas, source=p.resolve())
