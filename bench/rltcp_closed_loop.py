"""Paper 003's experiment with the loop closed: a remotely controlled flow (RL-TCP or delay-aimd) against
CUBIC, the control traffic crossing the same bottleneck in DualPI2's L queue, its C queue, or a FIFO.

The paper (ns-3) measured the control path's RTT behind a bulk CUBIC flow
(stage 1: 65 ms with FqCoDel + ECT(1) standing in for L4S, 105 ms with a
FIFO) and then ran RL-TCP against CUBIC with its decisions delayed by that
much (stage 2); it never closed the loop.  Here one run is:

* testbed Topology(2) + linkemu in the router: 10 Mbit/s uplink (the paper's
  bottleneck) with DualPI2 (linkemu's defaults, ECN classifier: ECT(1) -> L)
  or a 100-packet FIFO (tail drop), 20 ms each way (base RTT ~40 ms, the
  paper's access links), 100 Mbit/s downlink;
* client 1: one iperf3 flow on the BPF CC ``remote`` and the sender loop
  (``python -m ccswitch.remote.sender``, step 0.1 s, waits up to 0.3 s for
  an answer, kernel deadline 0.5 s so that a FIFO's ~150 ms answers are
  still applied), its requests ECT(1) + DSCP 40 (arm ``l4s``) or classic
  (arms ``classic``, ``fifo``);
* client 2: one CUBIC iperf3 flow, started with it;
* server namespace: both iperf3 receivers and ``ccswitch policy serve
  --agent rl-tcp|delay-aimd`` (2 ms batch window; ``--agent-file`` picks
  the rl-tcp agent file, e.g. models/rltcp_agent_delay.json, and the rows
  are labelled with the reward it was trained for);

so the requests queue at the bottleneck behind both data flows (which are
Not-ECT: DualPI2's C queue).  Per run (``--seconds``, metrics over the last
half): both flows' goodput and mean RTT (iperf3's tcp_info), Jain's index,
the controlled flow's share and retransmits, the control loop's request ->
answer latency p50/p99 and the steps' real period, the share of steps
decided remotely, the kernel's fallbacks, and the uplink queue from
linkemu's 1-s intervals (L queue p90 sojourn, C queue / FIFO mean sojourn).  Each run is one JSON file under
``--out`` (resumable: existing runs are skipped); ``report`` prints the table
and draws the figure.

``--setup paper`` is paper 003's stage 1 as its Table 1 gives it, where the
default set-up (``testbed``) differs: 500 KB socket buffers on both flows
(iperf3 ``-w 500K``), 200-s runs, and in the ``l4s`` arm the controlled
flow's *data* in the L queue too (the paper's RS_1 is a bulk RL-TCP flow
marked ECT(1) whose mean RTT it reports): DualPI2 classifies by DSCP 40
(the data is sent with TOS 0xa0, and client 1 negotiates classic ECN,
``tcp_ecn = 1``, so its ECT(0) packets are CE-marked at the L queue's 1-ms
step instead of dropped; Linux TCP cannot send ECT(1) on data,
docs/l4s-kernel.md), and the ``fqcodel`` arm is the paper's own stand-in
for L4S, linkemu's fq_codel with ECN (Linux defaults: 5 ms / 100 ms).  The
access links' 100 Mbit/s are the veths' (unshaped) and the 10 + 0.01 + 10
ms one way of RS_1's path is linkemu's 20 ms (CUBIC's 9.5-ms access links
are 1 ms shorter each way in the paper).

    sudo .venv/bin/python bench/rltcp_closed_loop.py run [--seeds 3] [--seconds 30] [--out results/rltcp/closed_loop]
        [--agents rl-tcp --agent-file models/rltcp_agent_delay.json] [--setup paper --arms l4s,fqcodel,fifo]
    .venv/bin/python bench/rltcp_closed_loop.py report [--out ...] [--plot docs/figures/rltcp_closed_loop.png]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

RATE, DELAY_MS, PORT = 10.0, 20.0, 7231
STEP_DEADLINE_S, KERNEL_DEADLINE_S = 0.3, 0.5
AGENTS = ("rl-tcp", "delay-aimd")
ARMS = ("l4s", "classic", "fifo", "fqcodel")
ARM_NAMES = {"l4s": "L queue (DualPI2)", "classic": "C queue (DualPI2)", "fifo": "FIFO", "fqcodel": "FQ-CoDel + ECN"}
SETUPS = ("testbed", "paper")
PAPER_SNDBUF = "500K"  # paper 003 Table 1: sender and receiver buffers 500 KB
L4S_DSCP_TOS = 0xA0  # DSCP 40 (the testbed's L4S DSCP), ECN bits left to the kernel
SERVE = [sys.executable, "-c", "from ccswitch.cli import main; main()", "policy", "serve"]
PAPER = {"control_rtt_ms": {"l4s": 65.0, "fifo": 105.0}}


def uplink_queue(arm: str, setup: str) -> dict[str, Any]:
    """The bottleneck's queue of an arm: DualPI2 (ECN classifier, or DSCP 40 in the paper set-up, whose
    controlled data is ECT(0) + DSCP 40), fq_codel with ECN (the paper's L4S stand-in), or a 100-packet FIFO."""
    from ccswitch.testbed.runs.emulator import dualpi2

    if arm in ("l4s", "classic"):
        return dualpi2(classifier="dscp", l_dscp=[40]) if setup == "paper" else dualpi2()
    if arm == "fqcodel":
        return {"kind": "fq_codel", "ecn": True}
    return {"kind": "pfifo", "limit_pkts": 100}


def run_one(agent: str, arm: str, seed: int, seconds: int, key: Path, work: Path,
            agent_file: Path | None = None, setup: str = "testbed") -> dict[str, Any]:
    from ccswitch.bpf.remote import ensure_remote
    from ccswitch.testbed.runs.emulator import Emulator, emulator_config, link
    from ccswitch.testbed.runs.iperf import start_flow, start_server
    from ccswitch.testbed.runs.netns import popen_in, run_in, stop_process, wait_for_stderr
    from ccswitch.testbed.runs.topology import Topology

    steps = work / f"steps-{agent}-{arm}-{seed}.jsonl"
    steps.unlink(missing_ok=True)
    l4s = ["--l4s"] if arm == "l4s" else []
    file_arg = ["--agent-file", str(agent_file)] if agent_file is not None and agent == "rl-tcp" else []
    uplink = link(RATE, DELAY_MS, qdisc=uplink_queue(arm, setup))
    paper = setup == "paper"
    bufs = ["-w", PAPER_SNDBUF] if paper else []
    # the paper's RS_1 is itself L4S: its data in the L queue (DSCP 40) with ECN to carry the marks
    data_l4s = paper and arm == "l4s"
    h = ensure_remote()
    try:
        h.configure(KERNEL_DEADLINE_S)
        with Topology(2) as topo:
            cfg = emulator_config(topo.client_ifs, topo.server_if, uplink=uplink,
                                  downlink=link(100.0, DELAY_MS, limit_pkts=1000), seed=seed, interval_ms=1000)
            with Emulator(topo.router, cfg, stats_dir=work / f"emu-{agent}-{arm}-{seed}") as emu, \
                    start_server(topo.server, 5701, bind=topo.server_addr), \
                    start_server(topo.server, 5702, bind=topo.server_addr):
                srv = popen_in(topo.server, [*SERVE, "--listen", f"{topo.server_addr}:{PORT}", "--key", str(key),
                                             "--no-cca", "--agent", agent, *l4s, *file_arg],
                             stderr=subprocess.PIPE)
                ctl = None
                try:
                    wait_for_stderr(srv, b"listening on", timeout_s=40.0)
                    ctl = popen_in(topo.clients[0], [
                        sys.executable, "-m", "ccswitch.remote.sender", "--server", f"{topo.server_addr}:{PORT}",
                        "--key", str(key), "--local", "none", "--deadline", str(STEP_DEADLINE_S),
                        "--kernel-deadline", str(KERNEL_DEADLINE_S), *l4s, "--log", str(steps)],
                        stderr=subprocess.PIPE)
                    wait_for_stderr(ctl, b"controlling", timeout_s=40.0)
                    if data_l4s or (paper and arm == "fqcodel"):
                        run_in(topo.clients[0], ["sysctl", "-qw", "net.ipv4.tcp_ecn=1"])
                    tos = ["-S", str(L4S_DSCP_TOS)] if data_l4s else []
                    remote = start_flow(topo.clients[0], topo.server_addr, 5701, cca="remote", seconds=seconds,
                                        extra_args=[*bufs, *tos])
                    cubic = start_flow(topo.clients[1], topo.server_addr, 5702, cca="cubic", seconds=seconds,
                                       extra_args=bufs)
                    res = [remote.wait(timeout=seconds + 60), cubic.wait(timeout=seconds + 60)]
                finally:
                    if ctl is not None:
                        stop_process(ctl, 5.0)
                    stop_process(srv, 5.0)
            summary = emu.summary
    finally:
        h.close()
    return metrics(res, steps, seconds, summary)


def metrics(res: list[Any], steps: Path, seconds: int, emu: dict[str, Any]) -> dict[str, Any]:
    from ccswitch.metrics import jain_index

    half = [[iv for iv in r.intervals if iv.start >= seconds / 2] for r in res]
    mbit = [statistics.fmean(iv.bits_per_second for iv in h) / 1e6 for h in half]
    rtt = [mean_rtt_ms(h) for h in half]
    # the paper's number: the controlled flow's mean RTT over the run (after a 5-s start-up)
    rtt_run = mean_rtt_ms([iv for iv in res[0].intervals if iv.start >= 5])
    lines = [json.loads(line) for line in steps.read_text().splitlines()]
    active = [s for s in lines if s.get("flows")]
    t0 = active[0]["t"] if active else 0.0
    late = [s for s in active if s["t"] - t0 >= seconds / 2]
    loop = [s["rtt_ms"] for s in active if s.get("remote") and s.get("rtt_ms") is not None]
    period = np.diff([s["t"] for s in active]) * 1000 if len(active) > 1 else np.array([float("nan")])
    cwnd = [max(s["obs"], key=lambda o: o["acked"])["cwnd"] for s in late]  # the data socket's
    fallbacks = max((o["fallbacks"] for s in active for o in s["obs"]), default=0)  # the kernel's count
    return {
        "remote_mbit": mbit[0], "cubic_mbit": mbit[1], "share": mbit[0] / max(sum(mbit), 1e-9),
        "jain": jain_index(mbit), "remote_rtt_ms": rtt[0], "cubic_rtt_ms": rtt[1], "remote_rtt_run_ms": rtt_run,
        "remote_retrans": sum(iv.retransmits or 0 for iv in half[0]),
        "cubic_retrans": sum(iv.retransmits or 0 for iv in half[1]),
        "remote_cwnd_p50": float(np.median(cwnd)) if cwnd else None,
        "loop_p50_ms": float(np.percentile(loop, 50)) if loop else None,
        "loop_p99_ms": float(np.percentile(loop, 99)) if loop else None,
        "loop_n": len(loop), "remote_steps": sum(bool(s["remote"]) for s in active) / max(len(active), 1),
        "step_period_p50_ms": float(np.median(period)), "kernel_fallbacks": fallbacks,
        "uplink": {k: v for k, v in emu.get("uplink", {}).items() if isinstance(v, int | float)},
    }


def mean_rtt_ms(intervals: list[Any]) -> float | None:
    """Mean of iperf3's per-interval smoothed RTT (tcp_info), ms; None when no interval has one."""
    xs = [iv.rtt_us for iv in intervals if iv.rtt_us]
    return statistics.fmean(xs) / 1000 if xs else None


def label(agent: str, agent_file: Path | None) -> str:
    """The table's name of an agent: rl-tcp's carries the reward its file was trained for, if not the paper's."""
    if agent != "rl-tcp" or agent_file is None:
        return agent
    from ccswitch.models.rltcp_agent import load_agent

    rew = load_agent(agent_file).reward
    return agent if rew == "paper" else f"{agent} ({rew} reward)"


def run_all(out: Path, seeds: int, seconds: int, agents: list[str], arms: list[str],
            agent_file: Path | None = None, setup: str = "testbed") -> None:
    out.mkdir(parents=True, exist_ok=True)
    names = {a: label(a, agent_file) for a in agents}
    from ccswitch.remote.protocol import write_key

    with tempfile.TemporaryDirectory() as tmp_s:
        key = Path(tmp_s) / "key"
        write_key(key)
        for seed in range(1, seeds + 1):  # seed-major: a cut-short run still has every arm once
            for arm in arms:
                for agent in agents:
                    dest = out / f"{agent}-{arm}-{seed}.json"
                    if dest.exists():
                        continue
                    t = time.monotonic()
                    r = run_one(agent, arm, seed, seconds, key, out, agent_file, setup)
                    r.update(agent=agent, label=names[agent], setup=setup,
                             agent_file=str(agent_file) if agent_file and agent == "rl-tcp" else None,
                             arm=arm, seed=seed, seconds=seconds, wall_s=round(time.monotonic() - t, 1),
                             load1=os.getloadavg()[0])
                    dest.write_text(json.dumps(r, indent=1) + "\n")
                    print(json.dumps({k: v for k, v in r.items() if k != "uplink"}), flush=True)


def queue_sojourn(stats: Path) -> dict[str, float | None]:
    """The uplink queue from linkemu's 1-s intervals after the first 5 s: medians over the intervals of the
    L queue's p90 sojourn (intervals that carried L packets), and of the mean sojourn (C queue or FIFO)."""
    import csv

    with open(stats / "intervals.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["direction"] == "uplink" and r["client"] == "-1"
                and float(r["t_s"]) > 5]
    l90 = [float(r["l_sojourn_p90_us"]) / 1000 for r in rows if r.get("l_bytes_out") and float(r["l_bytes_out"]) > 0]
    mean = [float(r["c_sojourn_mean_us"] or r["sojourn_mean_us"]) / 1000 if r.get("c_bytes_out") not in (None, "")
            and float(r["c_bytes_out"]) > 0 else float(r["sojourn_mean_us"]) / 1000 for r in rows]
    return {"l_sojourn_p90_ms": statistics.median(l90) if l90 else None,
            "queue_sojourn_mean_ms": statistics.median(mean) if mean else None}


def load(out: Path) -> list[dict[str, Any]]:
    runs = [json.loads(p.read_text()) for p in sorted(out.glob("*-*-*.json"))]
    for r in runs:
        stats = out / f"emu-{r['agent']}-{r['arm']}-{r['seed']}"
        if "l_sojourn_p90_ms" not in r and (stats / "intervals.csv").exists():
            r.update(queue_sojourn(stats))
    return runs


def fmt(xs: list[float | None], f: str = ".1f") -> str:
    xs = [x for x in xs if x is not None]
    if not xs:
        return "-"
    return f"{statistics.fmean(xs):{f}} ({min(xs):{f}}-{max(xs):{f}})" if len(xs) > 1 else f"{xs[0]:{f}}"


def labels(runs: list[dict[str, Any]]) -> list[str]:
    """The agents' row labels in table order (runs before --agent-file have none: their agent's name)."""
    for r in runs:
        r.setdefault("label", r["agent"])
    return sorted({r["label"] for r in runs}, key=lambda n: (AGENTS.index(n.split(" ")[0]), n))


def arms_run(runs: list[dict[str, Any]]) -> list[str]:
    """The arms present in *runs*, in ARMS order."""
    return [a for a in ARMS if any(r["arm"] == a for r in runs)]


def paper_ratios(runs: list[dict[str, Any]]) -> None:
    """Paper 003 Table 2 beside ours: the controlled flow's mean RTT over the run per arm, and its ratio to
    the FIFO's (the paper: 65 / 105 ms = 0.62 with FqCoDel + ECT(1) standing in for L4S)."""
    for agent in labels(runs):
        mean = {a: statistics.fmean(xs) for a in arms_run(runs)
                if (xs := [r["remote_rtt_run_ms"] for r in runs if r["label"] == agent and r["arm"] == a
                           and r.get("remote_rtt_run_ms")])}
        if "fifo" not in mean:
            continue
        cells = ", ".join(f"{ARM_NAMES[a]} {m:.1f} ms" + ("" if a == "fifo" else f" (/ FIFO {m / mean['fifo']:.2f})")
                          for a, m in mean.items())
        print(f"\n{agent}: controlled flow's mean RTT over the run: {cells}; "
              f"paper 003: L4S 65 ms / FIFO 105 ms = 0.62")


def report(out: Path, plot: Path | None) -> None:
    runs = load(out)
    # the paper set-up sends the controlled flow's data through the queue named, not only its control traffic
    queue = "queue (flow and control)" if any(r.get("setup") == "paper" for r in runs) else "control traffic"
    print(f"| agent | {queue} | seeds | controlled Mbit/s | CUBIC Mbit/s | share | controlled RTT ms | "
          "controlled RTT, run ms | CUBIC RTT ms | loop p50 ms | loop p99 ms | step period ms | remote steps | "
          "fallbacks | L queue p90 ms | C queue / FIFO sojourn ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for agent in labels(runs):
        for arm in ARMS:
            rs = [r for r in runs if r["label"] == agent and r["arm"] == arm]
            if not rs:
                continue
            print(f"| {agent} | {ARM_NAMES[arm]} | {len(rs)} | {fmt([r['remote_mbit'] for r in rs], '.2f')} | "
                  f"{fmt([r['cubic_mbit'] for r in rs], '.2f')} | {fmt([r['share'] for r in rs], '.2f')} | "
                  f"{fmt([r['remote_rtt_ms'] for r in rs])} | {fmt([r.get('remote_rtt_run_ms') for r in rs])} | "
                  f"{fmt([r['cubic_rtt_ms'] for r in rs])} | "
                  f"{fmt([r['loop_p50_ms'] for r in rs])} | {fmt([r['loop_p99_ms'] for r in rs])} | "
                  f"{fmt([r['step_period_p50_ms'] for r in rs], '.0f')} | "
                  f"{fmt([100 * r['remote_steps'] for r in rs], '.0f')} % | "
                  f"{sum(r['kernel_fallbacks'] for r in rs)} | "
                  f"{fmt([r.get('l_sojourn_p90_ms') for r in rs], '.2f')} | "
                  f"{fmt([r.get('queue_sojourn_mean_ms') for r in rs])} |")
    paper_ratios(runs)
    if plot is not None and runs:
        draw(runs, plot)
        print(f"wrote {plot}")


def draw(runs: list[dict[str, Any]], dest: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2))
    arms = arms_run(runs)
    x = np.arange(len(arms))
    names = labels(runs)
    # the paper's set-up compares its Table 2 with the controlled flow's RTT over the run, not the loop's
    paper_setup = any(r.get("setup") == "paper" for r in runs)
    rtt_key = "remote_rtt_run_ms" if paper_setup else "remote_rtt_ms"
    palette = ("tab:purple", "tab:green", "tab:orange", "tab:blue")
    colors = {n: palette[i % len(palette)] for i, n in enumerate(names)}
    width = 0.76 / max(len(names), 1)
    for j, agent in enumerate(names):
        off = (j - (len(names) - 1) / 2) * width
        for i, arm in enumerate(arms):
            rs = [r for r in runs if r["label"] == agent and r["arm"] == arm]
            if not rs:
                continue
            ctl = [r["remote_mbit"] for r in rs]
            cub = [r["cubic_mbit"] for r in rs]
            axes[0].bar(x[i] + off, np.mean(ctl), width, color=colors[agent], label=agent if i == 0 else None)
            axes[0].bar(x[i] + off, np.mean(cub), width, bottom=np.mean(ctl), color=colors[agent], alpha=0.3,
                        label=f"CUBIC vs {agent}" if i == 0 else None)
            axes[0].plot([x[i] + off] * len(ctl), ctl, "k.", ms=4)
            rtt = [r[rtt_key] for r in rs if r.get(rtt_key)]
            axes[1].bar(x[i] + off, np.mean(rtt), width, color=colors[agent], label=agent if i == 0 else None)
            axes[1].plot([x[i] + off] * len(rtt), rtt, "k.", ms=4)
            p50 = [r["loop_p50_ms"] for r in rs if r["loop_p50_ms"] is not None]
            p99 = [r["loop_p99_ms"] for r in rs if r["loop_p99_ms"] is not None]
            axes[2].bar(x[i] + off, np.mean(p50), width, color=colors[agent], label=f"{agent} p50" if i == 0 else None)
            axes[2].plot([x[i] + off] * len(p99), p99, "v", color=colors[agent], ms=5,
                         label=f"{agent} p99" if i == 0 else None)
    paper_ax = axes[1] if paper_setup else axes[2]
    paper_ms = {**PAPER["control_rtt_ms"], "fqcodel": PAPER["control_rtt_ms"]["l4s"]}
    for i, arm in enumerate(arms):
        if arm in paper_ms:
            paper_ax.hlines(paper_ms[arm], x[i] - 0.45, x[i] + 0.45, colors="red", linestyles="--",
                            label="paper 003 (ns-3, stage 1)" if i == min(j for j, a in enumerate(arms)
                                                                          if a in paper_ms) else None)
    what = "flow" if paper_setup else "control"
    tick = {"l4s": f"{what} in\nL queue", "classic": f"{what} in\nC queue", "fifo": "FIFO\n(100 pkts)",
            "fqcodel": "FQ-CoDel\n+ ECN"}
    ticks = [tick[a] for a in arms]
    rtt_title = "controlled flow's mean RTT, run (ms)" if paper_setup else "controlled flow's RTT, last half (ms)"
    for ax, title in zip(axes, ("goodput, last half (Mbit/s):\ncontrolled flow + CUBIC stacked",
                                rtt_title, "control loop request -> answer (ms)"),
                         strict=True):
        ax.set_xticks(x, ticks)
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=7, loc="upper center", ncol=2)
        ax.set_ylim(0, ax.get_ylim()[1] * 1.35)  # room for the legend above the bars and markers
    axes[0].axhline(RATE, color="gray", lw=0.5)
    setup = ("paper 003's set-up: 500 KB buffers, 200 s, the flow's data in the queue named" if paper_setup
             else "the control traffic in the queue named")
    fig.suptitle("Paper 003 closed loop: remote cwnd control vs one CUBIC flow, 10 Mbit/s, 40 ms;\n"
                 f"{setup} (dots, triangles: seeds)", fontsize=11)
    fig.tight_layout()
    dest.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(dest, dpi=100)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cmd", choices=("run", "report"))
    ap.add_argument("--out", type=Path, default=Path("results/rltcp/closed_loop"))
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--seconds", type=int, help="run length (default: 30; the paper set-up: 200)")
    ap.add_argument("--agents", default=",".join(AGENTS))
    ap.add_argument("--arms", help="comma-separated, of " + ",".join(ARMS)
                    + " (default: l4s,classic,fifo; the paper set-up: l4s,fqcodel,fifo)")
    ap.add_argument("--setup", choices=SETUPS, default="testbed",
                    help="paper: paper 003 Table 1's buffers and length, its flow's data in the L queue")
    ap.add_argument("--plot", type=Path, help="report: write the figure here")
    ap.add_argument("--agent-file", type=Path, help="run: the rl-tcp agent file (default: the shipped one)")
    args = ap.parse_args()
    paper = args.setup == "paper"
    seconds = args.seconds or (200 if paper else 30)
    agents = args.agents.split(",")
    arms = (args.arms or ("l4s,fqcodel,fifo" if paper else "l4s,classic,fifo")).split(",")
    bad = [a for a in agents if a not in AGENTS] + [a for a in arms if a not in ARMS]
    if bad or args.seeds < 1 or seconds < 10:
        print(f"rltcp_closed_loop: error: bad agents/arms {bad} or --seeds < 1 or --seconds < 10", file=sys.stderr)
        return 2
    if args.cmd == "run":
        run_all(args.out, args.seeds, seconds, agents, arms, args.agent_file, args.setup)
    report(args.out, args.plot if args.cmd == "report" else None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
