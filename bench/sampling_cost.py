"""Sampling cost: one monitor tick (iterator pass + FlowSample build) vs open sockets.

Prints wall time and CPU time per tick (p50, p99) for 100, 1,000, 10,000 and
20,000 open TCP sockets in a private namespace (loopback connections: both
ends are sockets of the namespace and both are sampled), and the ratio of the
10,000-socket p50 to the 20 ms target.  CPU is the sampling thread's own
(kernel iterator + numpy/pyarrow work).

    sudo .venv/bin/python bench/sampling_cost.py [--ticks 30]
"""

from __future__ import annotations

import argparse
import time

from ccswitch.dataplane import DataPlane

from _common import pct, private_netns, socket_pairs

TARGET_MS = 20.0
TARGET_SOCKETS = 10_000


def measure(dp: DataPlane, ticks: int) -> tuple[list[float], list[float], int]:
    dp.sample()
    wall, cpu, rows = [], [], 0
    for _ in range(ticks):
        w0, c0 = time.perf_counter(), time.thread_time()
        table = dp.sample()
        wall.append((time.perf_counter() - w0) * 1e3)
        cpu.append((time.thread_time() - c0) * 1e3)
        rows = table.num_rows
    return wall, cpu, rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ticks", type=int, default=30)
    ap.add_argument("--sockets", default="100,1000,10000,20000")
    args = ap.parse_args()
    print(f"{'sockets':>8} {'sampled':>8} {'wall p50':>9} {'wall p99':>9} "
          f"{'cpu p50':>8} {'cpu p99':>8}  (ms per tick)")
    p50_target = None
    for n in (int(s) for s in args.sockets.split(",")):
        with private_netns(), socket_pairs(n // 2), DataPlane(pcc=False) as dp:
            wall, cpu, rows = measure(dp, args.ticks)
        if n == TARGET_SOCKETS:
            p50_target = pct(wall, 50)
        print(f"{n:>8} {rows:>8} {pct(wall, 50):>9.2f} {pct(wall, 99):>9.2f} "
              f"{pct(cpu, 50):>8.2f} {pct(cpu, 99):>8.2f}")
    if p50_target is not None:
        print(f"ratio p50({TARGET_SOCKETS} sockets) / {TARGET_MS:.0f} ms target = "
              f"{p50_target / TARGET_MS:.2f} ({'PASS' if p50_target < TARGET_MS else 'FAIL'}: < 1.0)")


if __name__ == "__main__":
    main()
