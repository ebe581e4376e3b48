"""Paper 003's second stage on the testbed: a remotely controlled flow against CUBIC with 0, 65 and 105 ms
of control latency.

As in the paper, the control path is emulated by a delay: the policy server
(delay-aimd agent by default; `--agent rl-tcp [--agent-file FILE]` as
`ccswitch policy serve` takes them, rl-tcp's default file the shipped
models/rltcp_agent_delay.json) runs on 127.0.0.1 in the controlled client's namespace and
holds every answer --added ms (0, 65 = the paper's L4S control RTT, 105 = its
FIFO one) before sending it (`ccswitch policy serve --added-latency-ms`).
Client 1 sends one iperf3 flow on `remote` (sender loop: step 0.1 s, wait up
to 0.3 s for the answer, kernel deadline 0.5 s so that 105 ms stays fresh);
client 2 one CUBIC flow; both to the server through linkemu: 10 Mbit/s both
ways (the paper's bottleneck), 20 ms each way, a 100-packet pfifo uplink
(tail drop, as the paper's stage 2).  Printed per added latency and seed: each
flow's goodput over the last half, Jain's index, the remote flow's cwnd and
srtt (medians), the share of steps decided remotely and the kernel's fallbacks.

    sudo .venv/bin/python bench/remote_added_latency.py [--seconds 30] [--seeds 1] [--added 0,65,105]
        [--agent delay-aimd|rl-tcp] [--agent-file FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NoReturn

import numpy as np

from ccswitch.bpf.remote import ensure_remote
from ccswitch.metrics import jain_index
from ccswitch.remote.agents import CWND_AGENTS, FILE_AGENTS, cwnd_agent
from ccswitch.remote.protocol import write_key
from ccswitch.testbed.runs.emulator import Emulator, emulator_config, link
from ccswitch.testbed.runs.iperf import start_flow, start_server
from ccswitch.testbed.runs.netns import popen_in, run_in, stop_process
from ccswitch.testbed.runs.topology import Topology

RATE, DELAY_MS, PORT, KERNEL_DEADLINE_S = 10.0, 20.0, 7201, 0.5
SERVE = [sys.executable, "-c", "from ccswitch.cli import main; main()", "policy", "serve"]


def run(added_ms: float, seconds: int, seed: int, tmp: Path, agent: str = "delay-aimd",
        agent_file: Path | None = None) -> dict[str, float]:
    key = tmp / "key"
    steps = tmp / f"steps-{added_ms:g}-{seed}.jsonl"
    samples: list[tuple[int, int]] = []
    h = ensure_remote()
    try:
        h.configure(KERNEL_DEADLINE_S)
        with Topology(2) as topo:
            ctl_ns = topo.clients[0]
            run_in(ctl_ns, ["ip", "link", "set", "lo", "up"])
            cfg = emulator_config(topo.client_ifs, topo.server_if, uplink=link(RATE, DELAY_MS, limit_pkts=100),
                                  downlink=link(RATE, DELAY_MS, limit_pkts=1000), seed=seed, interval_ms=1000)
            with Emulator(topo.router, cfg, stats_dir=tmp / f"emu-{added_ms:g}-{seed}"), \
                    start_server(topo.server, 5601, bind=topo.server_addr), \
                    start_server(topo.server, 5602, bind=topo.server_addr):
                srv = popen_in(ctl_ns, [*SERVE, "--listen", f"127.0.0.1:{PORT}", "--key", str(key), "--no-cca",
                                        "--added-latency-ms", str(added_ms), "--deadline-ms", "1000", "--agent", agent,
                                        *(["--agent-file", str(agent_file)] if agent_file is not None else [])],
                               stderr=subprocess.PIPE, text=True)
                ctl = None
                try:
                    assert srv.stderr is not None and "listening" in srv.stderr.readline()
                    remote = start_flow(ctl_ns, topo.server_addr, 5601, cca="remote", seconds=seconds)
                    cubic = start_flow(topo.clients[1], topo.server_addr, 5602, cca="cubic", seconds=seconds)
                    ctl = popen_in(ctl_ns, [sys.executable, "-m", "ccswitch.remote.sender", "--server",
                                            f"127.0.0.1:{PORT}", "--key", str(key), "--local", "none",
                                            "--deadline", "0.3", "--kernel-deadline", str(KERNEL_DEADLINE_S),
                                            "--log", str(steps)], stderr=subprocess.DEVNULL)
                    t0 = time.monotonic()
                    while time.monotonic() - t0 < seconds - 0.5:
                        obs = h.observations()
                        if len(obs) and time.monotonic() - t0 > seconds / 2:
                            o = obs[np.argmax(obs["delivered"])]
                            samples.append((int(o["cwnd"]), int(o["srtt_us"])))
                        time.sleep(0.2)
                    fallbacks = int(max(h.observations()["fallbacks"], default=0))
                    res = [remote.wait(timeout=seconds + 30), cubic.wait(timeout=seconds + 30)]
                finally:
                    if ctl is not None:
                        stop_process(ctl, 5.0)
                    stop_process(srv, 2.0)
    finally:
        h.close()
    half = [statistics.fmean(iv.bits_per_second for iv in r.intervals[seconds // 2:]) / 1e6 for r in res]
    lines = [json.loads(line) for line in steps.read_text().splitlines()]
    active = [s for s in lines if s.get("flows")]
    return {"remote": half[0], "cubic": half[1], "jain": jain_index(half),
            "cwnd": statistics.median(s[0] for s in samples) if samples else float("nan"),
            "srtt": statistics.median(s[1] for s in samples) / 1000 if samples else float("nan"),
            "remote_steps": sum(s["remote"] for s in active) / max(len(active), 1), "fallbacks": fallbacks}


class _Parser(argparse.ArgumentParser):
    """argparse with its errors on one line (no usage block)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The options, checked before any kernel or namespace work: bad values exit 2 with one line.

    --agent / --agent-file are those of `ccswitch policy serve`; the agent is loaded here once so
    that a bad name or file fails now, not in the server of the first run.  Adds `added` (floats)
    and `label` (the agent as the header names it)."""
    ap = _Parser(prog="remote_added_latency.py", description=" ".join((__doc__ or "").split("\n\n")[0].split()))
    ap.add_argument("--seconds", type=int, default=30)
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--added", default="0,65,105", help="added control latencies, ms")
    ap.add_argument("--agent", default="delay-aimd", metavar="|".join(CWND_AGENTS),
                    help="cwnd agent of the policy server (`ccswitch policy serve --agent`; default delay-aimd)")
    ap.add_argument("--agent-file", type=Path, metavar="FILE",
                    help=f"agent file for {', '.join(FILE_AGENTS)} (`ccswitch policy serve --agent-file`; "
                         "default: the shipped models/rltcp_agent_delay.json)")
    args = ap.parse_args(argv)
    if args.seconds < 4:
        ap.error(f"--seconds {args.seconds}: at least 4")
    if args.seeds < 1:
        ap.error(f"--seeds {args.seeds}: at least 1")
    try:
        args.added = [float(a) for a in args.added.split(",")]
    except ValueError:
        ap.error(f"--added {args.added!r}: comma-separated numbers of ms, e.g. 0,65,105")
    if not all(0 <= a <= 10000 for a in args.added):
        ap.error(f"--added {','.join(f'{a:g}' for a in args.added)}: each in 0..10000 ms")
    if args.agent_file is not None:
        args.agent_file = args.agent_file.resolve()  # the server runs in a namespace, maybe another cwd
    try:
        loaded = cwnd_agent(args.agent, args.agent_file)
    except ValueError as e:
        ap.error(str(e).replace("\n", " "))
    if args.agent in FILE_AGENTS:
        from ccswitch.models.rltcp_agent import DEFAULT_AGENT

        args.label = f"{args.agent}, {loaded.reward} reward, {(args.agent_file or DEFAULT_AGENT).name}"
    else:
        args.label = args.agent
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        write_key(tmp / "key")
        print(f"remote ({args.label}) vs CUBIC, {RATE:g} Mbit/s, {2 * DELAY_MS:g} ms base RTT, 100-packet FIFO, "
              f"{args.seconds} s, metrics over the last half")
        print(f"{'added ms':>8} {'seed':>4} {'remote Mbit/s':>13} {'CUBIC Mbit/s':>12} {'Jain':>5} {'cwnd':>5} "
              f"{'srtt ms':>7} {'remote steps':>12} {'fallbacks':>9}")
        for added in args.added:
            for seed in range(1, args.seeds + 1):
                r = run(added, args.seconds, seed, tmp, args.agent, args.agent_file)
                print(f"{added:>8g} {seed:>4} {r['remote']:>13.2f} {r['cubic']:>12.2f} {r['jain']:>5.2f} "
                      f"{r['cwnd']:>5.0f} {r['srtt']:>7.1f} {r['remote_steps']:>12.0%} {r['fallbacks']:>9}",
                      flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
