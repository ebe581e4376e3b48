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
    tcp_ecn = 1                          # optional: net.ipv4.tcp_ecn of the client namespaces: 1 =
                                         # classic ECN (RFC 3168) on every flow, 0 = never, 2 = only
                                         # when asked; default: the kernel's 2, i.e. no ECN (the server
                                         # keeps 2 and accepts it).  The AQM marks only with its ecn on

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
                                         # fields: see DualPi2 below and testbed/linkemu/README.md;
                                         # agent = "models/dualpi2_a3c.json": paper 000's A3C agent,
                                         # agent_rate_mbit on a trace-driven link)
                                         # or { kind = "fq_codel" } (RFC 8290: flows, quantum, target_ms,
                                         # interval_ms, limit_pkts, ecn) or { kind = "fq",
                                         # flow_limit_pkts = 100 } (per-flow queues, static per-flow limit)
                                         # or { kind = "lfq", default_limit_pkts = 100 } (fq with per-flow
                                         # limits set at run time through linkemu's control socket;
                                         # agent = "models/lfq_actor.json": paper 001's trained agent sets
                                         # them, agent_interval_ms default 10; see Lfq)
                                         # or { kind = "pie" } (RFC 8033: target_ms, tupdate_ms, alpha,
                                         # beta, max_burst_ms, limit_pkts, ecn, bytemode) or
                                         # { kind = "fq_pie", flows = 6 } (a PIE per flow queue; also
                                         # flows, quantum, ecn_prob_pct) or { kind = "vdq_csaqm",
                                         # policies = [{ policy = "silver", dport = 5202 }] } (paper 004:
                                         # per-flow packet values, virtual dual queue CSAQM; see VdqCsaqm)
                                         # or { kind = "fq_dualpi2" } (paper 000: hashed pairs of L4S and
                                         # Classic queues coupled by a PIE per pair; see FqDualPi2)
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
    kind = "bulk"                        # or "web": a short flow beside the bulk ones, left out of
                                         # the fair-share metrics (min share, Jain)

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
    remote = { latency_ms = 65 }         # policy = "dqn": its forward pass on a policy server that the
                                         # runner starts in the server namespace (issue 15); also
                                         # deadline_ms (0 = latency + 150), l4s, joint (one decision per
                                         # path: ccswitch/remote/joint.py)

    [capture]                            # optional
    tshark = true                        # pcapng of the server's veth (headers only)
    snaplen = 96
    emulator_per_packet = false          # linkemu's packets.csv

Every mistake is reported as one :class:`ScenarioError` naming the file and
the field, e.g. ``s.toml: flows[1].cca: unknown congestion control 'vegas'
(available: bbr, cubic, pcc, reno)``.
"""

from .daemon_config import check_settings, daemon_config, toml_text
from .model import (
    BASE_CPORT,
    BASE_PORT,
    DAEMON_AVAILABLE,
    DAEMON_POLICIES,
    DAEMON_TICK_S,
    EMULATORS,
    FALLBACK_CCAS,
    FLOW_KINDS,
    INHERIT_MODES,
    MAX_CLIENTS,
    AccessDelay,
    Aggregation,
    BernoulliLoss,
    Capture,
    Codel,
    DaemonSettings,
    Dist,
    DualPi2,
    Flow,
    Fq,
    FqCodel,
    FqDualPi2,
    FqPie,
    GilbertLoss,
    Lfq,
    Link,
    LinkDir,
    Pfifo,
    PhyOverheads,
    Pie,
    RemoteDecisions,
    Scenario,
    ScenarioError,
    Switch,
    VdqCsaqm,
    VdqPolicyRule,
    Wifi,
    WifiClient,
)
from .parse import default_ccas, load_scenario, parse_scenario

__all__ = [
    "BASE_CPORT",
    "BASE_PORT",
    "DAEMON_AVAILABLE",
    "DAEMON_POLICIES",
    "DAEMON_TICK_S",
    "EMULATORS",
    "FALLBACK_CCAS",
    "FLOW_KINDS",
    "INHERIT_MODES",
    "MAX_CLIENTS",
    "AccessDelay",
    "Aggregation",
    "BernoulliLoss",
    "Capture",
    "Codel",
    "DaemonSettings",
    "Dist",
    "DualPi2",
    "Flow",
    "Fq",
    "FqCodel",
    "FqDualPi2",
    "FqPie",
    "GilbertLoss",
    "Lfq",
    "Link",
    "LinkDir",
    "Pfifo",
    "PhyOverheads",
    "Pie",
    "RemoteDecisions",
    "Scenario",
    "ScenarioError",
    "Switch",
    "VdqCsaqm",
    "VdqPolicyRule",
    "Wifi",
    "WifiClient",
    "check_settings",
    "daemon_config",
    "default_ccas",
    "load_scenario",
    "parse_scenario",
    "toml_text",
]
