"""What the L4S report holds: a run's flows, its per-phase results and the whole run's result.

A flow is **L4S** when its CCA is in :data:`L4S_CCAS` (it sits in DualPI2's L
queue, or VDQ-CSAQM's L4S FIFO), otherwise **Classic**.  Filled by
:mod:`.report_phases` from what :mod:`.report_read` reads out of a run folder;
written out by :mod:`.report_tables` and :mod:`.report_plot`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

L4S_CCAS = ("prague",)
CLASSES = ("L4S", "Classic")
QUEUE_OF = {"L4S": "l", "Classic": "c"}
"""The per-queue statistics (linkemu's ``l_*`` / ``c_*`` columns) of each class."""
HEADER_FACTOR = 1500 / 1448
"""IP bytes per goodput byte (1448-byte payload with timestamps, 52 bytes of headers)."""


@dataclass
class FlowInfo:
    name: str
    client: int
    cca: str
    start_s: float
    end_s: float
    klass: str
    rtt_ms: float
    policy: str | None = None
    """vdq_csaqm's packet-value policy of the flow (None for other queues)."""


@dataclass
class PhaseResult:
    start_s: float
    end_s: float
    counts: dict[str, int]
    flow_mbps: dict[str, float]
    fair_mbps: float
    class_mbps: dict[str, float]
    per_flow_mbps: dict[str, float]
    lc_ratio: float
    jain: float
    utilisation: float
    delay_ms: dict[str, dict[str, float]] = field(default_factory=dict)
    group_per_flow_mbps: dict[str, float] = field(default_factory=dict)
    marks_pct: dict[str, float] = field(default_factory=dict)
    """CE marks per packet that left the class's queue, % (packets ~ bytes_out / 1500)."""
    drops_pct: dict[str, float] = field(default_factory=dict)
    cca_per_flow_mbps: dict[str, float] = field(default_factory=dict)
    """Per-flow mean goodput of each CCA's active flows (the classes of a mixed-CCA run)."""
    policy_per_flow_mbps: dict[str, float] = field(default_factory=dict)
    """vdq_csaqm: per-flow mean goodput per "<class> <policy>" (e.g. "Classic silver"); {} otherwise."""
    gold_silver: float = math.nan
    """vdq_csaqm: Gold flows' per-flow mean goodput / Silver flows' (all classes); NaN without both policies."""

    @property
    def label(self) -> str:
        return f"{self.counts['L4S']}-{self.counts['Classic']}"


@dataclass
class RunResult:
    scenario: str
    run_dir: Path
    rate_mbit: float
    daemon: bool
    flows: list[FlowInfo]
    phases: list[PhaseResult]
    t_s: list[float]
    series: dict[str, list[float]]
    queue: dict[str, dict[str, list[float]]]
    queue_t_s: list[float]
    switches: list[dict[str, Any]]
    emulator: dict[str, Any] = field(default_factory=dict)
    """linkemu's uplink summary (classes, qdisc_stats) for the whole run."""
    daemon_events: list[dict[str, Any]] = field(default_factory=list)
    """ccswitchd's applied switches and reverts: t_s (since t0), flow, from, to, action."""
    cca_seconds: dict[str, float] = field(default_factory=dict)
    """Seconds the classic flows spent on each CCA (with the daemon's switches)."""
    queue_kind: str = "dualpi2"
    """The bottleneck's qdisc kind (the scenario's uplink)."""
