"""Paper 003's first question on the testbed: the control loop's RTT with its traffic in the L4S queue
of a DualPI2 bottleneck vs the classic queue vs a FIFO, behind a bulk CUBIC flow.

Topology (testbed Topology(2) + linkemu in the router): client 1 sends one
bulk CUBIC flow (iperf3) to the server; client 2 (the weak device) asks the
policy server in the server's namespace for a cwnd decision every 0.1 s
(RL-TCP's step; PolicyClient, 1-flow CWND_REQ, server batch window 0 so the
network is measured, deadline 1 s).  Both directions 10 Mbit/s (the paper's
bottleneck) with 20 ms one-way delay (the paper's ~10 + 9.5 ms access
links), so the base RTT is ~40 ms.  Uplink queue: DualPI2 (linkemu's
defaults: ECN classifier, 15 ms classic target, 1 ms L step) or a 100-packet
pfifo (ns-3's default queue); downlink a pfifo.  Control traffic: L4S
(ECT(1) + DSCP 40) or classic (TOS 0).  Printed per arm: request->answer
RTT mean/p50/p90/p99 (n answered, lost = unanswered within 1 s), CUBIC's
goodput, the uplink queue's sojourn (mean and p99 of all packets, and the L
queue's p90 for DualPI2; medians over linkemu's 0.5-s intervals);
then the paper's ratio, RTT(L4S via DualPI2) / RTT(classic via FIFO)
(paper 003 Table 2: 65 / 105 ms = 0.62 with FqCoDel standing in for DualPI2).

    sudo .venv/bin/python bench/remote_l4s_control.py [--seconds 20]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from ccswitch.remote import protocol as p
from ccswitch.remote.client import L4S_TOS, PolicyClient
from ccswitch.testbed.runs.emulator import Emulator, dualpi2, emulator_config, link
from ccswitch.testbed.runs.iperf import start_flow, start_server
from ccswitch.testbed.runs.netns import entered, popen_in, stop_process
from ccswitch.testbed.runs.topology import Topology

RATE, DELAY_MS, WARMUP_S, STEP_S = 10.0, 20.0, 3.0, 0.1
PORT, IPERF_PORT = 7191, 5491
QUEUES = {"dualpi2": dualpi2(), "fifo": {"kind": "pfifo", "limit_pkts": 100}}


def one_obs() -> np.ndarray:
    obs = np.zeros(1, dtype=p.CWND_OBS)
    obs["cookie"], obs["step_us"], obs["cwnd"], obs["mss"], obs["srtt_us"] = 1, 100_000, 20, 1448, 40_000
    return obs


def arm(queue: str, control: str, seconds: float, key: Path, stats_dir: Path) -> dict[str, float]:
    rtts: list[float] = []
    with Topology(2) as topo:
        cfg = emulator_config(topo.client_ifs, topo.server_if, uplink=link(RATE, DELAY_MS, qdisc=QUEUES[queue]),
                              downlink=link(RATE, DELAY_MS, limit_pkts=1000), interval_ms=500)
        with Emulator(topo.router, cfg, stats_dir=stats_dir) as emu, \
                start_server(topo.server, IPERF_PORT, bind=topo.server_addr):
            srv = popen_in(topo.server, [sys.executable, "-c", "from ccswitch.cli import main; main()", "policy",
                                         "serve", "--listen", f"{topo.server_addr}:{PORT}", "--key", str(key),
                                         "--no-cca", "--batch-ms", "0"], stderr=subprocess.PIPE, text=True)
            try:
                assert srv.stderr is not None and "listening" in srv.stderr.readline()
                flow = start_flow(topo.clients[0], topo.server_addr, IPERF_PORT, cca="cubic", seconds=seconds + 1)
                with entered(topo.clients[1]), PolicyClient((topo.server_addr, PORT), p.load_key(key),
                                                            deadline_s=1.0,
                                                            tos=L4S_TOS if control == "l4s" else 0) as c:
                    t0 = time.monotonic()
                    nxt = t0
                    while (t := time.monotonic() - t0) < seconds:
                        _, remote = c.cwnd(one_obs(), None)
                        if remote and t > WARMUP_S and c.last_rtt_s is not None:
                            rtts.append(c.last_rtt_s * 1000)
                        nxt += STEP_S
                        time.sleep(max(0.0, nxt - time.monotonic()))
                    lost = sum(c.fallbacks.values())
                res = flow.wait(timeout=seconds + 30)
            finally:
                stop_process(srv, 2.0)
        rows = [r for r in emu.intervals() if r["direction"] == "uplink" and r["client"] == "-1"
                and float(r["t_s"]) > WARMUP_S]

    def median_ms(col: str) -> float:  # median over the 0.5-s intervals
        vals = [float(r[col]) / 1000 for r in rows if r.get(col, "") != ""]
        return statistics.median(vals) if vals else float("nan")

    q_l = median_ms("l_sojourn_p90_us") if queue == "dualpi2" else float("nan")
    return {"mean": statistics.fmean(rtts), "p50": float(np.percentile(rtts, 50)),
            "p90": float(np.percentile(rtts, 90)), "p99": float(np.percentile(rtts, 99)), "n": len(rtts),
            "lost": lost, "cubic": res.receiver_mbps, "q_l_p90": q_l,
            "q_mean": median_ms("sojourn_mean_us"), "q_p99": median_ms("sojourn_p99_us")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=20.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        key = Path(tmp) / "key"
        p.write_key(key)
        print(f"control RTT behind one CUBIC flow, {RATE:g} Mbit/s, {2 * DELAY_MS:g} ms base RTT, request every "
              f"{STEP_S:g} s, after {WARMUP_S:g} s warm-up")
        print(f"{'queue':<8} {'control':<8} {'mean ms':>8} {'p50':>7} {'p90':>7} {'p99':>7} {'n':>4} {'lost':>4} "
              f"{'CUBIC Mbit/s':>12} {'queue mean ms':>13} {'queue p99 ms':>12} {'L q p90 ms':>10}")
        out = {}
        for queue in QUEUES:
            for control in ("l4s", "classic"):
                stats = Path(tmp) / f"{queue}-{control}"
                r = out[queue, control] = arm(queue, control, args.seconds, key, stats)
                print(f"{queue:<8} {control:<8} {r['mean']:>8.1f} {r['p50']:>7.1f} {r['p90']:>7.1f} {r['p99']:>7.1f} "
                      f"{r['n']:>4} {r['lost']:>4} {r['cubic']:>12.2f} {r['q_mean']:>13.2f} {r['q_p99']:>12.2f} "
                      f"{r['q_l_p90']:>10.2f}",
                      flush=True)
        ratio = out["dualpi2", "l4s"]["mean"] / out["fifo", "classic"]["mean"]
        print(f"\nRTT(L4S via DualPI2) / RTT(classic via FIFO) = {ratio:.2f}  (paper 003: 65 / 105 = 0.62; "
              "target <= 0.62)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
