"""Run a scenario: topology, emulator, iperf3 flows, tshark, monitor, scripted switches.

One run (one seed) goes like this::

    Topology (clients, router, server)        testbed/runs/topology.py
    -> link emulator in the router            linkemu (testbed/runs/emulator.py) or the kernel bridge
    -> iperf3 servers (-J) in the server      one per flow, port BASE_PORT + flow index
    -> tshark on the server's veth            headers only, filtered on the iperf3 ports
    -> one monitor thread per client          DataPlane inside the client namespace: samples
                                              every sample_interval_s, runs the scripted switches
       or, with the daemon on that client,    ccswitchd in the namespace (testbed/runs/daemons.py): it
                                              samples every tick and decides; the thread sends the
                                              scripted switches through its socket; its record is
                                              re-binned onto sample_interval_s at the end
    -> the scenario clock starts; flows start at their start_s (iperf3 -J --cport)
    -> a progress line on stderr until the end
    -> everything stops in reverse order; the run folder gets the raw outputs,
       then :func:`ccswitch.testbed.reports.run.report_run` adds the tables and plots.

This module carries a run out (the flows on schedule, the run folder and its
summary.json) and is the entry point; the parts are in ``run_setup`` (what is
set up before the clock starts: topology, emulator, router agents, Prague,
tcp_ecn, iperf3 servers, tshark), ``run_monitors`` (the scenario clock and each
client's monitor thread or ccswitchd), ``run_progress`` (the progress line)
and ``run_error`` (:class:`RunError`).

Run folder (``OUT/run-01-seed-1/``)::

    scenario.toml          the scenario as given
    emulator/              config.json (+ linkemu's summary.json, intervals.csv, packets.csv)
    iperf/NAME.json        iperf3 client JSON per flow; NAME.server.json the server's
    capture.pcapng         tshark capture of the server's veth
    samples.parquet        FlowSample rows (ccswitch.schema) of the iperf3 data flows
    flows.parquet          flow_id -> run, flow, client, ports, initial CCA
    switches.json          scripted switches and their results
    daemon/C<n>/           with the daemon: ccswitchd.toml, record.parquet (every tick's FlowSample
                           rows), decisions.jsonl, ccswitchd.log
    summary.json           meta, iperf3 totals, switches, emulator summary, metrics
    table.md, table.csv, fairness.csv, plots/*.png   (report.py)

External mode (:class:`External`): no namespaces, emulator or servers; the flows
of the chosen clients leave this host towards a real server (see
``testbed/mikrotik/README.md``).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import math
import os
import platform
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ccswitch.schema import FLOW_SAMPLE_SCHEMA

from ..scenario import Flow, Scenario
from .iperf import IperfError, IperfFlow, IperfServer, start_flow
from .netns import cleanup_leftovers
from .netns_lifecycle import sigterm_as_exit
from .policy_server import policy_server, with_remote
from .run_error import RunError
from .run_monitors import ClientMonitor, Clock, DaemonClient, daemon_session, start_monitors
from .run_progress import Progress
from .run_setup import netns_side, prague_default_here

__all__ = [
    "External",
    "RunError",
    "cleanup",
    "daemon_session",
    "default_out_dir",
    "run_once",
    "run_scenario",
]

HERE_NS = "/proc/self/ns/net"
"""Namespace file meaning "where the process already is" (external mode)."""
FLOW_GRACE_S = 20.0
"""How long past its scheduled end a flow may take to finish."""
REPEAT_GAP_S = 30.0
"""External mode with --start-at: repetition i starts at start_at + (i - 1) * (duration_s + this)."""
FLOWS_SCHEMA = pa.schema([
    pa.field("flow_id", pa.uint64()), pa.field("run", pa.string()), pa.field("flow", pa.string()),
    pa.field("client", pa.uint16()), pa.field("netns", pa.string()), pa.field("cport", pa.uint16()),
    pa.field("port", pa.uint16()), pa.field("cca_start", pa.string()),
])


@dataclass(frozen=True)
class External:
    """External mode: flows go from this host to a real *server_addr*."""

    server_addr: str
    clients: tuple[int, ...] = ()
    """Client numbers whose flows run on this host (empty: all)."""
    start_at: float | None = None
    """Wall-clock (Unix) time at which the scenario clock starts, to line up several hosts."""


# -------------------------------------------------------------------- run ---


def default_out_dir(sc: Scenario) -> Path:
    return Path("results") / f"{sc.name}-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"


def run_scenario(sc: Scenario, out_dir: Path | None = None, *, external: External | None = None,
                 progress: bool = True, plots: bool = True) -> list[Path]:
    """Every repetition of *sc* (one folder each under *out_dir*); returns the run folders.

    With several runs, *out_dir* also gets ``table.md`` aggregating them.
    """
    from ..reports.run import report_dir, report_run

    out_dir = out_dir or default_out_dir(sc)
    out_dir.mkdir(parents=True, exist_ok=True)
    runs = []
    for i, seed in enumerate(sc.seeds, 1):
        run_dir = out_dir / f"run-{i:02d}-seed-{seed}"
        ext = external
        if ext is not None and ext.start_at is not None:  # every host starts repetition i at the same time
            ext = replace(ext, start_at=ext.start_at + (i - 1) * (sc.duration_s + REPEAT_GAP_S))
        run_once(sc, run_dir, seed=seed, label=f"{sc.name} run {i}/{len(sc.seeds)}", external=ext,
                 progress=progress)
        report_run(run_dir, plots=plots)
        runs.append(run_dir)
    if len(runs) > 1:
        report_dir(out_dir, plots=False)
    return runs


def run_once(sc: Scenario, run_dir: Path, *, seed: int = 1, label: str = "run",
             external: External | None = None, progress: bool = True) -> dict[str, Any]:
    """One run of *sc* into *run_dir* (raw outputs and summary.json; no tables or plots)."""
    if external is None and os.geteuid() != 0:
        raise RunError("the namespace testbed needs root (network namespaces, BPF); rerun with sudo")
    if external is not None and sc.daemon is not None and sc.daemon.remote is not None:
        raise RunError(f"scenario {sc.name} has [daemon.remote], whose policy server the runner starts in the "
                       f"namespace testbed only; in external mode run `ccswitch policy serve` yourself and set "
                       f"policy.remote in each client's ccswitchd config")
    if external is not None and sc.tcp_ecn is not None:
        raise RunError(f"scenario {sc.name} sets tcp_ecn = {sc.tcp_ecn}, which the runner applies in the client "
                       f"namespaces only; in external mode set net.ipv4.tcp_ecn on the client hosts and remove it")
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "iperf").mkdir(exist_ok=True)
    (run_dir / "scenario.toml").write_text(sc.text)
    flows = [f for f in sc.flows if external is None or not external.clients or f.client in external.clients]
    if not flows:
        raise RunError(f"no flow of scenario {sc.name} runs on clients {list(external.clients if external else [])}")
    clients = sorted({f.client for f in flows})
    clock = Clock()
    prog = Progress(label, sc.duration_s, enabled=progress)
    meta: dict[str, Any] = {
        "scenario": sc.name, "description": sc.description, "run": run_dir.name, "seed": seed,
        "duration_s": sc.duration_s, "sample_interval_s": sc.sample_interval_s,
        "mode": "external" if external else "netns", "emulator": None if external else sc.link.emulator,
        "uplink_rate_mbit": sc.link.uplink.rate_mbit, "phase_bounds_s": sc.phase_bounds(),
        "flows": [{"name": f.name, "client": f.client, "cca": f.cca, "start_s": f.start_s,
                   "duration_s": f.duration_s, "port": f.port, "cport": f.cport, "kind": f.kind} for f in flows],
        "switches": [{"at_s": s.at_s, "flow": s.flow, "cca": s.cca, "inherit": s.inherit}
                     for s in sc.switches if any(f.name == s.flow for f in flows)],
        "host": {"kernel": platform.release(), "python": platform.python_version()},
        "daemon": None if sc.daemon is None else {
            "policy": sc.daemon.policy, "tick_s": sc.daemon.tick_s, "inherit": sc.daemon.inherit,
            "cca": sc.daemon.cca, "guard": dict(sc.daemon.guard),
            "clients": [c for c in clients if sc.daemon.runs_on(c)]},
    }
    results: dict[str, dict[str, Any]] = {}
    monitors: list[ClientMonitor | DaemonClient] = []
    t_wall = time.monotonic()
    # kill / systemd stop / a session's end unwinds the run as Ctrl-C does (namespaces, linkemu, iperf3 gone)
    with sigterm_as_exit(), contextlib.ExitStack() as stack:
        if external is None:
            server_addr, client_ns, servers = netns_side(sc, flows, run_dir, seed, meta, stack)
            if sc.daemon is not None and sc.daemon.remote is not None:  # [daemon.remote]: the policy server
                remote = stack.enter_context(policy_server(
                    meta["topology"]["server"], server_addr, sc.daemon.remote, run_dir / "policy-server",
                    sc.daemon.policy_file, meta))
                sc = with_remote(sc, remote)
        else:
            server_addr, client_ns, servers = external.server_addr, dict.fromkeys(clients), {}
            meta["topology"] = {"server_addr": server_addr, "clients_here": clients}
            prague_default_here(flows, stack)
        monitors = start_monitors(sc, flows, client_ns, clock, stack, run_dir)
        meta["pcc"] = {f"C{m.client}": m.pcc_source for m in monitors}
        if external is not None and external.start_at is not None:
            wait = external.start_at - time.time()
            if wait > 0:
                prog.done(f"waiting {wait:.1f} s for the agreed start time")
                time.sleep(wait)
        clock.start()
        meta["t0_epoch"] = clock.t0_epoch
        try:
            iperfs = _drive(sc, flows, client_ns, server_addr, clock, monitors, prog)
            for f in flows:
                results[f.name] = _collect(f, iperfs[f.name], run_dir)
        finally:
            clock.stop.set()
            for m in monitors:
                m.join(timeout=m.join_timeout_s)
        for name, srv in servers.items():
            _save_server(srv, run_dir / "iperf" / f"{name}.server.json")
    emu_summary = meta.pop("emulator_summary", None)
    errors = [f"C{m.client}: {m.error}" for m in monitors if m.error is not None]
    errors += [f"C{m.client}: still stopping after {m.join_timeout_s:g} s" for m in monitors if m.is_alive()]
    if errors:
        raise RunError("monitor failed: " + "; ".join(errors))
    meta["monitor_sched"] = {f"C{m.client}": getattr(m, "sched", "ccswitchd") for m in monitors}
    samples = pa.concat_tables([m.samples() for m in monitors]) if monitors else FLOW_SAMPLE_SCHEMA.empty_table()
    pq.write_table(samples, run_dir / "samples.parquet")
    pq.write_table(_flows_table(flows, monitors, run_dir.name, client_ns), run_dir / "flows.parquet")
    switch_log = sorted((e for m in monitors for e in m.switch_log), key=lambda e: e["at_s"])
    (run_dir / "switches.json").write_text(json.dumps(switch_log, indent=2, default=str) + "\n")
    summary = {"meta": meta, "iperf3": results, "switches": switch_log, "emulator": emu_summary,
               "daemons": _daemon_summary(monitors, clock), "wall_time_s": round(time.monotonic() - t_wall, 2)}
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    failed = [e for e in switch_log if not e.get("ok")]
    prog.done(f"done in {summary['wall_time_s']:.0f} s -> {run_dir}"
              + (f" ({len(failed)} switch(es) FAILED)" if failed else ""))
    return summary


def _drive(sc: Scenario, flows: Sequence[Flow], client_ns: dict[int, str | None], server_addr: str,
           clock: Clock, monitors: Sequence[ClientMonitor | DaemonClient], prog: Progress) -> dict[str, IperfFlow]:
    """Start the flows on schedule, show progress, wait for them; return the iperf3 handles."""
    pending = sorted(flows, key=lambda f: f.start_s)
    started: dict[str, IperfFlow] = {}
    try:
        while True:
            t = clock.elapsed()
            while pending and pending[0].start_s <= t + 1e-3:
                f = pending.pop(0)
                started[f.name] = start_flow(client_ns[f.client] or HERE_NS, server_addr, f.port, cca=f.cca,
                                             seconds=f.duration_s, interval=sc.sample_interval_s,
                                             cport=f.cport)
            for m in monitors:
                if m.error is not None:
                    raise RunError(f"monitor of client {m.client} failed: {m.error}")
            for f in flows:
                h = started.get(f.name)
                if h is not None and h.returncode is not None and clock.elapsed() < f.end_s - 1.0:
                    h.wait(timeout=1.0)  # raises IperfError with iperf3's message if it failed
                    raise RunError(f"flow {f.name} ended at {clock.elapsed():.1f} s, "
                                   f"before its scheduled end ({f.end_s:g} s)")
            latest: dict[str, tuple[str, float]] = {}
            for m in monitors:
                latest.update(m.snapshot())
            prog.update(t, latest)
            if not pending and all(h.returncode is not None for h in started.values()):
                break
            if t > sc.duration_s + FLOW_GRACE_S:
                late = [n for n, h in started.items() if h.returncode is None]
                raise RunError(f"flows {', '.join(late)} still running {FLOW_GRACE_S:g} s after the end")
            nxt = min([pending[0].start_s] if pending else [math.inf])
            time.sleep(max(0.01, min(0.5, nxt - clock.elapsed())))
    except IperfError as e:
        raise RunError(str(e)) from None
    except BaseException:
        for h in started.values():
            with contextlib.suppress(Exception):
                h.close()
        raise
    return started


def _collect(f: Flow, h: IperfFlow, run_dir: Path) -> dict[str, Any]:
    """Save the flow's raw iperf3 JSON and return its totals."""
    out = h.stdout()
    (run_dir / "iperf" / f"{f.name}.json").write_text(out)
    try:
        res = h.wait(timeout=5.0)
    except IperfError as e:
        raise RunError(str(e)) from None
    finally:
        h.close()
    return {"sender_mbps": res.sender_mbps, "receiver_mbps": res.receiver_mbps,
            "retransmits": res.retransmits, "congestion": res.congestion, "local_port": res.local_port}


def _save_server(srv: IperfServer, path: Path) -> None:
    with contextlib.suppress(Exception):
        srv.wait(timeout=5.0)
    path.write_text(srv.stdout())


def _daemon_summary(monitors: Sequence[ClientMonitor | DaemonClient], clock: Clock) -> dict[str, Any]:
    """Per daemon client: exit code, files, and its decisions counted by verdict and by switch."""
    out: dict[str, Any] = {}
    for m in monitors:
        if not isinstance(m, DaemonClient) or m.process is None:
            continue
        d = m.process
        decisions = d.decisions()
        out[f"C{m.client}"] = {
            "exit_code": m.exit_code, "killed": d.killed,
            "files": {k: str(p.relative_to(m.run_dir)) for k, p in
                      (("config", d.config_path), ("record", d.record_path), ("decisions", d.decisions_path),
                       ("log", d.log_path))},
            "decisions": len(decisions),
        }
    return out


def _flows_table(flows: Sequence[Flow], monitors: Sequence[ClientMonitor | DaemonClient], run: str,
                 client_ns: dict[int, str | None]) -> pa.Table:
    ids: dict[int, int] = {}
    for m in monitors:
        ids.update(m.flow_ids)
    rows = [{"flow_id": ids[f.cport], "run": run, "flow": f.name, "client": f.client,
             "netns": client_ns.get(f.client) or "", "cport": f.cport, "port": f.port, "cca_start": f.cca}
            for f in flows if f.cport in ids]
    return pa.Table.from_pylist(rows, schema=FLOWS_SCHEMA)


# ---------------------------------------------------------------- cleanup ---


def cleanup(include_unowned: bool = False) -> list[str]:
    """Remove testbed namespaces whose creating process is gone (and their processes)."""
    return cleanup_leftovers(include_unowned=include_unowned)
