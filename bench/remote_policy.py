"""The policy server (`ccswitch policy serve`): decisions/s for 1, 100 and 1,000 clients, and the
latency the remote path adds to one decision on an idle link, against deciding locally.

Throughput: the server runs as its own process (default batch window 2 ms)
on 127.0.0.1; a load generator (one select loop, up to 32 UDP sockets, one
client id and replay window per client) keeps exactly one request
outstanding per client, each for one flow, and sends the next as soon as
the answer arrived (closed loop); a request dropped by the server (late) is
replaced after 0.5 s ("retries").
Decisions/s = answered flows per second over --seconds (wall clock: on a
loaded 2-core machine this is mostly scheduling); "per server CPU-s" =
answered flows per CPU second the server process used meanwhile (its
capacity per core, robust to the load); flows/batch from the server's
counters.  cwnd requests go to the delay-aimd agent, cca requests to
the shipped DQN (models/policy.json).  The generator is Python too and shares
the 2 cores: the numbers are a floor for the server.

Latency: one client asks sequentially (idle server, idle link) through
PolicyClient, as the sender's loop and a daemon would; beside it the same
decision computed in-process (DelayAimd.decide, Policy.q_values on one row).
"remote loopback": server on 127.0.0.1; "remote veth": server in a second
network namespace across an unshaped veth pair (the testbed's link, no
emulator).  Both with the default 2 ms batch window and with 0 ms.

joint rows (CCA_JOINT_REQ, one decision per path) are measured beside plain CCA rows in the
server-cost table: the path board's bookkeeping per row, side by side in one run.

    sudo .venv/bin/python bench/remote_policy.py [--seconds 3] [--latency-n 300] [--cost-only]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import select
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from ccswitch.remote import protocol as p
from ccswitch.remote.agents import CcaPolicy, DelayAimd
from ccswitch.remote.client import PolicyClient
from ccswitch.testbed.runs.netns import Bottleneck, entered, popen_in, stop_process

RETRY_S = 0.5
SERVE = [sys.executable, "-c", "from ccswitch.cli import main; main()", "policy", "serve"]


def one_obs(cookie: int = 1) -> np.ndarray:
    obs = np.zeros(1, dtype=p.CWND_OBS)
    obs["cookie"], obs["step_us"], obs["cwnd"], obs["mss"] = cookie, 100_000, 40, 1448
    obs["srtt_us"], obs["min_rtt_us"], obs["rtt_avg_us"], obs["inflight_avg"] = 2000, 1500, 2100, 38
    return obs


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process *pid* (/proc/PID/stat utime, stime)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def server_process(listen: str, key: Path, batch_ms: float, ns: str | None = None
                   ) -> Iterator[tuple[list[dict], int]]:
    """`ccswitch policy serve` on *listen* (in namespace *ns*); yields (a list that gets its final
    stats, its pid)."""
    argv = [*SERVE, "--listen", listen, "--key", str(key), "--batch-ms", str(batch_ms)]
    proc = popen_in(ns, argv, stderr=subprocess.PIPE, text=True) if ns else subprocess.Popen(
        argv, stderr=subprocess.PIPE, text=True)
    stats: list[dict] = []
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        if "listening" not in line:
            raise RuntimeError(f"policy server did not start: {line}{proc.stderr.read()}")
        yield stats, proc.pid
    finally:
        stop_process(proc, 5.0)
        out = proc.stderr.read() if proc.stderr else ""
        stats += [json.loads(ln) for ln in out.splitlines() if ln.startswith("{")]


# ------------------------------------------------------------------ throughput


def load(addr: tuple[str, int], key: bytes, n: int, kind: str, seconds: float, cca: CcaPolicy,
         cpu: Callable[[], float]) -> tuple[float, float, list[float], int]:
    """Closed loop: n clients (ids 1000..), each with one request outstanding, on min(n, 32) sockets.

    A request unanswered after RETRY_S (dropped as late, or lost) is replaced by a new one (new
    seq), so a drop does not stall its client.  Answers are matched by (client id, seq) from the
    header; the generator does not verify their HMAC (the client's cost is not what is measured).
    Returns (decisions/s, decisions per server CPU-s, latencies, retries).
    """
    x = np.zeros((1, cca.n_features), np.float32)
    k, body = ((p.Kind.CWND_REQ, p.encode_cwnd_obs(one_obs())) if kind == "cwnd" else
               (p.Kind.CCA_REQ, p.encode_cca_req(cca.policy_id, np.ones(1, np.uint64), x)))
    socks = []
    for _ in range(min(n, 32)):
        sk = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sk.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        sk.connect(addr)
        sk.setblocking(False)
        socks.append(sk)
    seq, sent_at = [0] * n, [0.0] * n
    lat: list[float] = []
    done = retries = 0

    def send(i: int) -> None:
        seq[i] += 1
        sent_at[i] = time.perf_counter()
        with contextlib.suppress(BlockingIOError):
            socks[i % len(socks)].send(p.seal(key, k, body, count=1, client_id=1000 + i, seq=seq[i],
                                              deadline_ms=1000))

    try:
        for i in range(n):
            send(i)
        t_start = time.perf_counter()
        t0 = t_measure = t_start + 0.5  # warm-up
        t_end = t_measure + seconds
        cpu0 = None
        next_retry = t_start + RETRY_S
        while (now := time.perf_counter()) < t_end:
            if cpu0 is None and now >= t_measure:
                cpu0, done, t0 = cpu(), 0, now
                lat.clear()
            ready, _, _ = select.select(socks, [], [], 0.01)
            for sk in ready:
                while True:
                    try:
                        data = sk.recv(p.MAX_DATAGRAM)
                    except BlockingIOError:
                        break
                    _, _, kd, _, cid, sq, *_ = p.HEADER.unpack_from(data)
                    i = cid - 1000
                    if kd == p.ANSWER_TO[k] and 0 <= i < n and sq == seq[i]:
                        t = time.perf_counter()
                        lat.append(t - sent_at[i])
                        done += 1
                        send(i)
            if now >= next_retry:
                next_retry = now + RETRY_S / 4
                for i in range(n):
                    if now - sent_at[i] > RETRY_S:
                        retries += 1
                        send(i)
        elapsed = time.perf_counter() - t0
        return done / elapsed, done / max(cpu() - (cpu0 or 0.0), 1e-3), lat, retries
    finally:
        for sk in socks:
            sk.close()


def ms(v: list[float], q: float) -> str:
    return f"{np.quantile(v, q) * 1000:.2f}" if v else "-"


def throughput(key_file: Path, seconds: float, cca: CcaPolicy) -> None:
    key = p.load_key(key_file)
    print("server decisions/s (closed loop, 1 outstanding request per client, 1 flow per request, "
          "batch window 2 ms, server and generator on 127.0.0.1)")
    print(f"{'clients':>7} {'kind':>5} {'decisions/s':>12} {'per server CPU-s':>16} {'p50 ms':>8} {'p99 ms':>8} "
          f"{'flows/batch':>11} {'retries':>7}")
    for kind in ("cwnd", "cca"):
        for n in (1, 100, 1000):
            port = free_port()
            with server_process(f"127.0.0.1:{port}", key_file, 2.0) as (stats, pid):
                rate, per_cpu, lat, retries = load(("127.0.0.1", port), key, n, kind, seconds, cca,
                                                   lambda pid=pid: cpu_s(pid))
            st = stats[0] if stats else {}
            fpb = st.get("flows", 0) / max(st.get("batches", 1), 1)
            print(f"{n:>7} {kind:>5} {rate:>12.0f} {per_cpu:>16.0f} {ms(lat, .5):>8} {ms(lat, .99):>8} {fpb:>11.1f} "
                  f"{retries:>7}", flush=True)


def server_cost(cca: CcaPolicy, n_req: int = 20000) -> None:
    """CPU per decision of the server's own path (checks, agent, answer), fed pre-sealed datagrams."""
    from ccswitch.remote.server import PolicyServer

    class Sink:
        def sendto(self, data: bytes, addr: object) -> None:
            pass

    key = b"k" * 32
    x = np.zeros((1, cca.n_features), np.float32)
    obs100 = np.concatenate([one_obs(c) for c in range(1, 101)])
    x100 = np.zeros((100, cca.n_features), np.float32)
    bodies = {("cwnd", 1): (p.Kind.CWND_REQ, p.encode_cwnd_obs(one_obs())),
              ("cca", 1): (p.Kind.CCA_REQ, p.encode_cca_req(cca.policy_id, np.ones(1, np.uint64), x)),
              ("cwnd", 100): (p.Kind.CWND_REQ, p.encode_cwnd_obs(obs100)),
              ("cca", 100): (p.Kind.CCA_REQ, p.encode_cca_req(cca.policy_id, np.arange(100, dtype=np.uint64), x100)),
              # one decision per path (policy.remote_joint): every client's flows on one path, the board
              # holding up to batch x flows rows (a client id per request of the batch)
              ("joint", 1): (p.Kind.CCA_JOINT_REQ, p.encode_cca_req(cca.policy_id, np.ones(1, np.uint64), x,
                                                                    np.full(1, 7, np.uint64))),
              ("joint", 100): (p.Kind.CCA_JOINT_REQ, p.encode_cca_req(cca.policy_id, np.arange(100, dtype=np.uint64),
                                                                      x100, np.full(100, 7, np.uint64)))}
    print("\nserver CPU per decision, in-process (pre-sealed requests, no sockets, no generator)")
    print(f"{'flows/request':>13} {'requests/batch':>14} {'kind':>5} {'us/decision':>12} {'decisions per CPU-s':>20}")
    for (kind, flows), (k, body) in bodies.items():
        for batch in ((1, 100, 1000) if flows == 1 else (1, 10)):
            srv = PolicyServer(key, DelayAimd(), cca, default_deadline_s=1e6)
            srv.transport = Sink()  # type: ignore[assignment]
            n = n_req // flows
            dgs = [p.seal(key, k, body, count=flows, client_id=1 + i % batch, seq=1 + i // batch) for i in range(n)]
            t = time.process_time()
            for i in range(0, n, batch):
                srv._pending = [srv.accept(d, ("h", 1), time.monotonic()) for d in dgs[i:i + batch]]
                srv.flush()
            per = (time.process_time() - t) / (n * flows)
            assert srv.stats.answered == n, srv.stats.as_dict()
            print(f"{flows:>13} {batch:>14} {kind:>5} {per * 1e6:>12.1f} {1 / per:>20.0f}", flush=True)


# ------------------------------------------------------------------ latency


def time_calls(fn: Callable[[], object], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def us(v: list[float], q: float) -> str:
    return f"{np.quantile(v, q) * 1e6:.0f}"


def remote_calls(addr: tuple[str, int], key: bytes, n: int, cca: CcaPolicy) -> tuple[list[float], list[float]]:
    x = np.zeros((1, cca.n_features), np.float32)
    with PolicyClient(addr, key, deadline_s=1.0) as c:
        for _ in range(20):  # warm-up
            c.cwnd(one_obs(), None)
        cw = time_calls(lambda: c.cwnd(one_obs(), None), n)
        cc = time_calls(lambda: c.cca(cca.policy_id, np.ones(1, np.uint64), x, None), n)
        if sum(c.fallbacks.values()):
            raise RuntimeError(f"remote latency run fell back: {dict(c.fallbacks)}")
    return cw, cc


def latency(key_file: Path, n: int, cca: CcaPolicy) -> None:
    key = p.load_key(key_file)
    agent, x = DelayAimd(), np.zeros((1, cca.n_features), np.float32)
    rows = [("local (in-process)", "-", time_calls(lambda: agent.decide(one_obs()), n),
             time_calls(lambda: cca.q_values(x), n))]
    for batch in (2.0, 0.0):
        port = free_port()
        with server_process(f"127.0.0.1:{port}", key_file, batch):
            rows.append(("remote loopback", f"{batch:g}", *remote_calls(("127.0.0.1", port), key, n, cca)))
        with Bottleneck(rate_mbit=None) as bn, server_process(f"{bn.receiver_addr}:{port}", key_file, batch,
                                                              ns=bn.receiver), entered(bn.sender):
            rows.append(("remote veth (2 netns)", f"{batch:g}",
                         *remote_calls((bn.receiver_addr, port), key, n, cca)))
    print(f"\nlatency of one decision (1 flow, sequential, idle link and server; {n} calls each)")
    print(f"{'path':<22} {'batch ms':>8} {'cwnd p50 us':>12} {'p99':>7} {'cca p50 us':>11} {'p99':>7} "
          f"{'added p50 us':>13}")
    base = statistics.median(rows[0][2])
    for name, batch, cw, cc in rows:
        added = "-" if name.startswith("local") else f"{(statistics.median(cw) - base) * 1e6:.0f}"
        print(f"{name:<22} {batch:>8} {us(cw, .5):>12} {us(cw, .99):>7} {us(cc, .5):>11} {us(cc, .99):>7} "
              f"{added:>13}", flush=True)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=3.0, help="measurement per throughput point")
    ap.add_argument("--latency-n", type=int, default=300, help="calls per latency point")
    ap.add_argument("--skip-latency", action="store_true", help="throughput only (no root needed)")
    ap.add_argument("--cost-only", action="store_true",
                    help="only the in-process server cost per decision (plain, batched and joint requests)")
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(max(soft, 4096), hard), hard))
    cca = CcaPolicy()
    with tempfile.TemporaryDirectory() as tmp:
        key_file = Path(tmp) / "key"
        p.write_key(key_file)
        print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs\n")
        if not args.cost_only:
            throughput(key_file, args.seconds, cca)
        server_cost(cca)
        if args.cost_only:
            return 0
        if not args.skip_latency:
            latency(key_file, args.latency_n, cca)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
