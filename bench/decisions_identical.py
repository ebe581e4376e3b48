"""Are ccswitchd's decisions, control-socket answers and --record output the same as at revision REV?

    .venv/bin/python bench/decisions_identical.py REV [--steps 60]

For a change of the daemon's internals that must not change behaviour (e.g. issue 12:
FlowSample batches as numpy FlowFrames instead of pyarrow Tables).  Each case runs in a
subprocess, once with REV's package (`git archive`, as bench/daemon_tick.py --compare lays it
out) and once with this tree, on the same synthetic flows and a fake clock:

* a controller on a fake data plane (flows coming and going on three paths, per-CCA
  throughput plus seeded noise, states other than ESTABLISHED; guard with hysteresis, dwell,
  post-switch evaluation with reverts and hold-offs, jitter off), for dqn, heuristic with and
  without exploration, observe and static, each with the monitor read once per decision
  (tick 1 s) and every tick with --record (tick 0.5 s: two ticks aggregated per decision);
* per step: every decisions-JSONL line, and every 5 steps the answers of status (without
  pid, uptime and timings), flows, history, and explain for up to two flows;
* the --record Parquet file (bytes) and the kernel sampler (ccswitch.sampler) on synthetic
  monitor records: its tables written to Parquet (bytes).

This tree runs twice: its plane hands the controller FlowFrames (sample_frame, as DataPlane
does) and pyarrow Tables (sample, as test fakes do).  Everything must be byte-identical.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
if len(sys.argv) > 2 and sys.argv[1] == "--tree":  # a child on REV's tree
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f)]
    sys.path.insert(0, sys.argv[2])
    del sys.argv[1:3]
import argparse
import hashlib
import json
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

CASES = ("dqn", "heuristic", "heuristic-explore", "observe", "static")
VOLATILE = ("pid", "uptime_s", "tick_ms_last", "tick_ms_mean", "tick_ms_p50", "tick_ms_p99", "tick_ms_max",
            "sample_ms_p50", "sample_ms_p99", "own_ms_p50", "own_ms_p99")
MBPS = {"10.0.1.1": {"cubic": 20.0, "bbr": 45.0, "pcc": 30.0}, "10.0.1.2": {"cubic": 40.0, "bbr": 15.0, "pcc": 25.0},
        "fd00::3": {"cubic": 12.0, "bbr": 12.5, "pcc": 35.0}}


class Clock:
    def __init__(self) -> None:
        self.t = 1_700_000_000.0

    def __call__(self) -> float:
        return self.t


class Plane:
    """Flows on three paths; throughput by path and CCA with seeded noise; flows come and go."""

    def __init__(self, clock: Clock, frames: bool, seed: int = 7):
        self.clock = clock
        self.rng = np.random.default_rng(seed)
        self.cca: dict[int, str] = {}
        self.dst: dict[int, str] = {}
        self.next_id = 1000
        self.step = 0
        for _ in range(12):
            self._add()
        if frames:  # this tree: FlowFrames, as DataPlane.sample_frame
            self.sample_frame = self._frame

    def _add(self) -> None:
        fid = self.next_id = self.next_id + 7919
        self.cca[fid] = ("cubic", "bbr", "pcc", "reno")[fid % 4]
        self.dst[fid] = list(MBPS)[fid % 3]

    def churn(self) -> None:
        self.step += 1
        if self.step % 7 == 0:
            for fid in sorted(self.cca)[:2]:
                del self.cca[fid], self.dst[fid]
            for _ in range(2):
                self._add()

    def _columns(self) -> dict[str, Any]:
        from ccswitch.schema import FIELDS

        ids = sorted(self.cca)
        n = len(ids)
        r = self.rng
        thr = np.array([MBPS[self.dst[f]].get(self.cca[f], 8.0) * 1e6 for f in ids]) * r.uniform(0.9, 1.1, n)
        cols: dict[str, Any] = {f.name: np.zeros(n, dtype=np.dtype(f.type.to_pandas_dtype()) if not
                                              f.type.equals(_pa().string()) else object) for f in FIELDS}
        state = np.ones(n, np.uint8)
        state[r.uniform(size=n) < 0.08] = 8  # CLOSE_WAIT: still managed
        state[r.uniform(size=n) < 0.04] = 4  # FIN_WAIT1: not
        cols.update({"ts_s": np.full(n, self.clock.t), "interval_s": np.full(n, 0.5),
                     "flow_id": np.array(ids, np.uint64), "netns_cookie": np.ones(n, np.uint64),
                     "cgroup_id": np.full(n, 5, np.uint64), "src": ["10.0.0.1" if ":" not in self.dst[f] else "fd00::1"
                                                                     for f in ids],
                     "sport": (np.array(ids) % 50000 + 1024).astype(np.uint16), "dst": [self.dst[f] for f in ids],
                     "dport": np.full(n, 5201, np.uint16), "cca": [self.cca[f] for f in ids],
                     "throughput_bps": thr, "goodput_bps": thr * 0.97, "sending_rate_bps": thr * r.uniform(1, 1.2, n),
                     "byte_rate_bps": thr, "delivery_rate_bps": thr * 1.1, "pacing_rate_bps": np.full(n, np.nan),
                     "rtt_us": r.uniform(10e3, 60e3, n), "rttvar_us": r.uniform(1e3, 5e3, n),
                     "min_rtt_us": np.full(n, 9e3), "jitter_us": np.where(r.uniform(size=n) < 0.1, np.nan,
                                                                          r.uniform(0, 3e3, n)),
                     "rtt_samples": r.integers(0, 40, n).astype(np.uint32), "loss_rate": r.uniform(0, 0.03, n),
                     "lost_segs": r.integers(0, 5, n).astype(np.uint32), "retrans_segs": r.integers(0, 5, n).astype(
                         np.uint32), "sent_segs": r.integers(50, 500, n).astype(np.uint32),
                     "delivered_segs": r.integers(50, 500, n).astype(np.uint32),
                     "cwnd_segs": r.integers(10, 300, n).astype(np.uint32), "ssthresh_segs": np.full(n, 2**31 - 1,
                                                                                                    np.uint32),
                     "sndq_bytes": np.where(r.uniform(size=n) < 0.15, 0, 10000).astype(np.uint32),
                     "mss_bytes": np.full(n, 1448, np.uint32), "state": state, "ca_state": np.zeros(n, np.uint8),
                     "ecn_mode": np.zeros(n, np.uint8), "ce_segs": np.zeros(n, np.uint32),
                     "ce_fraction": np.full(n, np.nan), "received_ce_segs": np.zeros(n, np.uint32)})
        cols["rtt_ratio"] = cols["rtt_us"] / cols["min_rtt_us"]
        return cols

    def sample(self) -> Any:
        pa = _pa()
        from ccswitch.schema import FLOW_SAMPLE_SCHEMA

        cols = self._columns()
        return pa.Table.from_arrays([pa.array(cols[f.name], f.type) for f in FLOW_SAMPLE_SCHEMA],
                                    schema=FLOW_SAMPLE_SCHEMA)

    def _frame(self) -> Any:
        from ccswitch.frame import FlowFrame

        cols = self._columns()
        for k in ("src", "dst", "cca"):  # as the sampler gives them: values in first-seen order, unsorted
            vals = list(dict.fromkeys(cols[k]))
            cols[k] = (np.array([vals.index(v) for v in cols[k]], np.int64), vals)
        return FlowFrame(cols)

    def switch_many(self, requests: list[tuple[int, str, str]]) -> list[Any]:
        from ccswitch.bpf.switcher import SwitchResult

        out = []
        for fid, to, inh in requests:
            ok = fid in self.cca and (fid + self.step) % 11 != 0  # now and then the kernel refuses
            out.append(SwitchResult(fid, to, inh, ok=ok, cca_before=self.cca.get(fid, ""),
                                    cca_after=to if ok else self.cca.get(fid, ""),
                                    error=None if ok else "refused (synthetic)"))
            if ok:
                self.cca[fid] = to
        return out


def _pa() -> Any:
    import pyarrow as pa

    return pa


def run_case(case: str, frames: bool, record: bool, steps: int, out: Path) -> None:
    from ccswitch.daemon.config import parse_config
    from ccswitch.daemon.controller import Controller
    from ccswitch.daemon.policies import build_decider
    from ccswitch.daemon.recorder import Recorder

    kind = {"heuristic-explore": "heuristic"}.get(case, case)
    tick = 0.5 if record else 1.0
    cfg = parse_config({"daemon": {"tick_s": tick}, "log": {"all_decisions": True},
                        "policy": {"kind": kind, "decision_interval_s": 1.0, "static_cca": "bbr",
                                   "explore": case == "heuristic-explore", "explore_every_s": 20.0},
                        "flows": {"min_age_s": 2.0},
                        "guard": {"min_dwell_s": 3.0, "eval_window_s": 3.0, "consecutive": 2, "margin": 0.05,
                                  "max_switches_per_min": 6, "revert_threshold": 0.05, "holdoff_s": 10.0,
                                  "jitter_s": 0.0}})
    dec, _ = build_decider(dict(cfg.policy))
    clock = Clock()
    plane = Plane(clock, frames)
    lines: list[str] = []
    rec = Recorder(out / "record.parquet" if record else None, out / "decisions.jsonl")
    with rec:
        ctl = Controller(cfg, dec, plane, clock=clock, available=lambda: ["cubic", "bbr", "pcc", "reno"],
                         recorder=rec)
        for step in range(steps * (2 if record else 1)):
            ctl.tick()
            clock.t += tick
            if record and step % 2 == 0:
                continue
            plane.churn()
            if plane.step % 5 == 0:
                st = {k: v for k, v in ctl.status().items() if k not in VOLATILE}
                if "file" in st["policy"]:  # the policy file of each tree: the same file, another path
                    st["policy"]["file"] = Path(st["policy"]["file"]).name
                lines.append(json.dumps({"step": plane.step, "status": st}))
                lines.append(json.dumps({"flows": ctl.flows()}))
                lines.append(json.dumps({"history": list(ctl.history)}))
                for row in ctl.flows()[:2]:
                    try:
                        lines.append(json.dumps({"explain": ctl.explain_flow(row["flow_id"])}))
                    except ValueError as e:
                        lines.append(json.dumps({"explain_error": str(e)}))
    (out / "answers.jsonl").write_text("\n".join(lines) + "\n")


def run_sampler(out: Path, ticks: int = 8) -> None:
    """The kernel sampler on synthetic monitor records (flows established, running, closing)."""
    import pyarrow.parquet as pq

    from ccswitch.bpf.monitor import FLOW_RECORD_DTYPE
    from ccswitch.sampler import Sampler

    rng = np.random.default_rng(3)
    n = 40
    base = np.zeros(n, dtype=FLOW_RECORD_DTYPE)
    base["cookie"] = np.arange(n) * 104729 + 11
    base["family"] = np.where(np.arange(n) % 5 == 0, 10, 2)
    base["saddr"][:, 0] = 0x0100000A
    base["daddr"][:, 0] = 0x0101000A + (np.arange(n) % 4 << 24)
    base["daddr"][base["family"] == 10] = [0xFD, 0, 0, 0x03000000]
    base["sport"], base["dport"] = np.arange(n) + 40000, 5201
    base["cca"] = [(b"cubic", b"bbr", b"pcc", b"prague")[i % 4] for i in range(n)]
    base["state"] = 1
    base["established_ns"] = np.where(np.arange(n) % 3 == 0, 10**9, 0)
    snaps = []
    t = 2 * 10**9
    cur = base.copy()
    for k in range(ticks):
        t += 200_000_000
        cur = cur.copy()
        cur["ts_ns"] = t + rng.integers(0, 1000, n)
        for f in ("bytes_acked", "bytes_sent", "rtt_samples", "rtt_absdiff_sum_us"):
            cur[f] += rng.integers(0, 10**6, n).astype(np.uint64)
        for f in ("delivered", "delivered_ce", "lost", "total_retrans", "data_segs_out", "write_seq",
                  "received_ce"):
            cur[f] = (cur[f].astype(np.uint64) + rng.integers(0, 2**31, n).astype(np.uint64)) % 2**32
        for f in ("srtt_us", "rttvar_us", "min_rtt_us", "snd_cwnd", "sndq_bytes", "mss", "packets_out"):
            cur[f] = rng.integers(1, 10**5, n)
        cur["pacing_rate"] = np.where(rng.uniform(size=n) < 0.2, np.uint64(2**64 - 1),
                                      rng.integers(1, 10**8, n).astype(np.uint64))
        cur["delivery_rate"] = rng.integers(1, 10**8, n)
        cur["ecn_flags"] = rng.choice([0, 1, 16, 17], n)
        keep = rng.uniform(size=n) > 0.1 * (k % 3)  # some flows missing now and then
        snaps.append(cur[keep])
    s = Sampler(lambda: snaps.pop(0))
    s._mono_to_wall = 1.7e9  # instead of this process' wall - monotonic clock offset
    for k in range(ticks):
        pq.write_table(s.tick(), out / f"sampler{k}.parquet", compression="zstd")


def child(a: argparse.Namespace) -> None:
    import logging

    logging.getLogger("ccswitchd").addHandler(logging.NullHandler())  # the refusals' warnings: not here
    out = Path(a.out)
    if a.case == "sampler":
        run_sampler(out)
    else:
        run_case(a.case, a.frames, a.record, a.steps, out)


def digest(d: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()[:16] for p in sorted(d.iterdir())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rev", nargs="?")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--case", help=argparse.SUPPRESS)
    ap.add_argument("--frames", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--record", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a)
        return
    if not a.rev:
        ap.error("name the revision to compare with, e.g. HEAD")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from daemon_tick import tree_of

    tree = tree_of(a.rev)
    me = str(Path(__file__).resolve())
    tmp = Path(tempfile.mkdtemp(prefix="ccswitch-decisions-"))
    ok = True
    runs = [(c, rec) for c in CASES for rec in (False, True)] + [("sampler", False)]
    try:
        for case, record in runs:
            outs = {}
            for who in ("rev", "frames", "arrow"):
                if case == "sampler" and who == "arrow":
                    continue
                d = tmp / f"{case}-{int(record)}-{who}"
                d.mkdir()
                pre = ["--tree", str(tree)] if who == "rev" else []
                argv = [sys.executable, me, *pre, "--child", "--case", case, "--steps", str(a.steps), "--out", str(d)]
                argv += ["--frames"] * (who == "frames") + ["--record"] * record
                subprocess.run(argv, check=True)
                outs[who] = digest(d)
            same = all(o == outs["rev"] for o in outs.values())
            ok &= same
            lines = sum(1 for _ in (tmp / f"{case}-{int(record)}-rev" / "decisions.jsonl").open()) \
                if case != "sampler" else 0
            print(f"{case:>18} {'--record' if record else '':>8}: {'identical' if same else 'DIFFERENT'}"
                  f" ({', '.join(f'{k} {v}' for k, v in outs['rev'].items())}; {lines} decision lines)")
            if not same:
                for who, o in outs.items():
                    print(f"    {who}: {o}")
    finally:
        if ok:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"outputs kept in {tmp}")
        shutil.rmtree(tree.parent, ignore_errors=True)
    print("PASS: byte-identical" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
