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
class (and RTT), several flows per client.  ``*-daemon`` variants run ccswitchd
(the shipped DQN policy) on the classic client only.

    .venv/bin/python testbed/l4s/make_scenarios.py        # rewrites the files

Every parameter of the bottleneck is written out in the files (defaults of
Linux sch_dualpi2 / RFC 9332), so that ``dualpi2-router.sh --scenario`` gives
a real router exactly the same AQM.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

OUT_DIR = Path(__file__).resolve().parents[1] / "scenarios"
RATE_MBIT = 50.0
PHASE_S = 20.0
BASE_ONE_WAY_MS = 2.5
"""Uplink + downlink delay = 5 ms RTT (paper 004's base RTT)."""
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


A3C_ACTOR = "../../models/dualpi2_a3c.json"
"""Paper 000's trained actor, relative to testbed/scenarios/ (the ``-a3c`` variants)."""
A3C_CCAS = ("cubic", "reno")
"""Classic CCAs of the ``-a3c`` variants (the agent against the PI controller, docs/l4s.md "A3C")."""


def qdisc_toml(coupling: float | None = None, agent: str | None = None) -> str:
    parts = []
    params = DUALPI2 | ({"k": coupling} if coupling is not None else {}) | ({"agent": agent} if agent else {})
    for k, v in params.items():
        if isinstance(v, bool):
            s = "true" if v else "false"
        elif isinstance(v, str):
            s = f'"{v}"'
        elif isinstance(v, list):
            s = "[" + ", ".join(str(x) for x in v) + "]"
        else:
            s = f"{v:g}"
        parts.append(f"{k} = {s}")
    return '{ kind = "dualpi2", ' + ", ".join(parts) + " }"


def scenario(name: str, description: str, header: str, groups: list[Group], *, daemon_clients: tuple[int, ...] = (),
             client_delay_ms: list[float] | None = None, duration_s: float | None = None,
             tshark: bool = False, k: float | None = None, agent: str | None = None) -> str:
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
    lines += ["", "# One DualPI2 bottleneck toward the server (Linux sch_dualpi2 defaults, RFC 9332),",
              f"# {RATE_MBIT:g} Mbit/s, {2 * BASE_ONE_WAY_MS:g} ms base RTT.  L4S = DSCP {PRAGUE_DSCP} "
              "(ccswitch's Prague cannot send ECT(1) on this kernel).",
              "[link]", 'emulator = "linkemu"']
    if client_delay_ms is not None:
        lines.append("client_delay_ms = [" + ", ".join(f"{d:g}" for d in client_delay_ms) + "]"
                     "   # extra delay on each client's ACKs")
    lines += ["", "[link.uplink]", f"rate_mbit = {RATE_MBIT:g}", f"delay_ms = {BASE_ONE_WAY_MS:g}",
              f"qdisc = {qdisc_toml(k, agent)}", "",
              "[link.downlink]               # ACKs: not the bottleneck", f"rate_mbit = {RATE_MBIT:g}",
              f"delay_ms = {BASE_ONE_WAY_MS:g}", 'qdisc = { kind = "pfifo", limit_pkts = 1000 }']
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


def all_scenarios() -> dict[str, str]:
    out: dict[str, str] = {}
    dyn_l = tuple(p[0] for p in DYN_PHASES)
    dyn_c = tuple(p[1] for p in DYN_PHASES)
    counts = "; ".join(f"{a}-{b}" for a, b in DYN_PHASES)
    for cca in CLASSIC_CCAS:
        groups = [Group(1, "C", cca, dyn_c), Group(2, "L", L4S_CCA, dyn_l)]
        name = f"l4s-dyn-{cca}-vs-prague"
        head = (f"# L4S vs Classic through DualPI2, equal RTT (paper 004 fig. 3 template, scaled):\n"
                f"# L4S-Classic flows {counts}, 20 s each.  Client 1: {cca} (classic, C queue),\n"
                f"# client 2: prague (L4S, L queue).  docs/l4s.md \"## Experiments\".")
        out[name] = scenario(name, f"{cca} vs prague through DualPI2, L4S-Classic flows {counts}", head, groups)
        out[name + "-daemon"] = scenario(
            name + "-daemon", f"{cca} (ccswitchd) vs prague through DualPI2, L4S-Classic flows {counts}",
            head + "\n# With ccswitchd on the classic client.", groups, daemon_clients=(1,))
        mix = "; ".join(str(c) for c in RTTMIX_PHASES)
        groups = [Group(1, "C5_", cca, RTTMIX_PHASES), Group(2, "L5_", L4S_CCA, RTTMIX_PHASES),
                  Group(3, "C40_", cca, RTTMIX_PHASES), Group(4, "L40_", L4S_CCA, RTTMIX_PHASES)]
        name = f"l4s-rttmix-{cca}-vs-prague"
        head = (f"# L4S vs Classic through DualPI2, 5 ms / 40 ms RTT mix (paper 004 fig. 4 template, scaled):\n"
                f"# {mix} flows of each class-RTT pair, 20 s each.  Clients 1/3: {cca} at 5/40 ms,\n"
                f"# clients 2/4: prague at 5/40 ms.  docs/l4s.md \"## Experiments\".")
        out[name] = scenario(name, f"{cca} vs prague through DualPI2, 5/40 ms RTT mix, {mix} flows per pair",
                             head, groups, client_delay_ms=[0.0, 0.0, LONG_RTT_EXTRA_MS, LONG_RTT_EXTRA_MS])
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


def main(argv: list[str]) -> int:
    from ccswitch.testbed.scenario import ScenarioError, parse_scenario

    only = set(argv)
    for name, text in all_scenarios().items():
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
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
