"""Paper 001's headline set-up on the testbed: one flow per run, LFQ's learned limits against fq and FQ-CoDel.

Paper 001 (LFQ, section VII, Table VII) draws single flows -- bandwidth U[5, 25]
Mbit/s, RTT U[5, 25] ms, NewReno or BIC, U[3.75, 6.25] s -- over two directly
connected hosts, and compares the bottleneck queue's average throughput, maximum
and average queue (packets) under LFQ, FqCoDel, fq with 100 and fq with 1000
packets per flow.  Here: the same draws (BIC or CUBIC: see Sender), one TCP flow from a
client namespace through linkemu's uplink (rate b, delay RTT / 2 each way, the
ACK path a 100-packet FIFO as the paper's other buffers) to the server, with
the uplink queue one of :data:`ARMS`.  Every draw runs under every arm (paired).

    python -m ccswitch.testbed.lfq_reproduction run [--runs 200] [--arms fq-100,fq-1000,fq_codel,lfq]
        [--actor models/lfq_actor.json] [--out results/lfq-repro] [--seed 1]
        [--sender linux|no-sack|bic|no-sack-bic|bic-classic-sack|no-sack-reno-bic]
    python -m ccswitch.testbed.lfq_reproduction report [--results results/lfq-repro]
        [--doc docs/network/lfq-reproduction.md]
    python -m ccswitch.testbed.lfq_reproduction report-senders --results DIR --results DIR ...
    python -m ccswitch.testbed.lfq_reproduction sweep [--reps 3] [--sender no-sack-reno-bic] [--out results/lfq-sweep]
    python -m ccswitch.testbed.lfq_reproduction report-sweep [--results results/lfq-sweep]
        [--doc docs/network/lfq-sweep.md]

``run`` is resumable (a run's JSON is never repeated) and prints progress with
an ETA; root.  **Measurement**: linkemu's control socket is polled every 10 ms
(the lfq arm: by the agent loop itself, :mod:`ccswitch.testbed.runs.lfq_agent`,
which also sets the limits): the uplink backlog (packets) and bytes out.  From
the first byte out for the flow's duration: throughput = bytes out x 8 /
duration, average and maximum of the sampled backlog (a 10 ms sample misses
peaks shorter than that: the maximum is a lower bound, the same for every
arm).  The lfq arm also records the limit the agent set, averaged over the
flow's second half (the paper's "output maximum queue length" once the flow
is fingerprinted), for the correlation with the BDP and the Reno:CUBIC ratio.

**Sweep** (``sweep``): paper 001 measures the learned limit's dependence (its Table I:
correlation with the bandwidth, and with the delay; Figure 8) by varying one of them while
the other stays put.  ``sweep`` does the same with the lfq arm only: bandwidth 5..25 Mbit/s
at a 15 ms RTT, RTT 5..25 ms at 15 Mbit/s (:data:`SWEEP_GRID`), 5 s flows, Reno and the BIC
slot, ``--reps`` flows per point; :mod:`ccswitch.testbed.reports.lfq_sweep` reports it.

**Sender** (``--sender``, the profiles of :mod:`ccswitch.testbed.runs.tcp_senders`):
the client namespace's SACK and the CCA that runs the paper's BIC (CUBIC, or
ccswitch's BPF BIC), set before every run.  Each run records its sender and the CCA
it ran; a folder holds one sender only (docs/network/lfq.md).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from .runs.tcp_senders import SENDERS, apply_sender, held_loss_based, run_cca

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = Path("results/lfq-repro")
DEFAULT_DOC = REPO / "docs" / "network" / "lfq-reproduction.md"
DEFAULT_ACTOR = REPO / "models" / "lfq_actor.json"
PORT = 5201
SAMPLE_S = 0.01

ARMS: dict[str, dict[str, Any]] = {
    "fq-100": {"kind": "fq", "flow_limit_pkts": 100},
    "fq-1000": {"kind": "fq", "flow_limit_pkts": 1000},
    "fq_codel": {"kind": "fq_codel"},  # Linux defaults: 1024 flows, quantum 1514, 5 ms / 100 ms
    "lfq": {"kind": "lfq"},  # + the agent (the actor file) setting each flow's limit every 10 ms
}
def draws(n: int, seed: int) -> list[dict[str, Any]]:
    """The paper's distribution, *n* draws (fixed by *seed*: every arm runs the same ones)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        out.append({"i": i, "bandwidth_mbit": round(float(rng.uniform(5, 25)), 2),
                    "rtt_ms": round(float(rng.uniform(5, 25)), 2), "cca": str(rng.choice(("reno", "cubic"))),
                    "duration_s": round(float(rng.uniform(3.75, 6.25)), 3)})
    return out


class _Poller:
    """Polls the uplink's backlog and bytes out every SAMPLE_S (the arms without an agent)."""

    def __init__(self, ctl: Any) -> None:
        self.ctl = ctl
        self.trace: list[tuple[float, int, int, dict[int, int]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> _Poller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5.0)

    def _run(self) -> None:
        nxt = time.monotonic()
        while not self._stop.is_set():
            st = self.ctl.state("uplink", fields=("backlog_pkts", "bytes_out"))
            d = st["uplink"]
            self.trace.append((float(st["t_s"]), int(d["backlog_pkts"]), int(d["bytes_out"]), {}))
            nxt += SAMPLE_S
            self._stop.wait(max(nxt - time.monotonic(), 0.0))


def one_run(topo: Any, draw: dict[str, Any], arm: str, actor: Any, workdir: Path,
            sender: str = "linux") -> dict[str, Any]:
    """One flow of *draw* through the *arm* queue, sent by *sender*; the run's metrics."""
    from .runs.emulator import Emulator, emulator_config, link
    from .runs.iperf import IperfFlow, start_server
    from .runs.lfq_agent import AgentLoop
    from .runs.linkemu_control import LinkemuControl

    sock = workdir / "linkemu.sock"
    b, rtt = draw["bandwidth_mbit"], draw["rtt_ms"]
    cfg = emulator_config(topo.client_ifs, topo.server_if, seed=draw["i"] + 1, interval_ms=1000,
                          uplink=link(b, rtt / 2, qdisc=dict(ARMS[arm])),
                          downlink=link(b, rtt / 2, limit_pkts=100),
                          control={"socket": str(sock)})
    agent_rec: dict[str, Any] = {}
    with contextlib.ExitStack() as st:
        st.enter_context(Emulator(topo.router, cfg, stats_dir=workdir / "emulator"))
        ctl = st.enter_context(LinkemuControl(sock, connect_timeout=5.0))
        st.enter_context(start_server(topo.server, PORT, bind=topo.server_addr))
        sampler: Any = AgentLoop(sock, actor, direction="uplink", trace=True) if arm == "lfq" else _Poller(ctl)
        with sampler:
            cca = run_cca(draw["cca"], sender)
            flow = IperfFlow(topo.clients[0], topo.server_addr, PORT, cca=cca,
                             seconds=draw["duration_s"], interval=1.0)
            with flow:
                flow.wait(timeout=draw["duration_s"] + 20)
        if arm == "lfq":
            agent_rec = {"steps": sampler.steps, "sets": sampler.sets, "refused": sampler.refused,
                         "cpu_ms_per_step": round(1e3 * sampler.cpu_s / max(sampler.steps, 1), 4),
                         "error": sampler.error}
    return {**draw, "cca": cca, "sender": sender, "arm": arm, **_metrics(sampler.trace, draw["duration_s"]),
            "agent": agent_rec or None}


def _metrics(trace: list[tuple[float, int, int, dict[int, int]]], dur: float) -> dict[str, Any]:
    t0 = next((t for t, _, out, _ in trace if out > 0), None)
    if t0 is None:
        return {"throughput_mbit": 0.0, "avg_queue_pkts": math.nan, "max_queue_pkts": math.nan}
    win = [(t, q, out, lim) for t, q, out, lim in trace if t0 <= t <= t0 + dur]
    out0 = max((out for t, _, out, _ in trace if t < t0), default=0)
    t_end, _, out_end, _ = win[-1]
    qs = [q for _, q, _, _ in win]
    res: dict[str, Any] = {"throughput_mbit": round((out_end - out0) * 8 / 1e6 / max(t_end - t0, 1e-3), 4),
                           "avg_queue_pkts": round(float(np.mean(qs)), 3), "max_queue_pkts": int(max(qs)),
                           "samples": len(win)}
    lims = [(t, max(lim.values())) for t, _, _, lim in win if lim]
    if lims:
        late = [v for t, v in lims if t >= t0 + dur / 2]
        res["limit_mean"] = round(float(np.mean([v for _, v in lims])), 2)
        res["limit_late"] = round(float(np.mean(late)), 2) if late else None
    return res


def folder_sender(out: Path) -> str | None:
    """The sender of the runs already in *out* (None: no runs yet); runs from before senders existed are linux."""
    for f in out.glob("*/run-*.json"):
        return str(json.loads(f.read_text()).get("sender", "linux"))
    return None


SWEEP_GRID = tuple(5.0 + 2.5 * k for k in range(9))
"""Paper 001's ranges, 5 to 25 (Mbit/s or ms), in 9 steps: the points of its Figure 8 sweep."""
SWEEP_FIXED = {"bandwidth_mbit": 15.0, "rtt_ms": 15.0}
"""The variable a sweep holds still, at the middle of its range (the paper's Figures 5-7 use 15 ms)."""
SWEEP_DURATION_S = 5.0
"""The mean of the paper's U[3.75, 6.25] s."""
SWEEP_FIRST_I = 10_000
"""Sweep runs are numbered from here, so a sweep folder can never be mistaken for the draws'."""


def sweep_draws(reps: int) -> list[dict[str, Any]]:
    """Paper 001's Figure 8 / Table I set-up: for Reno and the BIC slot, the bandwidth swept at a fixed
    RTT and the RTT at a fixed bandwidth, *reps* flows per point (each with its own linkemu seed)."""
    out = []
    i = SWEEP_FIRST_I
    for rep in range(1, reps + 1):
        for cca in ("reno", "cubic"):
            for var in ("bandwidth_mbit", "rtt_ms"):
                for v in SWEEP_GRID:
                    d = {**SWEEP_FIXED, var: v}
                    out.append({"i": i, "bandwidth_mbit": d["bandwidth_mbit"], "rtt_ms": d["rtt_ms"], "cca": cca,
                                "duration_s": SWEEP_DURATION_S, "sweep": var, "rep": rep})
                    i += 1
    return out


def run(n: int, arms: list[str], out: Path, actor_path: Path, seed: int, sender: str = "linux") -> None:
    """Paper 001's Table VII set-up: *n* draws of its distribution under every arm."""
    run_draws(draws(n, seed), arms, out, actor_path, sender, f"{n} draws x {len(arms)} arms, seed {seed}")


def run_draws(todo_draws: list[dict[str, Any]], arms: list[str], out: Path, actor_path: Path, sender: str,
              what: str) -> None:
    """Each draw under each arm, skipping the runs *out* already has; progress with an ETA on stderr."""
    from ccswitch.models.lfq_actor import load_actor

    from .runs.topology import Topology

    actor = load_actor(actor_path) if "lfq" in arms else None
    todo = [(d, a) for d in todo_draws for a in arms if not (out / a / f"run-{d['i']:04d}.json").is_file()]
    print(f"lfq reproduction: {len(todo)} runs to do ({what}, sender {sender})", file=sys.stderr, flush=True)
    workdir = out / "_work"
    workdir.mkdir(parents=True, exist_ok=True)
    t_start = time.monotonic()
    with contextlib.ExitStack() as stack:
        stack.enter_context(held_loss_based(sender))  # until the last run
        topo = stack.enter_context(Topology(1))
        for k, (d, a) in enumerate(todo, 1):
            apply_sender(topo.clients[0], sender, d["cca"])
            res = one_run(topo, d, a, actor, workdir, sender)
            if actor is not None and a == "lfq":
                res["actor_checksum"] = actor.checksum
            dest = out / a / f"run-{d['i']:04d}.json"
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(json.dumps(res) + "\n")
            el = time.monotonic() - t_start
            print(f"lfq reproduction: [{k}/{len(todo)}] draw {d['i']} {a}: {res['throughput_mbit']:.1f} Mbit/s "
                  f"(b {d['bandwidth_mbit']}, RTT {d['rtt_ms']}), avg queue {res['avg_queue_pkts']:.1f}, "
                  f"max {res['max_queue_pkts']}{', limit ' + str(res.get('limit_late')) if a == 'lfq' else ''}; "
                  f"ETA {el / k * (len(todo) - k) / 60:.0f} min", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ccswitch.testbed.lfq_reproduction",
                                 description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run the draws under every arm (resumable; root)")
    r.add_argument("--runs", type=int, default=200)
    r.add_argument("--arms", default=",".join(ARMS))
    r.add_argument("--out", type=Path, default=DEFAULT_OUT)
    r.add_argument("--actor", type=Path, default=DEFAULT_ACTOR)
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--sender", choices=list(SENDERS), default="linux",
                   help="the client's TCP: linux (as it comes: SACK, CUBIC for BIC), no-sack (NewReno "
                        "recovery), bic / no-sack-bic (the paper's BIC, bpf/bic.bpf.c)")
    w = sub.add_parser("sweep", help="paper 001's Figure 8 sweep: the LFQ limit against bandwidth, and against "
                                    "RTT, per CCA (resumable; root)")
    w.add_argument("--reps", type=int, default=3, help="flows per point (default 3)")
    w.add_argument("--out", type=Path, default=Path("results/lfq-sweep"))
    w.add_argument("--actor", type=Path, default=DEFAULT_ACTOR)
    w.add_argument("--sender", choices=list(SENDERS), default="no-sack-reno-bic",
                   help="as for run (default: no-sack-reno-bic, the profile closest to the paper's Table VII)")
    ws = sub.add_parser("report-sweep", help="Table I (correlations) and Table II (Reno:BIC) from a sweep folder")
    ws.add_argument("--results", type=Path, default=Path("results/lfq-sweep"))
    ws.add_argument("--doc", type=Path, default=DEFAULT_DOC.with_name("lfq-sweep.md"))
    p = sub.add_parser("report", help="tables and a plot from the runs")
    p.add_argument("--results", type=Path, default=DEFAULT_OUT)
    p.add_argument("--doc", type=Path, default=DEFAULT_DOC)
    m = sub.add_parser("report-seeds", help="one page for several seeds' run folders, pooled")
    m.add_argument("--results", type=Path, action="append", required=True, metavar="DIR",
                   help="a seed's run folder (give it once per seed; labelled by its order: seed 1, 2, ...)")
    m.add_argument("--labels", default="", help="comma-separated labels for the folders (default: seed 1, 2, ...)")
    m.add_argument("--doc", type=Path, default=DEFAULT_DOC.with_name("lfq-reproduction-seeds.md"))
    d = sub.add_parser("report-senders", help="the baselines of several sender profiles' folders against the paper")
    d.add_argument("--results", type=Path, action="append", required=True, metavar="DIR",
                   help="a sender's run folder (once per sender; labelled by the sender its runs record)")
    d.add_argument("--doc", type=Path, default=DEFAULT_DOC.with_name("lfq-reproduction-senders.md"))
    a = ap.parse_args(argv)
    if a.cmd == "report-senders":
        missing = [str(x) for x in a.results if folder_sender(x) is None]
        if missing:
            ap.error(f"no runs in {', '.join(missing)}: give folders written by `run`")
        from .reports.lfq_reproduction import report_senders

        report_senders({str(folder_sender(x)): x for x in a.results}, a.doc)
        return 0
    if a.cmd == "report-seeds":
        labels = [x.strip() for x in a.labels.split(",") if x.strip()] or \
            [f"seed {k}" for k in range(1, len(a.results) + 1)]
        missing = [str(d) for d in a.results if not d.is_dir()]
        if missing or len(labels) != len(a.results):
            ap.error(f"no run folder {', '.join(missing)}" if missing else
                     f"{len(labels)} labels for {len(a.results)} folders: give one per --results")
        from .reports.lfq_reproduction import report_seeds

        report_seeds(dict(zip(labels, a.results, strict=True)), a.doc)
        return 0
    if a.cmd == "report-sweep":
        if folder_sender(a.results) is None:
            ap.error(f"no runs in {a.results}: give a folder written by `sweep`")
        from .reports.lfq_sweep import report_sweep

        report_sweep(a.results, a.doc)
        return 0
    if a.cmd in ("run", "sweep"):
        had = folder_sender(a.out)
        if had is not None and had != a.sender:
            ap.error(f"{a.out} holds runs with sender {had}, not {a.sender}: give --sender {had} "
                     f"to resume it, or another --out")
    if a.cmd == "sweep":
        if a.reps < 1:
            ap.error(f"--reps {a.reps}: give at least 1 flow per point")
        from .runs.netns_lifecycle import sigterm_as_exit

        with sigterm_as_exit():
            sweep = sweep_draws(a.reps)
            run_draws(sweep, ["lfq"], a.out, a.actor, a.sender, f"sweep, {len(sweep)} points x reps")
        return 0
    if a.cmd == "run":
        arms = [x for x in a.arms.split(",") if x]
        bad = [x for x in arms if x not in ARMS]
        if bad:
            ap.error(f"unknown arm(s) {', '.join(bad)}; known: {', '.join(ARMS)}")
        from .runs.netns_lifecycle import sigterm_as_exit

        with sigterm_as_exit():  # kill tears the topology and linkemu down (the run in progress is redone)
            run(a.runs, arms, a.out, a.actor, a.seed, a.sender)
    else:
        from .reports.lfq_reproduction import report

        report(a.results, a.doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
