"""The scenario contract's queue disciplines: one frozen dataclass per ``qdisc = { kind = ... }``.

Split from :mod:`.model` (the rest of the scenario file; it re-exports these);
:mod:`.parse_qdisc` turns the TOML tables into them.  ``None`` fields mean
"linkemu's default"; ``to_config()`` gives linkemu's JSON.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any


def present_fields(obj: Any) -> dict[str, Any]:
    """A dataclass as a dict without its None fields (None = linkemu's default)."""
    out = {}
    for f in fields(obj):
        v = getattr(obj, f.name)
        if v is None:
            continue
        if is_dataclass(v):
            v = v.to_config() if hasattr(v, "to_config") else present_fields(v)
        out[f.name] = v
    return out



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
    ``agent_rate_mbit``: the capacity the agent measures utilisation against on a link without
    ``rate_mbit`` (trace-driven); a constant-rate link uses its own rate.
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
    agent_rate_mbit: float | None = None

    def to_config(self) -> dict[str, Any]:
        cfg: dict[str, Any] = {"kind": "dualpi2", **present_fields(self)}
        for runner_only in ("agent", "agent_interval_ms", "agent_rate_mbit"):
            cfg.pop(runner_only, None)
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
        return {"kind": "fq_codel", **present_fields(self)}


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
        return {"kind": "fq", **present_fields(self)}


@dataclass(frozen=True)
class Lfq:
    """lfq in linkemu: fq's queues and DRR with a per-flow limit an agent sets at run time.

    Each flow starts with ``default_limit_pkts`` (100); linkemu's control socket
    (:mod:`ccswitch.testbed.runs.linkemu_control`) reads its paper-001 features and sets its
    limit (1..``limit_pkts``).  ``limit_pkts`` 10240 in all queues, ``flows`` 1024,
    ``quantum`` 1514, ``idle_timeout_ms`` 3000 (a queue idle that long starts a new flow);
    None fields take these defaults.

    ``agent`` (a path, relative to the scenario file): an actor file of paper 001's LFQ agent
    (``models/lfq_actor.json``); the runner then sets every flow's limit from it every
    ``agent_interval_ms`` (default: the interval it was trained with, 10 ms) through linkemu's control
    socket (testbed/runs/lfq_agent.py).  ``share_floor_bdp`` (0..4, none by default): no limit the agent
    sets goes below that fraction of the flow's fair-share BDP; ``share_floor_min_pkts`` (1..256, none by
    default): nor below that many packets (models/lfq_floor.py).  Not linkemu fields.
    """

    default_limit_pkts: int | None = None
    limit_pkts: int | None = None
    flows: int | None = None
    quantum: int | None = None
    idle_timeout_ms: float | None = None
    agent: Path | None = None
    agent_interval_ms: float | None = None
    share_floor_bdp: float | None = None
    share_floor_min_pkts: int | None = None

    def to_config(self) -> dict[str, Any]:
        cfg: dict[str, Any] = {"kind": "lfq", **present_fields(self)}
        for agent_field in ("agent", "agent_interval_ms", "share_floor_bdp", "share_floor_min_pkts"):
            cfg.pop(agent_field, None)
        return cfg


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
        return {"kind": "pie", **present_fields(self)}


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
        return {"kind": "fq_pie", **present_fields(self)}


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
        return {"kind": "fq_dualpi2", **present_fields(self)}


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
        return present_fields(self)


@dataclass(frozen=True)
class VdqCsaqm:
    """VDQ-CSAQM (paper 004) in linkemu: per-flow packet-value marking + the virtual dual queue core-stateless AQM.

    ``rate_mbit`` C (None: the link's rate_mbit, required without one); virtual queue rates
    ``vq0_rate`` 0.9 and ``vq1_rate`` 0.984 of C; physical queues ``qmax0_ms`` 50 (L4S) and
    ``qmax1_ms`` 200 (Classic) at C; VQ delay targets ``target0_ms`` 1 and ``target1_ms`` 20; CTV
    update ``tupdate_ms`` 10; ``classifier`` "ecn" (ECT(1)/CE -> L4S) or "dscp" (``l_dscp``);
    ``classic_ecn`` true (false: drop ECT Classic packets below the CTV instead of marking);
    marker: ``default_policy`` "gold" (or "silver", "voice"), ``policies`` rules (first match wins),
    ``rate_window_ms`` 100, ``idle_timeout_ms`` 3000; ``ctv_rule`` "paper" (section 3's CTV) or
    "steady" (CTV_1 from a PI controller's fraction turned into a CTV by the values that arrived in the last
    ``steady_window_ms`` 100, gains ``steady_alpha`` 0.001 and ``steady_beta`` 0.01 per update, holding
    VQ_1 at ``steady_setpoint`` 0.5 of its threshold, with the paper's CTV_1 as the ceiling; with
    ``steady_l4s_gain`` g (unset: CTV_0 the paper's) CTV_0 cuts only g of the paper's depth from the values
    that arrived at VQ_0: deviations, linkemu's src/qdisc/vdq_steady.rs).  None fields take these defaults.
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
    ctv_rule: str | None = None
    steady_window_ms: float | None = None
    steady_alpha: float | None = None
    steady_beta: float | None = None
    steady_setpoint: float | None = None
    steady_l4s_gain: float | None = None

    def to_config(self) -> dict[str, Any]:
        cfg: dict[str, Any] = {"kind": "vdq_csaqm", **present_fields(self)}
        if self.l_dscp is not None:
            cfg["l_dscp"] = list(self.l_dscp)
        if self.policies is not None:
            cfg["policies"] = [r.to_config() for r in self.policies]
        return cfg


VDQ_POLICIES = ("gold", "silver", "voice")
VDQ_CLASSIFIERS = ("ecn", "dscp")
VDQ_CTV_RULES = ("paper", "steady")

FQ_DEFAULT_LIMIT_PKTS = 10_240
"""linkemu's ``limit_pkts`` default of fq_codel, fq, lfq, fq_pie and fq_dualpi2 (Linux fq_codel's 10 * 1024)."""
FQ_DEFAULT_FLOW_LIMIT_PKTS = 100
"""fq's ``flow_limit_pkts`` and lfq's ``default_limit_pkts`` default."""
PIE_DEFAULT_LIMIT_PKTS = 1000
"""linkemu's (Linux sch_pie's) ``limit_pkts`` default of pie."""
QDISC_KINDS = ("pfifo", "codel", "dualpi2", "fq_codel", "fq", "lfq", "pie", "fq_pie", "vdq_csaqm", "fq_dualpi2")
