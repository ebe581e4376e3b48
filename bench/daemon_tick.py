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
   loopback connections: (utime + stime) / wall over --cpu-seconds after a
   settling time (the DQN's first switches of the idle flows, their
   evaluation); target < 2 % of a core.  Measured twice, alternating, side by
   side with daemon.sample_every_tick = true (the monitor read every tick, as
   before it was read once per decision interval, and as with --record), so
   the ratio holds under any load.

    .venv/bin/python bench/daemon_tick.py --compare REV [--ticks 40]

4. Before/after: the tick cost of the controller of git revision REV (e.g.
   3ed8786, the daemon before the vectorised bookkeeping) and of this tree,
   on the same synthetic rows and policy file, in alternating subprocesses
   (REV's package from `git archive`, laid out as installed), printed as
   ratios of the CPU time per tick; then resident memory side by side
   (--only ticks|memory for one part): VmRSS after `import ccswitch.daemon.main`
   in a fresh interpreter (and whether pyarrow got loaded), and of a real
   ccswitchd of REV and of this tree (observe with 10 idle flows; dqn with 100
   flows after 10 s), alternating, median of 3 runs each.  REV's daemon runs
   with this tree's compiled BPF objects (bpf/*.bpf.o are not in git).
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as ccswitchd does (daemon/main.py)
if len(sys.argv) > 2 and sys.argv[1] == "--tree":  # a --compare child: import ccswitch from that tree
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f)]
    sys.path.insert(0, sys.argv[2])
import argparse
import json
import secrets
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
import tomllib
from pathlib import Path

import numpy as np
import pyarrow as pa

from ccswitch.daemon.config import parse_config
from ccswitch.daemon.controller import Controller
from ccswitch.daemon.policies import build_decider
from ccswitch.schema import FLOW_SAMPLE_SCHEMA
from ccswitch.testbed.runs.netns import create_netns, delete_netns, entered, nsenter_argv

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import private_netns, socket_pairs

TARGET_TICK_MS_1000 = 10.0
TARGET_RSS_MB = 80.0
TARGET_CPU = 0.02
COMPARE_RUNS = 3


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
        self.cpu_s = 0.0  # CPU spent building rows (not the daemon's)

    def _v(self, k: str) -> np.ndarray:
        b = self.base[k]
        if self.noise >= 1:
            return self.rng.permutation(b)
        return b * (1 + self.noise * self.rng.uniform(-1, 1, self.n))

    def sample(self) -> pa.Table:
        c0 = time.thread_time()
        try:
            return self._sample()
        finally:
            self.cpu_s += time.thread_time() - c0

    def sample_frame(self) -> object:
        """The same rows as numpy columns (what DataPlane.sample_frame gives a controller that reads it)."""
        c0 = time.thread_time()
        try:
            from ccswitch.frame import FlowFrame

            return FlowFrame.from_arrow(self._sample())
        finally:
            self.cpu_s += time.thread_time() - c0

    def _sample(self) -> pa.Table:
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
    policy_file = str(Path(__file__).resolve().parents[1] / "models" / "policy.json")  # the same for --compare
    cfg = parse_config({"policy": {"decision_interval_s": 0.2, "file": policy_file}, "flows": {"min_age_s": 0.0},
                        "guard": {"min_dwell_s": 0.0, "eval_window_s": 0.0, "consecutive": 1}})
    dec, _ = build_decider(dict(cfg.policy))
    plane = SyntheticPlane(n, noise=noise)
    ctl = Controller(cfg, dec, plane, available=lambda: ["cubic", "bbr", "pcc", "reno"])
    for _ in range(5 if noise >= 1 else 30):
        ctl.tick()
    ms, cpu = [], []
    for _ in range(ticks):
        t0, c0, s0 = time.perf_counter(), time.thread_time(), plane.cpu_s
        ctl.tick()
        ms.append((time.perf_counter() - t0) * 1e3 - ctl.stats.recent_sample_ms[-1])  # without building rows
        cpu.append((time.thread_time() - c0 - (plane.cpu_s - s0)) * 1e3)
    ms.sort()
    return {"p50": statistics.median(ms), "p99": ms[min(len(ms) - 1, int(0.99 * len(ms)))], "mean": statistics.mean(ms),
            "cpu_p50": statistics.median(cpu)}


def tree_of(rev: str) -> Path:
    """Revision *rev* of this repository as an importable `ccswitch` package (pyproject's package-dir)."""
    repo = Path(__file__).resolve().parents[1]
    tmp = Path(tempfile.mkdtemp(prefix="ccswitch-rev-"))
    src = tmp / "src"
    src.mkdir()
    archive = subprocess.run(["git", "-C", str(repo), "archive", rev], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    dirs = tomllib.loads((src / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    for pkg, d in sorted(dirs.items()):
        dst = tmp / "pkg" / pkg.replace(".", "/")
        dst.parent.mkdir(parents=True, exist_ok=True)
        if not dst.exists():
            shutil.copytree(src / d, dst)
    return tmp / "pkg"


def compare(rev: str, ticks: int, only: str | None = None) -> None:
    tree = tree_of(rev)
    if only != "ticks":
        for obj in (Path(__file__).resolve().parents[1] / "bpf").glob("*.bpf.o"):
            shutil.copy(obj, tree / "ccswitch" / "bpf" / obj.name)
        compare_memory(rev, tree)
    if only == "memory":
        shutil.rmtree(tree.parent, ignore_errors=True)
        return
    me = str(Path(__file__).resolve())
    print(f"tick cost, controller of {rev} vs this tree (CPU ms per tick: p50 of {ticks} decision ticks, the "
          f"lowest of {COMPARE_RUNS} alternating runs each, as other load on the machine only adds)")
    print(f"{'flows':>7} {'case':>10} {rev + ' ms':>14} {'now ms':>10} {'now/' + rev:>14}")
    for n in (100, 1000, 10000):
        for noise, case in ((0.05, "steady"), (1.0, "contested")):
            res: dict[str, list[float]] = {"old": [], "new": []}
            for _ in range(COMPARE_RUNS):
                for who, pre in (("old", ["--tree", str(tree)]), ("new", [])):
                    out = subprocess.run([sys.executable, me, *pre, "--one", str(n), str(noise),
                                          str(ticks if n < 10000 else max(10, ticks // 5))],
                                         check=True, capture_output=True, text=True).stdout
                    res[who].append(json.loads(out.splitlines()[-1])["cpu_p50"])
            old, new = min(res["old"]), min(res["new"])
            print(f"{n:>7} {case:>10} {old:>14.2f} {new:>10.2f} {new / old:>14.2f}")
    shutil.rmtree(tree.parent, ignore_errors=True)


# runs ccswitch from the tree in argv[1] (not the editable install), then the module in argv[2]
_BOOT = ("import sys, runpy; sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in repr(f)]; "
         "sys.path.insert(0, sys.argv.pop(1)); runpy.run_module(sys.argv.pop(1), run_name='__main__', alter_sys=True)")
_IMPORT = ("import sys, os; {boot}import {module}; "
           "print([l.split()[1] for l in open('/proc/self/status') if l.startswith('VmRSS')][0], "
           "any(m.split('.')[0] == 'pyarrow' for m in sys.modules))")


def import_rss(module: str, tree: Path | None = None) -> tuple[float, bool]:
    """VmRSS (MB) of a fresh interpreter after `import module` (ccswitch from *tree*), pyarrow loaded?"""
    boot = ("sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in repr(f)]; "
            f"sys.path.insert(0, {str(tree)!r}); ") if tree else ""
    code = _IMPORT.format(boot=boot, module=module) if module else _IMPORT.replace("import {module}; ", "").format(
        boot=boot)
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                         env={**os.environ, "ARROW_DEFAULT_MEMORY_POOL": "system"}).stdout.split()
    return int(out[0]) / 1024, out[1] == "True"


def compare_memory(rev: str, tree: Path, runs: int = 3) -> None:
    print(f"resident memory (VmRSS MB), {rev} vs this tree (median of {runs} alternating runs)")
    print(f"{'':<58} {rev:>9} {'now':>9} {'pyarrow loaded (' + rev + ' / now)':>26}")
    for what in ("", "numpy", "pyarrow", "ccswitch.daemon.main"):
        res = {w: [import_rss(what, t) for _ in range(runs)] for w, t in (("old", tree), ("new", None))}
        med = {w: statistics.median(r[0] for r in v) for w, v in res.items()}
        loaded = " / ".join("yes" if v[0][1] else "no" for v in res.values())
        label = "fresh python, import " + (what or "(nothing)")
        print(f"{label:<58} {med['old']:>9.1f} {med['new']:>9.1f} {loaded:>26}")
    for policy, flows, secs in (("observe", 10, 5.0), ("dqn", 100, 10.0)):
        rss: dict[str, list[float]] = {"old": [], "new": []}
        for _ in range(runs):
            for who, t in (("old", tree), ("new", None)):
                rss[who].append(daemon_run(policy, flows, secs, settle=0.0, tree=t)["rss_mb"])
        print(f"{f'ccswitchd {policy}, {flows} flows, after {secs:g} s':<58} {statistics.median(rss['old']):>9.1f} "
              f"{statistics.median(rss['new']):>9.1f}")


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


def daemon_run(policy: str, flows: int, seconds: float, settle: float = 2.0, every_tick: bool = False,
               tree: Path | None = None) -> dict[str, float]:
    """A real ccswitchd in a private namespace with `flows` idle loopback connections (of *tree*: --compare)."""
    ns = f"ccs-{secrets.token_hex(3)}-dtick"
    tmp = Path(tempfile.mkdtemp(prefix="ccswitch-dtick-"))
    (tmp / "c.toml").write_text(f'[policy]\nkind = "{policy}"\n[flows]\nmin_age_s = 0.0\n'
                                f'[daemon]\nsample_every_tick = {"true" if every_tick else "false"}\n')
    create_netns(ns)
    try:
        subprocess.run(nsenter_argv(ns, ["ip", "link", "set", "lo", "up"]), check=True)
        with entered(ns), socket_pairs(flows):
            run = [sys.executable, "-c", _BOOT, str(tree), "ccswitch.daemon.main"] if tree else [
                sys.executable, "-m", "ccswitch.daemon.main"]
            d = subprocess.Popen(nsenter_argv(ns, [*run, "--config", str(tmp / "c.toml"), "--socket",
                                                   str(tmp / "s.sock")]), stderr=subprocess.DEVNULL)
            try:
                while not (tmp / "s.sock").exists():
                    time.sleep(0.1)
                time.sleep(settle)
                c0, t0 = _proc_cpu_s(d.pid), time.monotonic()
                time.sleep(seconds)
                cpu = (_proc_cpu_s(d.pid) - c0) / (time.monotonic() - t0)
                rss = _rss_mb(d.pid)
            finally:
                d.send_signal(signal.SIGTERM)
                d.wait(20)
    finally:
        delete_netns(ns)
        shutil.rmtree(tmp, ignore_errors=True)
    return {"cpu_share": cpu, "rss_mb": rss}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ticks", type=int, default=50)
    ap.add_argument("--cpu-seconds", type=float, default=20.0)
    ap.add_argument("--settle", type=float, default=10.0, help="seconds before the CPU window starts")
    ap.add_argument("--compare", metavar="REV", help="before/after: the controller of git revision REV vs this tree")
    ap.add_argument("--only", choices=("ticks", "memory"), help="with --compare: only this part")
    ap.add_argument("--tree", help=argparse.SUPPRESS)
    ap.add_argument("--one", nargs=3, metavar=("N", "NOISE", "TICKS"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        n, noise, ticks = a.one
        print(json.dumps(tick_cost(int(n), int(ticks), float(noise))))
        return
    if a.compare:
        compare(a.compare, a.ticks, a.only)
        return
    print("tick cost (decision every tick; daemon part on synthetic rows | one kernel sampling pass on real sockets)")
    print("(ms: wall time; cpu: the thread's CPU time, which load on the machine inflates less)")
    print(f"{'flows':>7} {'steady p50 ms':>14} {'cpu p50':>8} {'steady p99':>11} {'contested p50':>14} {'cpu p50':>8} "
          f"{'contested p99':>14} {'kernel sample ms':>17} {'steady+sample':>14}")
    ok = True
    for n in (100, 1000, 10000):
        t = a.ticks if n < 10000 else max(10, a.ticks // 5)
        st, co = tick_cost(n, t, 0.05), tick_cost(n, t, 1.0)
        k = kernel_sample_ms(n)
        print(f"{n:>7} {st['p50']:>14.2f} {st['cpu_p50']:>8.2f} {st['p99']:>11.2f} {co['p50']:>14.2f} "
              f"{co['cpu_p50']:>8.2f} {co['p99']:>14.2f} {k:>17.2f} {st['p50'] + k:>14.2f}")
        if n == 1000:
            ok &= st["p50"] < TARGET_TICK_MS_1000
    assert "tensorflow" not in sys.modules, "the daemon's code path imported TensorFlow"
    print("tensorflow loaded: no")
    mem = daemon_run("observe", 10, 5.0)
    print(f"ccswitchd RSS (observe, idle): {mem['rss_mb']:.1f} MB (target < {TARGET_RSS_MB:g})")
    runs: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    for _ in range(2):
        for every in (True, False):
            runs[every].append(daemon_run("dqn", 100, a.cpu_seconds, a.settle, every_tick=every))
    cpu = {k: statistics.mean(r["cpu_share"] for r in v) for k, v in runs.items()}
    for every in (True, False):
        what = "every tick (sample_every_tick = true)" if every else "once per decision (default)"
        shares = " / ".join(f"{100 * r['cpu_share']:.2f}" for r in runs[every])
        print(f"ccswitchd CPU at 100 flows (dqn, tick 0.2 s), monitor read {what}: {shares} % of a core, "
              f"RSS {runs[every][-1]['rss_mb']:.1f} MB")
    print(f"CPU default / every tick: {cpu[False] / cpu[True]:.2f}; default {100 * cpu[False]:.2f} % "
          f"(target < {100 * TARGET_CPU:g} %)")
    ok &= mem["rss_mb"] < TARGET_RSS_MB and cpu[False] < TARGET_CPU
    print("PASS" if ok else "FAIL (see targets above)")


if __name__ == "__main__":
    main()
