"""Switch latency: request -> algorithm visible on the socket.

For 1, 100 and 1,000 sockets switched in one request, times (a) the whole
request (map update + iterator pass + result read) and (b) for each socket,
the moment its owner sees the new algorithm with getsockopt(TCP_CONGESTION).
Alternates cubic <-> bbr so every request really changes every socket.
Prints p50 and p99 over --reps requests.

    sudo .venv/bin/python bench/switch_latency.py [--reps 30]
"""

from __future__ import annotations

import argparse
import socket
import time

from ccswitch.dataplane import DataPlane

from _common import pct, private_netns, socket_pairs

TCP_CONGESTION = 13


def cookie_of(s: socket.socket) -> int:
    return int.from_bytes(s.getsockopt(socket.SOL_SOCKET, 57, 8), "little")  # SO_COOKIE


def cca_of(s: socket.socket) -> str:
    return s.getsockopt(socket.IPPROTO_TCP, TCP_CONGESTION, 16).split(b"\0")[0].decode()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--sizes", default="1,100,1000")
    args = ap.parse_args()
    print(f"{'sockets':>8} {'request p50':>12} {'request p99':>12} "
          f"{'visible p50':>12} {'visible p99':>12} {'per-socket us':>14}  (ms)")
    for n in (int(x) for x in args.sizes.split(",")):
        with private_netns(), socket_pairs(n) as socks, DataPlane(monitor=False, pcc=False) as dp:
            cookies = [cookie_of(s) for s in socks]
            req_ms, vis_ms = [], []
            for rep in range(args.reps):
                target = "bbr" if rep % 2 == 0 else "cubic"
                t0 = time.perf_counter()
                results = dp.switch_many([(c, target, "limited") for c in cookies])
                t1 = time.perf_counter()
                assert all(r.ok for r in results), [r.error for r in results if not r.ok][:3]
                for s in socks:  # the owner's view; switch is synchronous, so no polling
                    if cca_of(s) != target:
                        raise SystemExit(f"socket still on {cca_of(s)} after the switch")
                    vis_ms.append((time.perf_counter() - t0) * 1e3)
                req_ms.append((t1 - t0) * 1e3)
        print(f"{n:>8} {pct(req_ms, 50):>12.3f} {pct(req_ms, 99):>12.3f} "
              f"{pct(vis_ms, 50):>12.3f} {pct(vis_ms, 99):>12.3f} "
              f"{pct(req_ms, 50) * 1e3 / n:>14.1f}")


if __name__ == "__main__":
    main()
