"""Write the L4S scenario files (testbed/scenarios/l4s-*.toml) from paper 004's phase templates.

Paper 004 (Nadas et al., ANRW '20, section 4) drives a 1 Gbit/s DualPI2
bottleneck with flow counts that change every 20 s:

* equal RTT (5 ms), nine phases of L4S-Classic flows
  1-0; 1-1; 10-1; 10-10; 50-10; 50-50; 10-50; 1-10; 0-1  (180 s);
* heterogeneous RTT, seven phases of 1; 2; 5; 10; 5; 2; 1 flows for each of
  L4S-5 ms, L4S-40 ms, Classic-5 ms, Classic-40 ms  (140 s).

This machine has 2 shared cores, so the templates are scaled to 50 Mbit/s
(emulated reliably: bench/emulator_fidelity.py and the paper002 runs at 100
Mbit/s), at most 8-12 concurrent flows and 80 s per run (4 phases of 20 s,
one repetition):

* ``dyn``:    L4S-Classic 1-1; 4-1; 4-4; 1-4     (the 1-1 phase is where the paper
              reports 1:6 L4S:Classic for DualPI2; 4-1 / 1-4 stand for 10-1 / 1-10,
              4-4 for the many-flow phases; 1-0 and 0-1 are left out);
* ``rttmix``: 1; 2; 3; 1 flows for each class-RTT pair (up, peak, back to 1: the
              paper's point is what happens when flows leave).

The L4S flows run ccswitch's BPF Prague (``prague``; DSCP 40 -> L queue, see
bpf/prague.h), the classic flows cubic, bbr or pcc; one client namespace per
class (and RTT), several flows per client.  ``*-daemon`` variants of the ``dyn``
templates run ccswitchd (the shipped DQN policy) on the classic client only, for each
queue (``l4s-dyn-cubic-vs-prague-daemon``, ``l4s-dyn-cubic-vs-prague-vdq-daemon``).

    .venv/bin/python testbed/l4s/make_scenarios.py        # rewrites the files

Every parameter of the bottleneck is written out in the files (defaults of
Linux sch_dualpi2 / RFC 9332), so that ``dualpi2-router.sh --scenario`` gives
a real router exactly the same AQM.

**Queue option** (paper 004 side by side): every ``dyn`` and ``rttmix`` template
is also written with linkemu's ``vdq_csaqm`` (paper 004's Virtual Dual Queue
Core-Stateless AQM, its section 3 defaults, every flow Gold) as ``<name>-vdq``,
and three templates are written for both queues:

* ``solo``: one L4S flow alone for 30 s (paper 004's 1-0 phase: "a single
  DCTCP flow is not able to fully utilize the bottleneck");
* ``ccmix``: prague (L4S) with cubic, bbr and pcc (Classic), 1; 2; 3; 1 flows
  of each (paper 004 figs. 7-8, "heterogeneous CCs", scaled; no L4S BBRv2
  here);
* ``goldsilver`` (vdq_csaqm only): paper 004 figs. 5-6's Gold and Silver
  policies, scaled: Silver's TVF step is at 10 Mbit/s (linkemu's curve, the
  paper's Figure 1), so at 50 Mbit/s a Gold and a Silver flow alone are
  entitled to 40:10 (1:4, region II/III); 1-1-1-1 flows (L4S Gold/Silver,
  Classic Gold/Silver) would sit in region I (1:2).  Phases: Classic
  Gold + Silver (1:4), all four (1:2), L4S Gold + Silver (1:4 of VQ_0's
  0.9 C: 35:10).

    .venv/bin/python testbed/l4s/make_scenarios.py --queue vdq_csaqm   # only the vdq_csaqm files

**Scaled RTT** (``-rtt40``): the ``dyn`` templates for both queues and ``goldsilver`` again at 40 ms
base RTT, so that each flow's window matches paper 004's at 1 Gbit/s (SCALED_ONE_WAY_MS).

**Steady CTV** (``-steady-vdq``): every VDQ-CSAQM file but the ``-daemon`` ones again with linkemu's
``ctv_rule = "steady"`` (STEADY_CTV; CTV_1 with memory, held at half of VQ_1's threshold under the paper's
CTV, and VQ_0's shallow cut ``steady_l4s_gain``, deviations from the paper, linkemu's
src/qdisc/vdq_steady.rs): ``l4s-dyn-cubic-vs-prague-steady-vdq``, ``...-rtt40-steady-vdq``.

    .venv/bin/python testbed/l4s/make_scenarios.py --steady-l4s-gain 0   # twins without the cut (not committed)
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

OUT_DIR = Path(__file__).resolve().parents[1] / "scenarios"
RATE_MBIT = 50.0
PHASE_S = 20.0
BASE_ONE_WAY_MS = 2.5
"""Uplink + downlink delay = 5 ms RTT (paper 004's base RTT)."""
SCALED_ONE_WAY_MS = 20.0
"""The ``-rtt40`` variants' one-way delays (40 ms base RTT): the fair-share window of each of 8 flows at
50 Mbit/s is then ~21 packets, as in paper 004's 10-10 phase at 1 Gbit/s and 5 ms (the 5 ms files give 2.6:
a scalable CCA at 2-3 packets needs ~2/W = 70-100 % of its packets marked to hold still, docs/l4s.md)."""
LONG_RTT_EXTRA_MS = 35.0
"""Extra delay of the 40 ms clients (on their ACKs, as paper 004 delayed ACKs with netem)."""
L4S_CCA = "prague"
PRAGUE_DSCP = 40
"""bpf/prague.h PRAGUE_DSCP: the DSCP ccswitch's Prague puts on its packets."""
CLASSIC_CCAS = ("cubic", "bbr", "pcc")

DUALPI2 = {  # Linux sch_dualpi2 defaults (RFC 9332 Appendix A), all named; l_min_qlen_pkts = 1 is
    # the RFC's Th_len (linkemu's default; Linux's min_qlen_step defaults to 0, the router script sets 1)
    "limit_pkts": 10000, "target_ms": 15.0, "tupdate_ms": 16.0, "alpha_hz": 0.16, "beta_hz": 3.2,
    "k": 2.0, "l_min_th_ms": 1.0, "l_min_qlen_pkts": 1, "classifier": "dscp", "l_dscp": [PRAGUE_DSCP],
    "scheduler": "wrr", "c_weight_pct": 10.0, "drop_on_overload": True,
}

DYN_PHASES = ((1, 1), (4, 1), (4, 4), (1, 4))
"""(L4S flows, Classic flows) per 20 s phase: paper 004 fig. 3 scaled."""
RTTMIX_PHASES = (1, 2, 3, 1)
K_VARIANTS = (4.0,)
"""Coupling factors tried besides RFC 9332's k = 2 (cubic vs prague, dyn template)."""
"""Flows per class-RTT pair per 20 s phase: paper 004 fig. 4 scaled."""


@dataclass(frozen=True)
class Group:
    """Flows of one class (and RTT) on one client: how many in each phase."""

    client: int
    prefix: str
    cca: str
    counts: tuple[int, ...]


def lifetimes(counts: tuple[int, ...]) -> list[tuple[float, float]]:
    """Flow j of a group runs in the phases whose count is >= j: its (start_s, end_s)."""
    out = []
    for j in range(1, max(counts) + 1):
        on = [i for i, c in enumerate(counts) if c >= j]
        if on != list(range(on[0], on[-1] + 1)):
            raise ValueError(f"flow {j} of {counts} would stop and restart: not one iperf3 flow")
        out.append((on[0] * PHASE_S, (on[-1] + 1) * PHASE_S))
    return out


QUEUES = ("dualpi2", "vdq_csaqm")
"""Router queues the templates are written for (``--queue``)."""
QUEUE_SUFFIX = {"dualpi2": "", "vdq_csaqm": "-vdq"}
"""File-name suffix of each queue's files (DualPI2's keep their original names)."""
QUEUE_LABEL = {"dualpi2": "DualPI2", "vdq_csaqm": "VDQ-CSAQM"}
"""How tables and plots name each queue."""
VDQ_CSAQM = {  # paper 004 section 3 defaults, all named (C = the link's rate, written out)
    "rate_mbit": RATE_MBIT, "vq0_rate": 0.9, "vq1_rate": 0.984, "qmax0_ms": 50.0, "qmax1_ms": 200.0,
    "target0_ms": 1.0, "target1_ms": 20.0, "tupdate_ms": 10.0, "classifier": "dscp", "l_dscp": [PRAGUE_DSCP],
    "classic_ecn": True, "default_policy": "gold", "rate_window_ms": 100.0, "idle_timeout_ms": 3000.0,
}
STEADY_L4S_GAIN = 0.1
"""VQ_0's shallow cut in the twins (linkemu ``steady_l4s_gain``; unset in linkemu by default): g of the paper's
CTV_0 depth.  Chosen in virtual time, measured on paper 004's set at 5 and 40 ms, 3 seeds (docs/l4s.md "A
shallow CTV_0 cut")."""
STEADY_CTV: dict[str, object] = {"ctv_rule": "steady", "steady_window_ms": 100.0, "steady_alpha": 0.001,
                                  "steady_beta": 0.01, "steady_setpoint": 0.5, "steady_l4s_gain": STEADY_L4S_GAIN}
"""The ``-steady-vdq`` twins' CTV rule, all named (linkemu's defaults for it, config/vdq.rs STEADY_DEFAULTS,
and the cut).  ``--steady-l4s-gain G`` writes them with another gain, 0 without the cut."""
STEADY_SUFFIX = "-steady"
CLIENT_SUBNET, CLIENT_HOST0 = "10.99.0", 10
"""testbed/runs/topology.py: client i (1-based) is SUBNET.(10 + i) (vdq_csaqm policy rules match on it)."""
SOLO_S = 30.0
CCMIX = ("cubic", "bbr", "pcc")
"""Classic CCAs of the ``ccmix`` template, each beside prague (paper 004 figs. 7-8)."""
GOLDSILVER_PHASES = {"C": (1, 1, 0), "L": (0, 1, 1)}
"""Flows per policy per 20 s phase in ``goldsilver``: Classic pair, all four, L4S pair."""


def scenario_name(name: str, queue: str) -> str:
    """*name*'s twin for *queue*: ``l4s-dyn-cubic-vs-prague`` -> ``l4s-dyn-cubic-vs-prague-vdq``."""
    base = name.removesuffix(QUEUE_SUFFIX["vdq_csaqm"])
    return base + QUEUE_SUFFIX[queue]


def steady_name(name: str) -> str:
    """The steady-CTV twin of a VDQ-CSAQM file: ``l4s-solo-prague-vdq`` -> ``l4s-solo-prague-steady-vdq``."""
    return name.removesuffix(QUEUE_SUFFIX["vdq_csaqm"]) + STEADY_SUFFIX + QUEUE_SUFFIX["vdq_csaqm"]


def client_ip(client: int) -> str:
    return f"{CLIENT_SUBNET}.{CLIENT_HOST0 + client}"


A3C_ACTOR = "../../models/dualpi2_a3c.json"
"""Paper 000's trained actor, relative to testbed/scenarios/ (the ``-a3c`` variants)."""
A3C_CCAS = ("cubic", "reno")
"""Classic CCAs of the ``-a3c`` variants (the agent against the PI controller, docs/l4s.md "A3C")."""


def _toml_value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + " }"
    return f"{v:g}"


def qdisc_toml(coupling: float | None = None, agent: str | None = None, queue: str = "dualpi2",
               silver_clients: tuple[int, ...] = (), steady: bool = False) -> str:
    """The uplink's inline qdisc table: DualPI2 (optionally k / agent) or VDQ-CSAQM (optionally Silver
    clients, the steady CTV rule)."""
    if queue == "vdq_csaqm":
        if coupling is not None or agent:
            raise ValueError("k and agent are DualPI2's")
        params: dict[str, object] = dict(VDQ_CSAQM) | (STEADY_CTV if steady else {})
        if silver_clients:
            params["policies"] = [{"policy": "silver", "src": client_ip(c)} for c in silver_clients]
    elif queue == "dualpi2":
        if silver_clients or steady:
            raise ValueError("policies and the CTV rule are vdq_csaqm's")
        params = DUALPI2 | ({"k": coupling} if coupling is not None else {}) | ({"agent": agent} if agent else {})
    else:
        raise ValueError(f"queue {queue!r}: expected one of {', '.join(QUEUES)}")
    return f'{{ kind = "{queue}", ' + ", ".join(f"{k} = {_toml_value(v)}" for k, v in params.items()) + " }"


def scenario(name: str, description: str, header: str, groups: list[Group], *, daemon_clients: tuple[int, ...] = (),
             client_delay_ms: list[float] | None = None, duration_s: float | None = None,
             tshark: bool = False, k: float | None = None, agent: str | None = None, queue: str = "dualpi2",
             silver_clients: tuple[int, ...] = (), one_way_ms: float = BASE_ONE_WAY_MS, steady: bool = False) -> str:
    n_phases = len(groups[0].counts)
    duration = duration_s if duration_s is not None else n_phases * PHASE_S
    clients = max(g.client for g in groups)
    lines = [header.rstrip(), "# Generated by testbed/l4s/make_scenarios.py (edit the templates there).",
             f'name = "{name}"', f'description = "{description}"', f"duration_s = {duration:g}",
             f"clients = {clients}", "repetitions = 1", "seeds = [1]", "sample_interval_s = 1.0"]
    if daemon_clients:
        lines += ["", "# ccswitchd (shipped DQN policy) on the classic senders only.", "[daemon]",
                  'policy = "dqn"', f"clients = [{', '.join(str(c) for c in daemon_clients)}]"]
    else:
        lines.append("daemon = false")
    what = ("One DualPI2 bottleneck toward the server (Linux sch_dualpi2 defaults, RFC 9332),"
            if queue == "dualpi2" else
            "One VDQ-CSAQM bottleneck toward the server (paper 004 section 3 defaults, C = the link rate;"
            + ("\n# the steady CTV rule, a deviation: linkemu src/qdisc/vdq_steady.rs;" if steady else "")
            + (f"\n# clients {', '.join(map(str, silver_clients))} Silver, the others Gold)," if silver_clients
               else " every flow Gold),"))
    lines += ["", f"# {what}",
              f"# {RATE_MBIT:g} Mbit/s, {2 * one_way_ms:g} ms base RTT.  L4S = DSCP {PRAGUE_DSCP} "
              "(ccswitch's Prague cannot send ECT(1) on this kernel).",
              "[link]", 'emulator = "linkemu"']
    if client_delay_ms is not None:
        lines.append("client_delay_ms = [" + ", ".join(f"{d:g}" for d in client_delay_ms) + "]"
                     "   # extra delay on each client's ACKs")
    lines += ["", "[link.uplink]", f"rate_mbit = {RATE_MBIT:g}", f"delay_ms = {one_way_ms:g}",
              f"qdisc = {qdisc_toml(k, agent, queue, silver_clients, steady)}", "",
              "[link.downlink]               # ACKs: not the bottleneck", f"rate_mbit = {RATE_MBIT:g}",
              f"delay_ms = {one_way_ms:g}", 'qdisc = { kind = "pfifo", limit_pkts = 1000 }']
    for g in groups:
        for j, (start, end) in enumerate(lifetimes(g.counts), 1):
            end = min(end, duration)
            lines += ["", "[[flows]]", f'name = "{g.prefix}{j}"', f"client = {g.client}", f'cca = "{g.cca}"']
            if start > 0:
                lines.append(f"start_s = {start:g}")
            if end - start < duration:
                lines.append(f"duration_s = {end - start:g}")
    lines += ["", "[capture]", f"tshark = {'true' if tshark else 'false'}", "emulator_per_packet = false", ""]
    return "\n".join(lines)


def all_scenarios(queues: tuple[str, ...] = QUEUES) -> dict[str, str]:
    """Every template, for each of *queues* (the DualPI2-only variants only with "dualpi2")."""
    out: dict[str, str] = {}
    dyn_l = tuple(p[0] for p in DYN_PHASES)
    dyn_c = tuple(p[1] for p in DYN_PHASES)
    counts = "; ".join(f"{a}-{b}" for a, b in DYN_PHASES)
    mix = "; ".join(str(c) for c in RTTMIX_PHASES)

    def put(name: str, description: str, head: str, groups: list[Group], **kw: Any) -> None:
        """*name*'s file and, for VDQ-CSAQM, its steady-CTV twin (STEADY_CTV)."""
        out[name] = scenario(name, description, head, groups, **kw)
        if kw.get("queue") == "vdq_csaqm":
            twin = steady_name(name)
            out[twin] = scenario(twin, description + ", steady CTV", head, groups, steady=True, **kw)

    for queue in queues:
        sfx, label = QUEUE_SUFFIX[queue], QUEUE_LABEL[queue]
        for cca in CLASSIC_CCAS:
            groups = [Group(1, "C", cca, dyn_c), Group(2, "L", L4S_CCA, dyn_l)]
            name = f"l4s-dyn-{cca}-vs-prague"
            head = (f"# L4S vs Classic through {label}, equal RTT (paper 004 fig. 3 template, scaled):\n"
                    f"# L4S-Classic flows {counts}, 20 s each.  Client 1: {cca} (classic, C queue),\n"
                    f"# client 2: prague (L4S, L queue).  docs/l4s.md \"## Experiments\".")
            put(name + sfx, f"{cca} vs prague through {label}, L4S-Classic flows {counts}", head, groups,
                queue=queue)
            # The same at 40 ms: paper 004's per-flow window at 50 Mbit/s (SCALED_ONE_WAY_MS).
            scaled = f"{name}-rtt40{sfx}"
            put(scaled, f"{cca} vs prague through {label}, 40 ms base RTT, L4S-Classic flows {counts}",
                head.replace("equal RTT (", f"equal RTT {2 * SCALED_ONE_WAY_MS:g} ms ("), groups, queue=queue,
                one_way_ms=SCALED_ONE_WAY_MS)
            # With ccswitchd on the classic client: host switching combined with each router queue (issue 13).
            out[name + sfx + "-daemon"] = scenario(
                name + sfx + "-daemon", f"{cca} (ccswitchd) vs prague through {label}, L4S-Classic flows {counts}",
                head + "\n# With ccswitchd on the classic client.", groups, daemon_clients=(1,), queue=queue)
            groups = [Group(1, "C5_", cca, RTTMIX_PHASES), Group(2, "L5_", L4S_CCA, RTTMIX_PHASES),
                      Group(3, "C40_", cca, RTTMIX_PHASES), Group(4, "L40_", L4S_CCA, RTTMIX_PHASES)]
            name = f"l4s-rttmix-{cca}-vs-prague"
            head = (f"# L4S vs Classic through {label}, 5 ms / 40 ms RTT mix (paper 004 fig. 4 template, scaled):\n"
                    f"# {mix} flows of each class-RTT pair, 20 s each.  Clients 1/3: {cca} at 5/40 ms,\n"
                    f"# clients 2/4: prague at 5/40 ms.  docs/l4s.md \"## Experiments\".")
            put(name + sfx, f"{cca} vs prague through {label}, 5/40 ms RTT mix, {mix} flows per pair", head, groups,
                client_delay_ms=[0.0, 0.0, LONG_RTT_EXTRA_MS, LONG_RTT_EXTRA_MS], queue=queue)
        name = f"l4s-solo-prague{sfx}"
        head = (f"# One L4S (prague) flow alone through {label} for {SOLO_S:g} s: paper 004's 1-0 phase\n"
                f"# (DualPI2 ~30 %, VDQ-CSAQM 0.8 of 1 Gbit/s with DCTCP).  docs/l4s.md \"Paper 004\".")
        put(name, f"1 prague flow alone through {label}, {SOLO_S:g} s", head, [Group(1, "L", L4S_CCA, (1,))],
            duration_s=SOLO_S, queue=queue)
        name = f"l4s-ccmix-vs-prague{sfx}"
        groups = [Group(1, "L", L4S_CCA, RTTMIX_PHASES)] + [
            Group(i, f"{c.upper()}", c, RTTMIX_PHASES) for i, c in enumerate(CCMIX, 2)]
        head = (f"# Heterogeneous CCAs through {label} (paper 004 figs. 7-8 template, scaled): {mix} flows of\n"
                f"# each of prague (L4S, client 1), {', '.join(CCMIX)} (Classic, clients 2-{len(CCMIX) + 1}), "
                f"20 s each.\n# docs/l4s.md \"Paper 004\".")
        put(name, f"prague + {' + '.join(CCMIX)} through {label}, {mix} flows of each", head, groups,
            queue=queue)
        if queue == "vdq_csaqm":
            name = "l4s-goldsilver-cubic-prague-vdq"
            groups = [Group(1, "CG", "cubic", GOLDSILVER_PHASES["C"]), Group(2, "CS", "cubic", GOLDSILVER_PHASES["C"]),
                      Group(3, "LG", L4S_CCA, GOLDSILVER_PHASES["L"]), Group(4, "LS", L4S_CCA, GOLDSILVER_PHASES["L"])]
            head = ("# Gold and Silver policies through VDQ-CSAQM (paper 004 figs. 5-6, scaled): Gold-Silver\n"
                    "# flows per class: Classic 1-1 (cubic), then L4S 1-1 (prague) too, then L4S only; 20 s each.\n"
                    "# Clients 1/3 Gold, 2/4 Silver.  Silver's TVF step is at 10 Mbit/s: entitled 40:10 (1:4)\n"
                    "# with one flow of each, 1:2 with four flows at 50 Mbit/s.  docs/l4s.md \"Paper 004\".")
            put(name, "Gold vs Silver (cubic, then prague too, then prague) through VDQ-CSAQM", head, groups,
                queue=queue, silver_clients=(2, 4))
            name = "l4s-goldsilver-cubic-prague-rtt40-vdq"
            put(name, "Gold vs Silver through VDQ-CSAQM, 40 ms base RTT", head.replace(
                "(paper 004 figs. 5-6, scaled)", "(paper 004 figs. 5-6, scaled; 40 ms)"), groups, queue=queue,
                silver_clients=(2, 4), one_way_ms=SCALED_ONE_WAY_MS)
    if "dualpi2" not in queues:
        return out
    for k in K_VARIANTS:  # paper 000: k sets the L4S:Classic ratio
        groups = [Group(1, "C", "cubic", dyn_c), Group(2, "L", L4S_CCA, dyn_l)]
        name = f"l4s-dyn-cubic-vs-prague-k{k:g}"
        head = (f"# As l4s-dyn-cubic-vs-prague, with DualPI2's coupling factor k = {k:g} instead of 2\n"
                f"# (paper 000: k sets the L4S:Classic rate ratio).  docs/l4s.md \"## Experiments\".")
        out[name] = scenario(name, f"cubic vs prague through DualPI2 with k = {k:g}, L4S-Classic flows {counts}",
                             head, groups, k=k)
    for cca in A3C_CCAS:  # paper 000's A3C agent sets p' instead of the PI controller
        groups = [Group(1, "C", cca, dyn_c), Group(2, "L", L4S_CCA, dyn_l)]
        name = f"l4s-dyn-{cca}-vs-prague-a3c"
        head = (f"# As l4s-dyn-{cca}-vs-prague, with DualPI2's base probability p' set every 50 ms by paper 000's\n"
                f"# A3C agent (models/dualpi2_a3c.json) instead of the PI controller.  docs/l4s.md \"A3C\".")
        out[name] = scenario(name, f"{cca} vs prague through DualPI2 run by the A3C agent, L4S-Classic flows "
                             f"{counts}", head, groups, agent=A3C_ACTOR)
        if cca not in CLASSIC_CCAS:  # its PI twin (the others have theirs above)
            name = f"l4s-dyn-{cca}-vs-prague"
            twin = (f"# As l4s-dyn-cubic-vs-prague with {cca} as the Classic CCA: the PI twin of\n"
                    f"# l4s-dyn-{cca}-vs-prague-a3c.  docs/l4s.md \"A3C\".")
            out[name] = scenario(name, f"{cca} vs prague through DualPI2, L4S-Classic flows {counts}", twin, groups)
    name = "l4s-pair-cubic-vs-prague-15s"
    head = ("# One cubic and one prague flow through DualPI2 for 15 s (tests/test_l4s.py): the L queue's\n"
            "# sojourn must stay below the C queue's.")
    out[name] = scenario(name, "1 cubic + 1 prague flow through DualPI2, 15 s (test)", head,
                         [Group(1, "C", "cubic", (1,)), Group(2, "L", L4S_CCA, (1,))], duration_s=15.0)
    return out


def write_files(scenarios: dict[str, str], only: set[str]) -> None:
    """Write *scenarios* (all, or the names in *only*) into OUT_DIR, each checked by the scenario parser first."""
    from ccswitch.testbed.scenario import ScenarioError, parse_scenario

    for name, text in scenarios.items():
        if only and name not in only:
            continue
        try:  # only files this checkout's scenario.py accepts (tests load every shipped file)
            parse_scenario(text, f"{name}.toml", base_dir=OUT_DIR)
        except ScenarioError as e:
            print(f"make_scenarios.py: skipped {name}: {e}", file=sys.stderr)
            continue
        path = OUT_DIR / f"{name}.toml"
        path.write_text(text)
        print(path)


def main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("names", nargs="*", help="only these scenario names (default: all)")
    ap.add_argument("--queue", choices=QUEUES, action="append", help="only this router queue's files (repeatable)")
    ap.add_argument("--steady-l4s-gain", type=float, metavar="G",
                    help=f"write the -steady-vdq twins with VQ_0's shallow cut of gain G instead of "
                         f"{STEADY_L4S_GAIN:g} (0 <= G <= 1, 0: without the cut; not the committed files: run "
                         f"without it to restore them)")
    a = ap.parse_args(argv)
    if a.steady_l4s_gain is not None and not 0.0 <= a.steady_l4s_gain <= 1.0:
        ap.error(f"--steady-l4s-gain: must be >= 0 and <= 1 (0: without the cut), got {a.steady_l4s_gain:g}")
    saved = dict(STEADY_CTV)
    try:
        if a.steady_l4s_gain == 0.0:
            del STEADY_CTV["steady_l4s_gain"]
        elif a.steady_l4s_gain is not None:
            STEADY_CTV["steady_l4s_gain"] = a.steady_l4s_gain
        write_files(all_scenarios(tuple(a.queue) if a.queue else QUEUES), set(a.names))
    finally:  # the module's twins stay the committed ones for any caller after this
        STEADY_CTV.clear()
        STEADY_CTV.update(saved)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
