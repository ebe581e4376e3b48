"""Soak: ccswitchd for an hour under 100 managed flows and 200 connections/s of churn.

    sudo .venv/bin/python bench/soak.py [--minutes 60] [--every 60] [--flows 100] [--churn 200] [--out DIR]

In a private network namespace: ccswitchd with its default config (the
shipped DQN, tick 0.2 s) plus `--flows` long-lived loopback TCP flows, each
paced by the application at ~0.8 Mbit/s (10 KB every 100 ms: managed, busy,
light on a 2-core machine), and the connection churn of bench/daemon_churn.py
(`--churn` connections/s, 1 KB each, then closed).  Every `--every` seconds:
the daemon's resident memory, open file descriptors, the sockets in its
monitor's storage map and its tick time p50/p99 (ccswitch status).

Writes DIR/soak.csv and DIR/soak.png (one panel per quantity, with its
least-squares slope) and prints the slopes against their bounds (upper
bounds on growth: a leak or a slowdown grows), fitted over the second half
(the first half holds the warm-up: buffers growing to their working size):

  * RSS            <= 2 MB per hour   (a leak of one 200-byte record per closed
                                       connection would be 140 MB/h at 200/s)
  * open fds       <= 5 per hour
  * tracked socks  <= 50 per hour     (flows + churn in flight: flat)
  * tick p99       <= 5 ms per hour

Exit 1 when a bound fails.  Not a test: an hour; run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from ccswitch.testbed.runs.netns import create_netns, delete_netns, nsenter_argv

HERE = Path(__file__).resolve().parent
BOUNDS_PER_H = {"rss_mb": 2.0, "fds": 5.0, "tracked": 50.0, "tick_p99_ms": 5.0}
FLOW_CHUNK, FLOW_PERIOD_S = 10_000, 0.1

_spec = importlib.util.spec_from_file_location("daemon_churn", HERE / "daemon_churn.py")
assert _spec and _spec.loader
churn = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(churn)


def paced_flows(n: int, seconds: float) -> None:
    """`n` long-lived loopback flows, each 10 KB every 100 ms (run inside the namespace)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(n)
    addr = srv.getsockname()
    conns = []

    def sink(c: socket.socket) -> None:
        with c:
            while c.recv(1 << 16):
                pass

    clients = [socket.create_connection(addr) for _ in range(n)]
    for _ in range(n):
        c, _ = srv.accept()
        threading.Thread(target=sink, args=(c,), daemon=True).start()
        conns.append(c)
    chunk = b"x" * FLOW_CHUNK
    t_end = time.monotonic() + seconds
    while time.monotonic() < t_end:
        t0 = time.monotonic()
        for c in clients:
            c.sendall(chunk)
        time.sleep(max(0.0, FLOW_PERIOD_S - (time.monotonic() - t0)))
    for c in clients:
        c.close()


def slope_per_h(t_s: list[float], v: list[float]) -> float:
    """Least-squares slope of v over t, per hour."""
    n = len(t_s)
    if n < 2:
        return float("nan")
    mt, mv = sum(t_s) / n, sum(v) / n
    den = sum((t - mt) ** 2 for t in t_s)
    return 3600.0 * sum((t - mt) * (x - mv) for t, x in zip(t_s, v, strict=True)) / den if den else float("nan")


def plot(rows: list[dict[str, float]], path: Path, slopes: dict[str, float]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [("rss_mb", "resident memory (MB)"), ("fds", "open file descriptors"),
            ("tracked", "sockets in the monitor's storage"), ("tick_p99_ms", "tick time p99 (ms)")]
    fig, axes = plt.subplots(2, 2, figsize=(11, 6.5))
    t_min = [r["t_s"] / 60 for r in rows]
    for ax, (k, label) in zip(axes.flat, keys, strict=True):
        ax.plot(t_min, [r[k] for r in rows], marker=".", lw=1.2)
        ax.set_title(f"{label}: second-half slope {slopes[k]:+.2f}/h (bound {BOUNDS_PER_H[k]:g})", fontsize=9)
        ax.set_xlabel("minutes")
        ax.grid(alpha=0.3)
    fig.suptitle("ccswitchd soak: managed flows + connection churn", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=60)
    ap.add_argument("--every", type=float, default=60, help="seconds between samples")
    ap.add_argument("--flows", type=int, default=100)
    ap.add_argument("--churn", type=float, default=200, help="connections per second")
    ap.add_argument("--out", type=Path, default=Path("results/soak"))
    ap.add_argument("--paced-flows", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.paced_flows is not None:
        paced_flows(a.paced_flows, a.minutes * 60 + 30)
        return
    seconds = a.minutes * 60
    a.out.mkdir(parents=True, exist_ok=True)
    ns = f"ccs-{secrets.token_hex(3)}-soak"
    tmp = Path(tempfile.mkdtemp(prefix="ccswitch-soak-"))
    sock = str(tmp / "s.sock")
    (tmp / "c.toml").write_text("[daemon]\ntick_s = 0.2\n")
    create_netns(ns)
    procs: list[subprocess.Popen] = []
    rows: list[dict[str, float]] = []
    try:
        subprocess.run(nsenter_argv(ns, ["ip", "link", "set", "lo", "up"]), check=True)
        daemon = subprocess.Popen(nsenter_argv(ns, [sys.executable, "-m", "ccswitch.daemon.main", "--config",
                                                    str(tmp / "c.toml"), "--socket", sock]),
                                  stderr=(tmp / "daemon.log").open("w"))
        procs.append(daemon)
        deadline = time.monotonic() + 30
        while not os.path.exists(sock):
            if daemon.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"ccswitchd did not start: {(tmp / 'daemon.log').read_text()[-500:]}")
            time.sleep(0.2)
        procs.append(subprocess.Popen(nsenter_argv(ns, [sys.executable, __file__, "--paced-flows", str(a.flows),
                                                        "--minutes", str(a.minutes)])))
        procs.append(subprocess.Popen(nsenter_argv(ns, [sys.executable, str(HERE / "daemon_churn.py"), "--generate",
                                                        "--rate", str(a.churn), "--seconds", str(seconds + 30)]),
                                      stdout=subprocess.DEVNULL))
        t0 = time.monotonic()
        n = int(seconds // a.every) + 1
        for i in range(n):
            time.sleep(max(0.0, t0 + i * a.every - time.monotonic()))
            if daemon.poll() is not None:
                raise RuntimeError(f"ccswitchd exited ({daemon.returncode}): {(tmp / 'daemon.log').read_text()[-500:]}")
            st = churn.status(sock)
            row = {"t_s": time.monotonic() - t0, "rss_mb": churn.rss_mb(daemon.pid),
                   "fds": float(len(os.listdir(f"/proc/{daemon.pid}/fd"))),
                   "tracked": float(churn.flow_map_entries(daemon.pid)), "flows": float(st["flows"]),
                   "tick_p50_ms": st["tick_ms_p50"], "tick_p99_ms": st["tick_ms_p99"]}
            rows.append(row)
            left = (n - 1 - i) * a.every
            print(f"[{i + 1}/{n}, ETA {left / 60:.0f} min] " + " ".join(f"{k} {v:.1f}" for k, v in row.items()),
                  flush=True)
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    p.kill()
        delete_netns(ns)
        shutil.copy(tmp / "daemon.log", a.out / "daemon.log") if (tmp / "daemon.log").exists() else None
        shutil.rmtree(tmp, ignore_errors=True)
    with (a.out / "soak.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    half = rows[len(rows) // 2:]
    slopes = {k: slope_per_h([r["t_s"] for r in half], [r[k] for r in half]) for k in BOUNDS_PER_H}
    plot(rows, a.out / "soak.png", slopes)
    # growth bounds: a leak or a slowdown grows; a falling tick time (load from elsewhere easing) is no fault
    bad = [f"{k} {s:+.2f}/h > {BOUNDS_PER_H[k]:g}" for k, s in slopes.items() if not s <= BOUNDS_PER_H[k]]
    print(json.dumps({k: round(v, 3) for k, v in slopes.items()}))
    print(f"{a.out / 'soak.png'}; " + ("PASS" if not bad else "FAIL: " + "; ".join(bad)))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
