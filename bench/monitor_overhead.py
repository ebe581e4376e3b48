"""Monitor overhead: bulk TCP throughput over veth with and without the monitor.

One iperf3 CUBIC flow at full speed (no shaping) between two namespaces,
alternating runs without and with the monitor attached (sockops callbacks on
every ACK + the sampling iterator every 200 ms, as the daemon runs it), so
both see the same machine noise.  Prints each pair and the ratio of medians.
Target: ratio >= 0.98.

    sudo .venv/bin/python bench/monitor_overhead.py [--pairs 5 --seconds 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

from ccswitch.dataplane import DataPlane
from ccswitch.testbed.iperf import start_flow, start_server
from ccswitch.testbed.netns import Bottleneck, entered

TARGET = 0.98
TICK_S = 0.2


def one_run(bn: Bottleneck, seconds: float, monitored: bool, port: int) -> float:
    with start_server(bn.receiver, port, bind=bn.receiver_addr):
        if not monitored:
            return start_flow(bn.sender, bn.receiver_addr, port, cca="cubic",
                              seconds=seconds).wait(timeout=seconds + 30).receiver_bps
        with entered(bn.sender), DataPlane(pcc=False) as dp:
            flow = start_flow(bn.sender, bn.receiver_addr, port, cca="cubic", seconds=seconds)
            while flow.returncode is None:
                time.sleep(TICK_S)
                dp.sample()
            return flow.wait(timeout=30).receiver_bps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=5)
    args = ap.parse_args()
    off, on = [], []
    with Bottleneck(rate_mbit=None) as bn:
        for i in range(args.pairs):
            off.append(one_run(bn, args.seconds, False, 5400 + 2 * i))
            on.append(one_run(bn, args.seconds, True, 5401 + 2 * i))
            print(f"pair {i + 1}: without {off[-1] / 1e9:6.2f} Gbit/s  "
                  f"with {on[-1] / 1e9:6.2f} Gbit/s  ratio {on[-1] / off[-1]:.3f}", flush=True)
    ratio = statistics.median(on) / statistics.median(off)
    print(f"median without {statistics.median(off) / 1e9:.2f} Gbit/s, with "
          f"{statistics.median(on) / 1e9:.2f} Gbit/s; ratio {ratio:.3f} "
          f"({'PASS' if ratio >= TARGET else 'FAIL'}: target >= {TARGET})")


if __name__ == "__main__":
    main()
