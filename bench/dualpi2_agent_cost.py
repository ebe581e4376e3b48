"""What paper 000's DualPI2 agent costs: its control loop's CPU at a 10 ms interval, side by side with plain DualPI2.

Issue 14's target: the agent's loop costs < 5 % of a core at a 10 ms control interval.
One topology, linkemu's DualPI2 at 50 Mbit/s (the L4S scenarios' queue), two CUBIC
flows through it.  Alternating phases of --seconds each (plain, agent, plain, agent,
...): in a plain phase the PI controller runs alone; in an agent phase
:class:`ccswitch.testbed.runs.dualpi2_agent.AgentLoop` runs the actor every
--interval-ms.  Per phase: the loop thread's CPU time (``time.thread_time`` around its
work: state request, observation, forward pass, set request; the wait in between is
not CPU) and linkemu's CPU time (utime + stime from /proc, which includes serving the
requests), both as % of one core over the phase's wall time.  Printed side by side
with the ratio agent/plain for linkemu, and the verdict against the 5 % target.

    sudo .venv/bin/python bench/dualpi2_agent_cost.py [--actor models/dualpi2_a3c.json] [--seconds 10]
        [--rounds 2] [--interval-ms 10]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from ccswitch.models.dualpi2_actor import load_actor
from ccswitch.testbed.runs.dualpi2_agent import AgentLoop
from ccswitch.testbed.runs.emulator import Emulator, dualpi2, emulator_config, link
from ccswitch.testbed.runs.iperf import IperfFlow, start_server
from ccswitch.testbed.runs.topology import Topology

ROOT = Path(__file__).resolve().parents[1]
RATE = 50.0
TARGET_PCT = 5.0


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--actor", type=Path, default=ROOT / "models" / "dualpi2_a3c.json")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--interval-ms", type=float, default=10.0)
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("dualpi2_agent_cost: needs root (namespaces); rerun with sudo", file=sys.stderr)
        return 2
    actor = load_actor(a.actor)
    tmp = Path(tempfile.mkdtemp(prefix="dualpi2-agent-cost-"))
    sock = tmp / "linkemu.sock"
    rows: list[dict[str, float | str]] = []
    with Topology(2) as topo:
        cfg = emulator_config(topo.client_ifs, topo.server_if, uplink=link(RATE, 5, qdisc=dualpi2()),
                              downlink=link(RATE, 5), control={"socket": str(sock)})
        with Emulator(topo.router, cfg, stats_dir=tmp / "emu") as emu, \
                start_server(topo.server, 5401, bind=topo.server_addr), \
                start_server(topo.server, 5402, bind=topo.server_addr), \
                IperfFlow(topo.clients[0], topo.server_addr, 5401, seconds=3600), \
                IperfFlow(topo.clients[1], topo.server_addr, 5402, seconds=3600):
            assert emu.pid is not None
            time.sleep(2.0)  # past slow start
            for r in range(a.rounds):
                for mode in ("plain", "agent"):
                    loop = None
                    if mode == "agent":
                        loop = AgentLoop(sock, actor, rate_mbit=RATE, interval_s=a.interval_ms / 1000).start()
                    t0, c0 = time.monotonic(), cpu_s(emu.pid)
                    time.sleep(a.seconds)
                    wall, emu_cpu = time.monotonic() - t0, cpu_s(emu.pid) - c0
                    agent_cpu, steps = 0.0, 0
                    if loop is not None:
                        loop.stop()
                        agent_cpu, steps = loop.cpu_s, loop.steps
                        if loop.error:
                            print(f"agent failed: {loop.error}", file=sys.stderr)
                            return 1
                    rows.append({"round": r + 1, "mode": mode, "agent_pct": 100 * agent_cpu / wall,
                                 "linkemu_pct": 100 * emu_cpu / wall, "steps_per_s": steps / wall})
    print(f"DualPI2 agent cost: {RATE:g} Mbit/s, 2 CUBIC flows, interval {a.interval_ms:g} ms, "
          f"{a.rounds} x {a.seconds:g} s per mode, actor {actor.checksum[:19]}..., load {os.getloadavg()[0]:.2f}")
    print(f"{'round':>5} {'mode':>6} {'agent % core':>13} {'linkemu % core':>15} {'steps/s':>8}")
    for row in rows:
        print(f"{row['round']:>5} {row['mode']:>6} {row['agent_pct']:>13.2f} {row['linkemu_pct']:>15.1f} "
              f"{row['steps_per_s']:>8.1f}")
    agent = [float(r["agent_pct"]) for r in rows if r["mode"] == "agent"]
    emu_a = statistics.median(float(r["linkemu_pct"]) for r in rows if r["mode"] == "agent")
    emu_p = statistics.median(float(r["linkemu_pct"]) for r in rows if r["mode"] == "plain")
    worst = max(agent)
    print(f"agent loop: median {statistics.median(agent):.2f} %, worst {worst:.2f} % of a core "
          f"(target < {TARGET_PCT:g} %: {'met' if worst < TARGET_PCT else 'NOT met'}); "
          f"linkemu with agent / plain: {emu_a:.1f} / {emu_p:.1f} % = {emu_a / emu_p:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
