"""Paper 000's Table 2 on the emulated testbed: five AQMs x 10 / 1 Mbit/s x ECN on / off, NewReno, 3 seeds.

Paper 000 (Satish, Kua, Pokhrel, Future Internet 16(8) 265, 2024), section 5.1,
experiments (4)-(23) and Table 2 ("Total data transferred (including
retransmissions)"): FreeBSD dummynet, one client, one router, one server; four
TCP NewReno iperf3 flows starting at t = 0, 10, 20, 30 s for 60 s each (a run
is 90 s); bottleneck 10 or 1 Mbit/s, "delay 20 ms"; CoDel (target 5 ms,
interval 100 ms), PIE (target 15 ms, tupdate 15 ms, alpha 0.125, beta 1.25,
max_burst 150 ms, max_ecnth 0.1), FQ-CoDel (target 5, interval 100, quantum
1514, limit 10240, 1024 flows), FQ-PIE (the PIE settings, quantum 1514, limit
10240, 6 flows) and their L4S (an FQ-PIE with three pairs of coupled L/C
queues); each with ECN enabled and disabled.

Here (issue 14, "Reproduce the paper's Table 2 set-up"), per configuration a
scenario file (not committed: generated into ``OUT/scenarios/``):

* one client namespace with the four flows, ``cca = "reno"`` (Linux's Reno:
  NewReno congestion avoidance and SACK recovery, as FreeBSD's NewReno with
  SACK), iperf3 client -> server;
* linkemu: uplink (data) at the rate with the AQM, 10 ms one-way; downlink
  (ACKs) at the same rate, pfifo 1000, 10 ms: a 20 ms base RTT ("delay 20 ms"
  read as the RTT the pipe adds; the paper does not say whether its one
  dummynet pipe carried both directions, which would make it 40 ms);
* AQMs with the paper's parameters (linkemu's codel, pie, fq_codel, fq_pie;
  CoDel's and PIE's limit, which the paper does not give, Linux's 1000) and for
  "L4S" linkemu's DualPI2 (RFC 9332, Linux sch_dualpi2's defaults, target 15 ms,
  tupdate 15 ms as the paper, limit 10240).  The paper's L4S puts *any* ECT
  packet into an L queue; RFC 9332's classifier puts only ECT(1) there, because
  a classic (RFC 3168) sender such as NewReno halves per CE mark and would
  starve under the L queue's shallow 1 ms step marking.  So NewReno's ECT(0)
  packets go to DualPI2's Classic queue (PI2, p_C = p'^2, 15 ms target) and
  are CE-marked there instead of dropped: "L4S" here is a coupled DualQ AQM
  carrying classic traffic, not the paper's classifier;
* ECN on: the AQM's ``ecn = true`` and the scenario's ``tcp_ecn = 1`` (every
  flow negotiates classic ECN); ECN off: ``ecn = false``, ``tcp_ecn = 0``
  (DualPI2 has no switch: it marks ECT packets and drops Not-ECT ones).

    sudo nice -n 10 .venv/bin/python testbed/l4s/table2.py run --seeds 1 2 3 [--jobs 2] [--stop-at 21:20]
    .venv/bin/python testbed/l4s/table2.py report       # docs/l4s/table2.md + docs/l4s/table2-*.png

``run`` goes seed-major (seed 1 of all 20 configurations first) and is
resumable: a finished run folder (``OUT/runs/NAME/seed-S/summary.json`` with its
metrics) is never repeated; a failed one is set aside (``seed-S.failed-N``) and
tried again by the next invocation.  Each run is a child process started by the
matrix driver's ``execute`` (time bound, namespace clean-up): ``table2.py one``,
which is the matrix's ``run_one`` with a flow grace of GRACE_S instead of the
runner's 20 s (with ECN on, CoDel at 1 Mbit/s drops the Not-ECT SYNs of the
last flow for ~35 s, which then ends that much later).  ``--jobs 2`` runs two
at once (their namespaces never collide; at <= 10 Mbit/s a run needs little CPU).
``--stop-at HH:MM`` (UTC) starts no run after that time.  Machine load
(/proc/loadavg) is sampled every 5 s into ``OUT/loadavg.csv``; each run's
start, end and load go to ``OUT/runs/NAME/seed-S.t2.json`` together with its
queue-delay percentiles, standing queue, bytes delivered in 0-90 s and dropped
SYNs from linkemu's packets.csv (gzipped afterwards); ``seed-S.linkemu.json``
records the linkemu build it ran with.

``report`` writes, for every configuration with at least one finished run:
the table in the paper's layout (ours beside the paper's), per configuration
utilisation, queue delay (mean, p95) against the AQM's target, the flows'
mean srtt, Jain's index over the four flows while all four run (30-60 s),
the ECN/no-ECN ratio per AQM ours vs the paper's with a verdict, the check of
the paper's claim that L4S with ECN has a lower srtt than FQ-PIE with ECN, and
the plots.  ~100 s per run (90 s + set-up and report).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import datetime as dt
import gzip
import json
import os
import shutil
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from ccswitch.testbed.l4s.table2_config import (
    ALL_FOUR,
    CONFIGS,
    DEFAULT_DOC,
    DEFAULT_OUT,
    DURATION_S,
    GRACE_S,
    RUN_TIMEOUT_S,
    t2_path,
    write_scenarios,
)

# -------------------------------------------------------------------- run ---


def _tasks(out: Path, seeds: Sequence[int], files: dict[str, Path]) -> list[Any]:
    from ccswitch.testbed.runs.matrix import Task

    class T2Task(Task):
        def run_dir(self, results: Path) -> Path:
            return results / "runs" / self.scenario / f"seed-{self.seed}"

        def log_path(self, results: Path) -> Path:
            return results / "runs" / self.scenario / f"seed-{self.seed}.log"

    return [T2Task(c.name, files[c.name].resolve(), "static", s) for s in seeds for c in CONFIGS]


def _utc(t: float | None = None) -> str:
    return dt.datetime.fromtimestamp(time.time() if t is None else t, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _stop_time(text: str | None) -> float | None:
    """--stop-at HH:MM (UTC, today; tomorrow if already past by more than 12 h) as a Unix time."""
    if not text:
        return None
    hh, mm = (int(x) for x in text.split(":"))
    now = dt.datetime.now(dt.UTC)
    at = now.replace(hour=hh, minute=mm, second=0, microsecond=0)
    if (now - at).total_seconds() > 12 * 3600:
        at += dt.timedelta(days=1)
    return at.timestamp()


class LoadSampler(threading.Thread):
    """/proc/loadavg every *period_s* into a CSV (UTC time, 1/5/15-min load, runnable/total tasks)."""

    def __init__(self, path: Path, period_s: float = 5.0) -> None:
        super().__init__(name="loadavg", daemon=True)
        self.path, self.period_s = path, period_s
        self.stop = threading.Event()

    def run(self) -> None:
        new = not self.path.is_file()
        with self.path.open("a") as fh:
            if new:
                fh.write("utc,unix_s,load1,load5,load15,tasks\n")
            while True:
                f = Path("/proc/loadavg").read_text().split()
                fh.write(f"{_utc()},{time.time():.1f},{f[0]},{f[1]},{f[2]},{f[3]}\n")
                fh.flush()
                if self.stop.wait(self.period_s):
                    return


def postprocess(run_dir: Path) -> dict[str, Any]:
    """Queue-delay percentiles of the uplink from packets.csv (then gzipped); returns them."""
    import numpy as np

    emu = run_dir / "emulator"
    src = emu / "packets.csv"
    if not src.is_file() and (emu / "packets.csv.gz").is_file():
        src = emu / "packets.csv.gz"
    if not src.is_file():
        return {}
    t, soj, length, syn_drops = [], [], [], []
    opener = gzip.open if src.suffix == ".gz" else open
    with opener(src, "rt") as fh:
        for row in csv.DictReader(fh):
            if row["direction"] != "uplink":
                continue
            if row["verdict"] in ("forward", "mark"):
                t.append(float(row["t_us"]) / 1e6)
                soj.append(float(row["sojourn_us"]) / 1e3)
                length.append(int(row["len"]))
            elif row["verdict"].startswith("drop") and row["len"] == "60":  # 60 IP bytes: a SYN with options
                syn_drops.append(float(row["t_us"]) / 1e6)
    summary = json.loads((run_dir / "summary.json").read_text())
    offset = summary["meta"]["t0_epoch"] - summary["emulator"]["run"]["start_unix_s"]
    ts, ms = np.asarray(t) - offset, np.asarray(soj)

    def stats(mask: Any) -> dict[str, float]:
        x = ms[mask]
        if x.size == 0:
            return {}
        return {"n": int(x.size), "mean_ms": float(x.mean()), "p50_ms": float(np.percentile(x, 50)),
                "p95_ms": float(np.percentile(x, 95)), "p99_ms": float(np.percentile(x, 99))}

    in_run = (ts >= 0) & (ts < DURATION_S)
    # CoDel's target bounds the *standing* queue: the smallest sojourn in each interval (100 ms)
    win = np.floor(ts[in_run] / 0.1).astype(np.int64)
    minima = np.full(int(DURATION_S / 0.1) + 1, np.inf)
    np.minimum.at(minima, win, ms[in_run])
    minima = minima[np.isfinite(minima)]
    out = {"syn_drops": [round(x - offset, 2) for x in syn_drops],
           "standing_ms": {"windows": int(minima.size), "mean_ms": float(minima.mean()) if minima.size else None,
                           "p50_ms": float(np.median(minima)) if minima.size else None},
           "bytes_out_0_90": int(np.asarray(length, dtype=np.int64)[in_run].sum()),
           "qdelay_all": stats(np.ones(ts.size, bool)),
           "qdelay_all_four": stats((ts >= ALL_FOUR[0]) & (ts < ALL_FOUR[1]))}
    if src.suffix == ".csv":
        with src.open("rb") as fi, gzip.open(emu / "packets.csv.gz", "wb", compresslevel=6) as fo:
            shutil.copyfileobj(fi, fo)
        src.unlink()
    return out


def run_child(file: Path, seed: int, run_dir: Path) -> int:
    """One run (the child process ``run`` starts): the matrix's run_one with a longer flow grace."""
    import hashlib

    from ccswitch.testbed.runs import matrix, runner
    from ccswitch.testbed.runs.emulator import binary_path

    runner.FLOW_GRACE_S = GRACE_S
    with contextlib.suppress(OSError):  # which linkemu build this run used (others may rebuild it meanwhile)
        b = Path(binary_path())
        run_dir.parent.mkdir(parents=True, exist_ok=True)
        run_dir.with_name(f"{run_dir.name}.linkemu.json").write_text(json.dumps({
            "path": str(b), "sha256": hashlib.sha256(b.read_bytes()).hexdigest(),
            "mtime_utc": _utc(b.stat().st_mtime)}) + "\n")
    try:
        matrix.run_one(file, "static", seed, run_dir)
    except Exception as e:  # the driver reads the last error line of the log
        print(f"matrix run: error: {type(e).__name__}: {' '.join(str(e).split())}", file=sys.stderr)
        return 1
    return 0


def _child_argv(task: Any, run_dir: Path, policy_file: Path | None, guard: Sequence[str] = ()) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "one", str(task.file), str(task.seed), str(run_dir)]


def cmd_run(a: argparse.Namespace) -> int:
    from ccswitch.testbed.runs import matrix
    from ccswitch.testbed.runs.matrix import execute, finished

    matrix.child_argv = _child_argv  # execute() starts `table2.py one` (longer flow grace) instead

    if os.geteuid() != 0:
        print("table2.py run: the namespace testbed needs root (sudo)", file=sys.stderr)
        return 2
    out: Path = a.out
    files = write_scenarios(out)
    tasks = _tasks(out, a.seeds, files)
    todo = [t for t in tasks if not finished(t.run_dir(out))]
    for t in tasks:  # finished by a child whose driver was stopped: its queue-delay stats are still missing
        rd = t.run_dir(out)
        if not finished(rd):
            continue
        if not t2_path(rd).is_file():
            meta = json.loads((rd / "summary.json").read_text())["meta"]
            info = {"start_utc": _utc(meta["t0_epoch"]), "note": "post-processed later (driver stopped)"}
            t2_path(rd).write_text(json.dumps(info | postprocess(rd), indent=1) + "\n")
        elif "standing_ms" not in (info := json.loads(t2_path(rd).read_text())):  # written before it was
            t2_path(rd).write_text(json.dumps(info | postprocess(rd), indent=1) + "\n")
    stop_at = _stop_time(a.stop_at)
    print(f"table2: {len(tasks)} runs ({len(CONFIGS)} configurations x seeds {a.seeds}), {len(tasks) - len(todo)} "
          f"already finished, {len(todo)} to go, --jobs {a.jobs}"
          + (f", no new run after {_utc(stop_at)} UTC" if stop_at else ""), file=sys.stderr, flush=True)
    if not todo:
        return 0
    sampler = LoadSampler(out / "loadavg.csv")
    sampler.start()
    stop = threading.Event()
    t_start, done, failed, walls = time.monotonic(), 0, 0, []

    def one(task: Any) -> tuple[Any, Any, dict[str, Any]]:
        info = {"start_utc": _utc(), "load_before": os.getloadavg(), "jobs": a.jobs}
        o = execute(task, out, None, a.timeout_s, stop)
        info |= {"end_utc": _utc(), "load_after": os.getloadavg(), "ok": o.ok, "wall_s": round(o.wall_s, 1),
                 "error": o.error}
        if o.ok:
            try:
                info |= postprocess(task.run_dir(out))
            except Exception as e:  # the run stands; the report falls back to linkemu's summary
                info["postprocess_error"] = f"{type(e).__name__}: {e}"
        t2_path(task.run_dir(out)).write_text(json.dumps(info, indent=1) + "\n")
        return task, o, info

    pending = list(todo)
    skipped = 0
    try:
        with ThreadPoolExecutor(max_workers=a.jobs) as pool:
            running: set[Future[Any]] = set()
            while pending or running:
                while pending and len(running) < a.jobs:
                    if stop_at is not None and time.time() >= stop_at:
                        skipped = len(pending)
                        print(f"table2: {_utc()} UTC is past --stop-at: {skipped} runs not started",
                              file=sys.stderr, flush=True)
                        pending.clear()
                        break
                    running.add(pool.submit(one, pending.pop(0)))
                if not running:
                    break
                finished_now, running = wait(running, return_when=FIRST_COMPLETED)
                for fut in finished_now:
                    task, o, info = fut.result()
                    done += 1
                    failed += not o.ok
                    walls.append(o.wall_s)
                    left = len(pending) + len(running)
                    eta = (time.monotonic() - t_start) / done * left
                    print(f"table2 [{done}/{len(todo)}, ETA {int(eta // 60)}:{int(eta % 60):02d}] {task.scenario} "
                          f"seed {task.seed} {'ok' if o.ok else 'FAILED: ' + o.error} in {o.wall_s:.0f} s "
                          f"(load {info['load_after'][0]:.2f})", file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        stop.set()
        raise
    finally:
        sampler.stop.set()
        sampler.join(5.0)
    print(f"table2: {done - failed} runs finished, {failed} failed, {skipped} not started -> {out}",
          file=sys.stderr)
    return 1 if failed else 0


def main(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="generate the 20 scenarios and run the unfinished ones")
    r.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    r.add_argument("--jobs", type=int, default=1, help="runs at once (default 1)")
    r.add_argument("--out", type=Path, default=DEFAULT_OUT)
    r.add_argument("--stop-at", metavar="HH:MM", help="UTC time after which no new run starts")
    r.add_argument("--timeout-s", type=float, default=RUN_TIMEOUT_S, help="per-run time bound")
    p = sub.add_parser("report", help="tables and plots of the finished runs")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the results folder of `run`")
    p.add_argument("--doc", type=Path, default=DEFAULT_DOC, help="markdown file; plots go beside it")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3], help="the seeds that were planned")
    o = sub.add_parser("one", help=argparse.SUPPRESS)  # the child process of one run
    o.add_argument("file", type=Path)
    o.add_argument("seed", type=int)
    o.add_argument("run_dir", type=Path)
    a = ap.parse_args(argv)
    if a.cmd == "one":
        return run_child(a.file, a.seed, a.run_dir)
    if a.cmd == "run":
        if a.jobs < 1:
            ap.error("--jobs must be >= 1")
        if a.stop_at:
            try:
                _stop_time(a.stop_at)
            except ValueError:
                ap.error(f"--stop-at {a.stop_at!r}: expected HH:MM (UTC)")
        return cmd_run(a)
    from ccswitch.testbed.l4s import table2_report  # the report side (tables, plots) lives there

    return table2_report.cmd_report(a)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
