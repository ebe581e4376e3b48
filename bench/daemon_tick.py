"""ccswitchd's costs: tick time at 100 / 1,000 / 10,000 flows, resident memory, CPU share at 100 flows.

    .venv/bin/python bench/daemon_tick.py [--ticks 50]

1. Tick time (the daemon's own part): the real Controller with the shipped DQN
   over FlowSample tables of N live-looking flows (synthetic rows, new values
   every tick), every tick a decision tick (worst case: aggregation, fairness,
   reward, batched forward pass, guard for every flow).  Targets: < 10 ms at
   1,000 flows.  Printed next to it: one real kernel sampling pass
   (DataPlane.sample) over N real loopback connections in a private
   namespace, i.e. the whole tick = sampling + daemon.
2. Memory: VmRSS of a real ccswitchd (observe policy, no --record) idling in
   a private namespace for 5 s; target < 80 MB; the daemon's process must not
   have TensorFlow loaded (checked in this process after building the deciders:
   'tensorflow' not in sys.modules).
3. CPU share: the real ccswitchd (DQN, tick 0.2 s) with 100 established
   loopback connections for 20 s: (utime + stime) / wall; target < 2 % of a core.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as ccswitchd does (daemon/main.py)
import argparse
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from ccswitch.daemon.config import parse_config
from ccswitch.daemon.controller import Controller
from ccswitch.daemon.policies import build_decider
from ccswitch.schema import FLOW_SAMPLE_SCHEMA
from ccswitch.testbed.netns import create_netns, delete_netns, entered, nsenter_argv

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import private_netns, socket_pairs

TARGET_TICK_MS_1000 = 10.0
TARGET_RSS_MB = 80.0
TARGET_CPU = 0.02


class SyntheticPlane:
    """N flows over 8 destinations; rates and RTTs change every tick."""

    def __init__(self, n: int, seed: int = 1, noise: float = 1.0):
        self.n = n
        self.rng = np.random.default_rng(seed)
        self.ids = np.arange(1, n + 1, dtype=np.uint64) * 7919
        self.noise = noise  # 1: every value random every tick (contested); small: a steady state
        self.base = {k: self.rng.uniform(lo, hi, n) for k, lo, hi in (
            ("thr", 1e5, 5e7), ("rtt", 1e3, 1e5), ("ratio", 1, 5), ("jit", 0, 5e3), ("loss", 0, 0.02))}
        self.cca = [("cubic", "bbr", "pcc")[i % 3] for i in range(n)]
        self.index = {int(f): i for i, f in enumerate(self.ids)}

    def _v(self, k: str) -> np.ndarray:
        b = self.base[k]
        if self.noise >= 1:
            return self.rng.permutation(b)
        return b * (1 + self.noise * self.rng.uniform(-1, 1, self.n))

    def sample(self) -> pa.Table:
        n, r = self.n, self.rng
        cols = {f.name: np.zeros(n, dtype=f.type.to_pandas_dtype()) for f in FLOW_SAMPLE_SCHEMA
                if not pa.types.is_string(f.type)}
        cols.update({"ts_s": np.full(n, time.time()), "interval_s": np.full(n, 0.2), "flow_id": self.ids,
                     "netns_cookie": np.ones(n, np.uint64), "cgroup_id": np.ones(n, np.uint64),
                     "throughput_bps": self._v("thr"), "goodput_bps": self._v("thr"),
                     "sending_rate_bps": self._v("thr"), "rtt_us": self._v("rtt"),
                     "min_rtt_us": np.full(n, 1e3), "rtt_ratio": np.maximum(self._v("ratio"), 1.0),
                     "jitter_us": self._v("jit"), "loss_rate": np.clip(self._v("loss"), 0, 1),
                     "sent_segs": np.full(n, 100, np.uint32),
                     "sndq_bytes": np.full(n, 1000, np.uint32), "state": np.ones(n, np.uint8),
                     "sport": (np.arange(n) % 60000 + 1024).astype(np.uint16), "dport": np.full(n, 5201, np.uint16)})
        cols["src"] = pa.array(["10.0.0.1"] * n)
        cols["dst"] = pa.array([f"10.0.1.{i % 8}" for i in range(n)])
        cols["cca"] = pa.array(self.cca)
        del r
        return pa.Table.from_pydict(cols, schema=FLOW_SAMPLE_SCHEMA)

    def switch_many(self, requests: list) -> list:
        from ccswitch.bpf.switcher import SwitchResult

        out = []
        for f, c, i in requests:
            k = self.index[int(f)]
            out.append(SwitchResult(f, c, i, ok=True, cca_before=self.cca[k], cca_after=c))
            self.cca[k] = c
        return out


def tick_cost(n: int, ticks: int, noise: float) -> dict[str, float]:
    """noise 1: contested (random metrics every tick: most flows want another CCA every decision);
    noise 0.05: steady (after a warm-up in which the guard settles every flow)."""
    cfg = parse_config({"policy": {"decision_interval_s": 0.2}, "flows": {"min_age_s": 0.0},
                        "guard": {"min_dwell_s": 0.0, "eval_window_s": 0.0, "consecutive": 1}})
    dec, _ = build_decider(dict(cfg.policy))
    plane = SyntheticPlane(n, noise=noise)
    ctl = Controller(cfg, dec, plane, available=lambda: ["cubic", "bbr", "pcc", "reno"])
    for _ in range(5 if noise >= 1 else 30):
        ctl.tick()
    ms = []
    for _ in range(ticks):
        t0 = time.perf_counter()
        ctl.tick()
        ms.append((time.perf_counter() - t0) * 1e3 - ctl.stats.recent_sample_ms[-1])  # without building rows
    ms.sort()
    return {"p50": statistics.median(ms), "p99": ms[min(len(ms) - 1, int(0.99 * len(ms)))], "mean": statistics.mean(ms)}


def kernel_sample_ms(n: int, reps: int = 10) -> float:
    from ccswitch.dataplane import DataPlane

    with private_netns("tick"), socket_pairs(n), DataPlane(pcc=False) as dp:
        dp.sample()
        ms = []
        for _ in range(reps):
            t0 = time.perf_counter()
            dp.sample()
            ms.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ms)


def _proc_cpu_s(pid: int) -> float:
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def daemon_run(policy: str, flows: int, seconds: float) -> dict[str, float]:
    """A real ccswitchd in a private namespace with `flows` idle loopback connections."""
    ns = f"ccs-{secrets.token_hex(3)}-dtick"
    tmp = Path(tempfile.mkdtemp(prefix="ccswitch-dtick-"))
    (tmp / "c.toml").write_text(f'[policy]\nkind = "{policy}"\n[flows]\nmin_age_s = 0.0\n')
    create_netns(ns)
    try:
        subprocess.run(nsenter_argv(ns, ["ip", "link", "set", "lo", "up"]), check=True)
        with entered(ns), socket_pairs(flows):
            d = subprocess.Popen(nsenter_argv(ns, [sys.executable, "-m", "ccswitch.daemon.main", "--config",
                                                   str(tmp / "c.toml"), "--socket", str(tmp / "s.sock")]),
                                 stderr=subprocess.DEVNULL)
            try:
                while not (tmp / "s.sock").exists():
                    time.sleep(0.1)
                time.sleep(2.0)
                c0, t0 = _proc_cpu_s(d.pid), time.monotonic()
                time.sleep(seconds)
                cpu = (_proc_cpu_s(d.pid) - c0) / (time.monotonic() - t0)
                rss = _rss_mb(d.pid)
            finally:
                d.send_signal(signal.SIGTERM)
                d.wait(20)
    finally:
        delete_netns(ns)
    return {"cpu_share": cpu, "rss_mb": rss}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ticks", type=int, default=50)
    ap.add_argument("--cpu-seconds", type=float, default=20.0)
    a = ap.parse_args()
    print("tick cost (decision every tick; daemon part on synthetic rows | one kernel sampling pass on real sockets)")
    print(f"{'flows':>7} {'steady p50 ms':>14} {'steady p99':>11} {'contested p50':>14} {'contested p99':>14} "
          f"{'kernel sample ms':>17} {'steady+sample':>14}")
    ok = True
    for n in (100, 1000, 10000):
        t = a.ticks if n < 10000 else max(10, a.ticks // 5)
        st, co = tick_cost(n, t, 0.05), tick_cost(n, t, 1.0)
        k = kernel_sample_ms(n)
        print(f"{n:>7} {st['p50']:>14.2f} {st['p99']:>11.2f} {co['p50']:>14.2f} {co['p99']:>14.2f} {k:>17.2f} "
              f"{st['p50'] + k:>14.2f}")
        if n == 1000:
            ok &= st["p50"] < TARGET_TICK_MS_1000
    assert "tensorflow" not in sys.modules, "the daemon's code path imported TensorFlow"
    print("tensorflow loaded: no")
    mem = daemon_run("observe", 10, 5.0)
    print(f"ccswitchd RSS (observe, idle): {mem['rss_mb']:.1f} MB (target < {TARGET_RSS_MB:g})")
    cpu = daemon_run("dqn", 100, a.cpu_seconds)
    print(f"ccswitchd CPU at 100 flows (dqn, tick 0.2 s): {100 * cpu['cpu_share']:.2f} % of a core "
          f"(target < {100 * TARGET_CPU:g} %), RSS {cpu['rss_mb']:.1f} MB")
    ok &= mem["rss_mb"] < TARGET_RSS_MB and cpu["cpu_share"] < TARGET_CPU
    print("PASS" if ok else "FAIL (see targets above)")


if __name__ == "__main__":
    main()
