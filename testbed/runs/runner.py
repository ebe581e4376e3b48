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
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ccswitch.schema import FLOW_SAMPLE_SCHEMA

from ..scenario import Flow, Scenario, Switch
from ..scenario.model import CONTROL_SOCKET
from ..scenario.model_qdisc import Lfq
from .daemons import KILL_TIMEOUT_S, START_TIMEOUT_S, STOP_TIMEOUT_S, DaemonError, DaemonProcess, daemon_running
from .iperf import IperfError, IperfFlow, IperfServer, start_flow, start_server
from .netns import cleanup_leftovers, entered, nsenter_argv
from .policy_server import policy_server, with_remote
from .topology import Topology, kernel_emulator

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
PROGRESS_LOOK_S = 2.0
"""How often a daemon client asks ccswitchd for its flow table (the progress line)."""
DISCOVERY_DELAY_S = 0.25
"""An extra sample this long after a flow starts (see ClientMonitor._loop)."""
FLOW_GRACE_S = 20.0
REPEAT_GAP_S = 30.0
"""External mode with --start-at: repetition i starts at start_at + (i - 1) * (duration_s + this)."""
"""How long past its scheduled end a flow may take to finish."""
FLOWS_SCHEMA = pa.schema([
    pa.field("flow_id", pa.uint64()), pa.field("run", pa.string()), pa.field("flow", pa.string()),
    pa.field("client", pa.uint16()), pa.field("netns", pa.string()), pa.field("cport", pa.uint16()),
    pa.field("port", pa.uint16()), pa.field("cca_start", pa.string()),
])


class RunError(RuntimeError):
    """A run could not be carried out (the message says which part failed)."""


@dataclass(frozen=True)
class External:
    """External mode: flows go from this host to a real *server_addr*."""

    server_addr: str
    clients: tuple[int, ...] = ()
    """Client numbers whose flows run on this host (empty: all)."""
    start_at: float | None = None
    """Wall-clock (Unix) time at which the scenario clock starts, to line up several hosts."""


# ------------------------------------------------------------ daemon hook ---


@contextlib.contextmanager
def daemon_session(client: int, client_ns: str | None, scenario: Scenario, flows: Sequence[Flow],
                   run_dir: Path) -> Iterator[DaemonProcess]:
    """ccswitchd in one client's namespace (None = this host, external mode) while the run lasts.

    Config, socket, record and decisions as testbed/runs/daemons.py describes,
    under ``run_dir/daemon/C<client>/``; stopped with SIGTERM (SIGKILL on
    timeout) when the block ends, also through an exception.
    """
    assert scenario.daemon is not None
    with daemon_running(f"C{client}", client_ns, scenario.daemon, flows,
                        run_dir / "daemon" / f"C{client}") as d:
        yield d


# ------------------------------------------------------------------ clock ---


class Clock:
    """The scenario clock shared by the main thread and the monitor threads."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.stop = threading.Event()
        self.t0 = 0.0
        self.t0_epoch = 0.0

    def start(self, at_monotonic: float | None = None) -> None:
        now_m, now_e = time.monotonic(), time.time()
        self.t0 = at_monotonic if at_monotonic is not None else now_m
        self.t0_epoch = now_e + (self.t0 - now_m)
        self.started.set()

    def elapsed(self) -> float:
        return time.monotonic() - self.t0


# -------------------------------------------------------------- monitoring ---


class ClientMonitor(threading.Thread):
    """DataPlane of one client namespace: samples its flows and runs its switches.

    The thread enters the namespace (``entered``), so the monitor, the
    sampling iterator and the switcher all see that namespace's sockets.
    Samples are taken at ``t0 + k * interval``; a switch due at the same
    time runs right after that sample, so every interval has one CCA.
    """

    def __init__(self, client: int, ns: str | None, flows: Sequence[Flow], switches: Sequence[Switch],
                 interval_s: float, clock: Clock, scenario: Scenario) -> None:
        super().__init__(name=f"monitor-C{client}", daemon=True)
        self.join_timeout_s = 10.0
        self.client = client
        self.ns = ns
        self.flows = list(flows)
        self.switches = sorted(switches, key=lambda s: s.at_s)
        self.interval_s = interval_s
        self.clock = clock
        self.scenario = scenario
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self.tables: list[pa.Table] = []
        self.flow_ids: dict[int, int] = {}  # cport -> flow_id
        self.switch_log: list[dict[str, Any]] = []
        self.latest: dict[str, tuple[str, float]] = {}  # flow name -> (cca, goodput bit/s)
        self.pcc_source: str | None = None
        self._lock = threading.Lock()
        self._by_cport = {f.cport: f for f in self.flows}
        self._cports = pa.array(sorted(self._by_cport), pa.uint16())

    def run(self) -> None:
        try:
            from ccswitch.dataplane import DataPlane

            ns_ctx = entered(self.ns) if self.ns else contextlib.nullcontext()
            with ns_ctx, DataPlane() as dp:
                self.pcc_source = dp.pcc.source if dp.pcc else None
                dp.sample()  # baseline counters
                self.ready.set()
                while not self.clock.started.wait(0.05):
                    if self.clock.stop.is_set():
                        return
                dp.sample()  # restart the interval at t0: the first row covers [t0, t0 + interval]
                self._loop(dp)
        except BaseException as e:  # reported by the main thread
            self.error = e
        finally:
            self.ready.set()

    def _loop(self, dp: Any) -> None:
        t0, dt = self.clock.t0, self.interval_s
        pending = list(self.switches)
        # The sampler reports a socket from its second sighting on, so look once
        # shortly after each flow's start: its first row then covers most of the
        # first interval instead of being lost.  (report.py merges the short rows.)
        looks = sorted(f.start_s + DISCOVERY_DELAY_S for f in self.flows
                       if (f.start_s + DISCOVERY_DELAY_S) % dt > 0.1 * dt)
        k = 1
        while True:
            next_sample = t0 + k * dt
            next_switch = t0 + pending[0].at_s if pending else math.inf
            next_look = t0 + looks[0] if looks else math.inf
            wake = min(next_sample, next_switch, next_look)
            if self.clock.stop.wait(max(0.0, wake - time.monotonic())):
                self._sample(dp)  # the last partial interval
                return
            now = time.monotonic()
            if now >= next_sample - 1e-4:
                self._sample(dp)
                k = max(k + 1, int((now - t0) / dt + 1e-6) + 1)  # skip ticks we overslept
                while looks and t0 + looks[0] <= now + 1e-4:
                    looks.pop(0)
            elif looks and now >= next_look - 1e-4:
                looks.pop(0)
                self._sample(dp)
            while pending and now >= t0 + pending[0].at_s - 1e-4:
                self._switch(dp, pending.pop(0))

    def _sample(self, dp: Any) -> None:
        table = dp.sample()
        mask = pc.is_in(table["sport"], value_set=self._cports)
        table = table.filter(mask)
        rows = table.select(["flow_id", "sport", "dport", "cca", "goodput_bps"]).to_pylist()
        keep = []
        with self._lock:
            for i, r in enumerate(rows):
                flow = self._by_cport[r["sport"]]
                if r["dport"] != flow.port:
                    continue
                keep.append(i)
                self.flow_ids.setdefault(flow.cport, r["flow_id"])
                self.latest[flow.name] = (r["cca"], r["goodput_bps"])
        if keep:
            self.tables.append(table.take(pa.array(keep, pa.int64())))

    def _switch(self, dp: Any, sw: Switch) -> None:
        from ccswitch.bpf.switcher import SwitchError

        flow = self.scenario.flow(sw.flow)
        entry: dict[str, Any] = {"at_s": sw.at_s, "t_s": round(self.clock.elapsed(), 4), "flow": flow.name,
                                 "client": self.client, "cca": sw.cca, "inherit": sw.inherit}
        fid = self.flow_ids.get(flow.cport)
        if fid is None:  # not sampled yet (switch right after the start): look now
            self._sample(dp)
            fid = self.flow_ids.get(flow.cport)
        if fid is None:
            entry.update(ok=False, error=f"flow {flow.name} (local port {flow.cport}) is not running")
        else:
            entry["flow_id"] = fid
            try:
                entry.update(dp.switch(fid, sw.cca, sw.inherit).as_dict())
            except SwitchError as e:
                entry.update(ok=False, error=str(e))
        entry["t_done_s"] = round(self.clock.elapsed(), 4)
        self.switch_log.append(entry)

    def snapshot(self) -> dict[str, tuple[str, float]]:
        with self._lock:
            return dict(self.latest)

    def samples(self) -> pa.Table:
        if not self.tables:
            return FLOW_SAMPLE_SCHEMA.empty_table()
        return pa.concat_tables(self.tables)


class DaemonClient(threading.Thread):
    """ccswitchd in one client namespace, in place of the in-process monitor.

    The daemon owns the namespace's data plane (one instance per namespace),
    samples every tick and decides; this thread starts and stops it, sends
    the scripted switches through its socket (a manual override the guard
    respects) and afterwards turns its record into the run's samples:
    the iperf3 data flows' rows, re-binned onto the scenario's interval by
    :func:`ccswitch.testbed.reports.run.rebin_samples`.  Same interface as
    :class:`ClientMonitor` for the runner.
    """

    def __init__(self, client: int, ns: str | None, flows: Sequence[Flow], switches: Sequence[Switch],
                 interval_s: float, clock: Clock, scenario: Scenario, run_dir: Path) -> None:
        super().__init__(name=f"daemon-C{client}", daemon=True)
        self.join_timeout_s = STOP_TIMEOUT_S + KILL_TIMEOUT_S + 10.0  # SIGTERM, SIGKILL, reading the record
        self.client, self.ns, self.flows = client, ns, list(flows)
        self.switches = sorted(switches, key=lambda s: s.at_s)
        self.interval_s, self.clock, self.scenario, self.run_dir = interval_s, clock, scenario, run_dir
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self.flow_ids: dict[int, int] = {}  # cport -> flow_id
        self.switch_log: list[dict[str, Any]] = []
        self.pcc_source: str | None = "ccswitchd"
        self.process: DaemonProcess | None = None
        self.exit_code: int | None = None
        self._by_cport = {f.cport: f for f in self.flows}
        self._record: pa.Table | None = None
        self._lock = threading.Lock()
        self.latest: dict[str, tuple[str, float]] = {}

    def run(self) -> None:
        try:
            with daemon_session(self.client, self.ns, self.scenario, self.flows, self.run_dir) as d:
                self.process = d
                self.ready.set()
                while not self.clock.started.wait(0.05):
                    if self.clock.stop.is_set():
                        return
                self._loop(d)
            self.exit_code = d.returncode
            self._record = self._data_rows(d.record())
        except BaseException as e:  # reported by the main thread
            self.error = e
        finally:
            self.ready.set()

    def _loop(self, d: DaemonProcess) -> None:
        pending = list(self.switches)
        next_look = time.monotonic()
        while True:
            wake = min(self.clock.t0 + pending[0].at_s if pending else math.inf, next_look)
            if self.clock.stop.wait(max(0.0, min(0.5, wake - time.monotonic()))):
                return
            if not d.alive:
                raise DaemonError(f"ccswitchd of C{self.client} exited with {d.proc.returncode if d.proc else '?'} "
                                  f"during the run: {d.log_tail()}")
            while pending and time.monotonic() >= self.clock.t0 + pending[0].at_s - 1e-4:
                self._switch(d, pending.pop(0))
            if time.monotonic() >= next_look:  # the progress line: the daemon's flow table
                next_look = time.monotonic() + PROGRESS_LOOK_S
                with contextlib.suppress(DaemonError):
                    rows = d.request("flows") or []
                    latest = {}
                    for r in rows:
                        f = self._by_cport.get(r.get("sport"))
                        if f is not None and r.get("dport") == f.port:
                            latest[f.name] = (str(r.get("cca")), float(r.get("goodput_bps") or 0.0))
                    with self._lock:
                        self.latest = latest

    def _switch(self, d: DaemonProcess, sw: Switch) -> None:
        flow = self.scenario.flow(sw.flow)
        entry: dict[str, Any] = {"at_s": sw.at_s, "t_s": round(self.clock.elapsed(), 4), "flow": flow.name,
                                 "client": self.client, "cca": sw.cca, "inherit": sw.inherit, "via": "ccswitchd"}
        try:
            fid = d.flow_id(flow.cport, flow.port)
        except DaemonError as e:
            fid = None
            entry.update(ok=False, error=str(e))
        if fid is None:
            entry.setdefault("ok", False)
            entry.setdefault("error", f"flow {flow.name} (local port {flow.cport}) is not in ccswitchd's table")
        else:
            entry["flow_id"] = fid
            entry.update(d.switch(fid, sw.cca, sw.inherit))
        entry["t_done_s"] = round(self.clock.elapsed(), 4)
        self.switch_log.append(entry)

    def _data_rows(self, table: pa.Table) -> pa.Table:
        """The record's rows of the iperf3 data flows (local port = cport, remote port = port)."""
        cports = pa.array(sorted(self._by_cport), pa.uint16())
        table = table.filter(pc.is_in(table["sport"], value_set=cports))
        keep = []
        for i, (fid, sport, dport) in enumerate(zip(table["flow_id"].to_pylist(), table["sport"].to_pylist(),
                                                    table["dport"].to_pylist(), strict=True)):
            if dport == self._by_cport[sport].port:
                keep.append(i)
                self.flow_ids.setdefault(sport, fid)
        return table.take(pa.array(keep, pa.int64())).select(list(FLOW_SAMPLE_SCHEMA.names))

    def snapshot(self) -> dict[str, tuple[str, float]]:
        with self._lock:
            return dict(self.latest)

    def samples(self) -> pa.Table:
        from ..reports.run import rebin_samples

        if self._record is None or self._record.num_rows == 0:
            return FLOW_SAMPLE_SCHEMA.empty_table()
        return rebin_samples(self._record, self.clock.t0_epoch, self.interval_s).cast(FLOW_SAMPLE_SCHEMA)


# ----------------------------------------------------------------- tshark ---


class Capture:
    """``tshark`` on *dev* in *ns* writing pcapng: headers only, iperf3 ports only."""

    def __init__(self, ns: str, dev: str, ports: Sequence[int], path: Path, snaplen: int = 96) -> None:
        self.ns, self.dev, self.path = ns, dev, path
        filt = " or ".join(f"tcp port {p}" for p in ports)
        self.argv = ["tshark", "-i", dev, "-s", str(snaplen), "-f", filt, "-w", str(path), "-q"]
        self.proc: subprocess.Popen[bytes] | None = None
        self._log = path.with_suffix(".log")
        self._log_f: IO[bytes] | None = None

    def start(self, timeout_s: float = 15.0) -> None:
        if shutil.which("tshark") is None:
            raise RunError("tshark is not installed (run scripts/setup.sh)")
        self._log_f = self._log.open("wb")
        self.proc = subprocess.Popen(nsenter_argv(self.ns, self.argv), stdin=subprocess.DEVNULL,
                                     stdout=self._log_f, stderr=self._log_f, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RunError(f"tshark exited with {self.proc.returncode}: {self.log()[-500:]}")
            if "Capturing on" in self.log():
                return
            time.sleep(0.05)
        raise RunError(f"tshark did not start capturing within {timeout_s:g} s: {self.log()[-500:]}")

    def log(self) -> str:
        try:
            return self._log.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self) -> None:
        """SIGINT (tshark flushes and closes the file), then SIGTERM/SIGKILL if it hangs."""
        if self.proc is not None and self.proc.poll() is None:
            for sig, wait in ((signal.SIGINT, 10.0), (signal.SIGTERM, 3.0), (signal.SIGKILL, 3.0)):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, sig)
                try:
                    self.proc.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        if self._log_f is not None:
            self._log_f.close()
            self._log_f = None

    def __enter__(self) -> Capture:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --------------------------------------------------------------- progress ---


class Progress:
    """One line on stderr: elapsed / total and each flow's current CCA and rate."""

    def __init__(self, label: str, total_s: float, stream: IO[str] | None = None, enabled: bool = True) -> None:
        self.label, self.total_s = label, total_s
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = self.stream.isatty()
        self._last_line = -math.inf

    def update(self, elapsed_s: float, flows: dict[str, tuple[str, float]]) -> None:
        if not self.enabled:
            return
        parts = [f"{n} {cca} {bps / 1e6:6.1f}" for n, (cca, bps) in sorted(flows.items())]
        text = (f"ccswitch testbed: {self.label} [{min(elapsed_s, self.total_s):5.1f}/{self.total_s:g} s] "
                + (" | ".join(parts) + " Mbit/s" if parts else "starting"))
        if self.tty:
            self.stream.write("\r\x1b[K" + text)
            self.stream.flush()
        elif elapsed_s - self._last_line >= 10.0:
            self.stream.write(text + "\n")
            self.stream.flush()
            self._last_line = elapsed_s

    def done(self, text: str) -> None:
        if not self.enabled:
            return
        self.stream.write(("\r\x1b[K" if self.tty else "") + f"ccswitch testbed: {self.label} {text}\n")
        self.stream.flush()


# ---------------------------------------------------------------- emulator ---


def _emulator(sc: Scenario, topo: Topology, run_dir: Path, seed: int,
              control_socket: Path | None = None) -> contextlib.AbstractContextManager[Any]:
    """The link between the router's ports: linkemu or the kernel fallback."""
    emu_dir = run_dir / "emulator"
    emu_dir.mkdir(parents=True, exist_ok=True)
    config = sc.emulator_config(topo.client_ifs, topo.server_if, seed, emu_dir,
                                interval_ms=max(1, round(sc.sample_interval_s * 1000)),
                                control_socket=control_socket)
    if sc.link.emulator == "kernel":
        config["emulator"] = "kernel (bridge + htb + pfifo on the uplink; downlink unshaped)"
        (emu_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        up = sc.link.uplink
        return kernel_emulator(topo, up.rate_mbit, up.queue_limit_pkts)
    from .emulator import Emulator  # writes emu_dir/config.json, reads summary.json on exit

    return Emulator(topo.router, config, stats_dir=emu_dir)


def _emulator_summary(run_dir: Path, emu: Any) -> dict[str, Any] | None:
    summary = getattr(emu, "summary", None)
    if isinstance(summary, dict):
        return summary
    path = run_dir / "emulator" / "summary.json"
    if path.is_file():
        with contextlib.suppress(ValueError):
            return json.loads(path.read_text())
    return None


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
    with contextlib.ExitStack() as stack:
        if external is None:
            server_addr, client_ns, servers = _netns_side(sc, flows, run_dir, seed, meta, stack)
            if sc.daemon is not None and sc.daemon.remote is not None:  # [daemon.remote]: the policy server
                remote = stack.enter_context(policy_server(
                    meta["topology"]["server"], server_addr, sc.daemon.remote, run_dir / "policy-server",
                    sc.daemon.policy_file, meta))
                sc = with_remote(sc, remote)
        else:
            server_addr, client_ns, servers = external.server_addr, dict.fromkeys(clients), {}
            meta["topology"] = {"server_addr": server_addr, "clients_here": clients}
            _prague_default_here(flows, stack)
        monitors = _start_monitors(sc, flows, client_ns, clock, stack, run_dir)
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


def _netns_side(sc: Scenario, flows: Sequence[Flow], run_dir: Path, seed: int, meta: dict[str, Any],
                stack: contextlib.ExitStack) -> tuple[str, dict[int, str | None], dict[str, IperfServer]]:
    """Topology, emulator, iperf3 servers and capture, entered into *stack* (torn down in reverse)."""
    topo = stack.enter_context(Topology(sc.clients))
    meta["topology"] = {"id": topo.id, "clients": topo.clients, "router": topo.router, "server": topo.server,
                        "client_addrs": topo.client_addrs, "server_addr": topo.server_addr}
    emu: dict[str, Any] = {}  # read by the callback after the emulator has stopped (LIFO order)
    stack.callback(lambda: meta.__setitem__("emulator_summary", _emulator_summary(run_dir, emu.get("e"))))
    control = None
    if sc.router_agents():  # linkemu's control socket in a short private directory (107-byte limit), removed last
        sock_dir = tempfile.mkdtemp(prefix="ccse-")
        stack.callback(shutil.rmtree, sock_dir, True)
        control = Path(sock_dir) / CONTROL_SOCKET
    emu["e"] = stack.enter_context(_emulator(sc, topo, run_dir, seed, control))
    _router_agents(sc, run_dir, meta, stack, control)
    _prague_defaults(flows, topo, stack)
    servers = {f.name: stack.enter_context(start_server(topo.server, f.port, bind=topo.server_addr,
                                                        extra_args=["-J"])) for f in flows}
    if sc.capture.tshark:
        stack.enter_context(Capture(topo.server, topo.server_dev, [f.port for f in flows],
                                    run_dir / "capture.pcapng", sc.capture.snaplen))
    client_ns: dict[int, str | None] = {f.client: topo.clients[f.client - 1] for f in flows}
    meta["tcp_ecn"] = _tcp_ecn(sc, client_ns, topo.server)
    return topo.server_addr, client_ns, servers


def _router_agents(sc: Scenario, run_dir: Path, meta: dict[str, Any], stack: contextlib.ExitStack,
                   control: Path | None) -> None:
    """Start the agent of every direction whose queue names one (``agent``); stopped before linkemu.

    dualpi2: paper 000's A3C agent (testbed/runs/dualpi2_agent.py); lfq: paper 001's LFQ agent
    (testbed/runs/lfq_agent.py).  Each writes ``emulator/agent-DIR.csv`` (one row per interval, per flow
    for lfq); summary.json's ``meta.router_agents`` records the actor file, its checksum, the steps taken,
    the loop's CPU time and any error.
    """
    agents = sc.router_agents()
    if not agents:
        return
    meta["router_agents"] = {}
    for direction, q in agents.items():
        assert q.agent is not None
        log_csv = run_dir / "emulator" / f"agent-{direction}.csv"
        assert control is not None  # _netns_side makes one whenever the scenario has router agents
        sock = control
        loop: Any
        if isinstance(q, Lfq):
            from ccswitch.models.lfq_actor import load_actor as load_lfq_actor

            from .lfq_agent import AgentLoop as LfqAgentLoop

            actor: Any = load_lfq_actor(q.agent)
            interval = q.agent_interval_ms / 1000 if q.agent_interval_ms else actor.interval_s
            loop = LfqAgentLoop(sock, actor, direction=direction, interval_s=interval, log_csv=log_csv)
        else:
            from ccswitch.models.dualpi2_actor import load_actor

            from .dualpi2_agent import AgentLoop

            actor = load_actor(q.agent)
            rate = getattr(sc.link, direction).rate_mbit or q.agent_rate_mbit
            interval = q.agent_interval_ms / 1000 if q.agent_interval_ms else actor.interval_s
            loop = AgentLoop(sock, actor, rate_mbit=rate, direction=direction, interval_s=interval, log_csv=log_csv,
                             k_restore=q.k if q.k is not None else 2.0)
        rec: dict[str, Any] = {"kind": "lfq" if isinstance(q, Lfq) else "dualpi2", "actor": str(q.agent),
                               "checksum": actor.checksum, "interval_s": interval}
        meta["router_agents"][direction] = rec

        def record(loop: Any = loop, rec: dict[str, Any] = rec) -> None:
            rec.update(steps=loop.steps, cpu_s=round(loop.cpu_s, 3), error=loop.error)

        stack.callback(record)
        stack.enter_context(loop)


TCP_ECN_KEY = "net.ipv4.tcp_ecn"


def _read_sysctl(ns: str, key: str) -> str:
    with entered(ns):
        return Path("/proc/sys", *key.split(".")).read_text().strip()


def _tcp_ecn(sc: Scenario, client_ns: dict[int, str | None], server_ns: str) -> dict[str, Any]:
    """Set the scenario's ``tcp_ecn`` in the client namespaces (the senders; before any flow starts).

    net.ipv4.tcp_ecn is per namespace and a new one starts at the kernel's default 2 (accept ECN
    when the peer asks, never ask): the server keeps that and so accepts the clients' requests.
    Returns the values read back (client namespace -> value, and the server's) for summary.json.
    """
    out: dict[str, Any] = {"requested": sc.tcp_ecn, "clients": {}, "server": None}
    for client, ns in sorted(client_ns.items()):
        if ns is None:
            continue
        if sc.tcp_ecn is not None:
            try:
                with entered(ns):
                    Path("/proc/sys", *TCP_ECN_KEY.split(".")).write_text(f"{sc.tcp_ecn}\n")
            except OSError as e:
                raise RunError(f"cannot set {TCP_ECN_KEY}={sc.tcp_ecn} in client {client}'s namespace: {e}") from e
        value = _read_sysctl(ns, TCP_ECN_KEY)
        if sc.tcp_ecn is not None and value != str(sc.tcp_ecn):
            raise RunError(f"{TCP_ECN_KEY} in client {client}'s namespace reads {value} after setting {sc.tcp_ecn}")
        out["clients"][f"C{client}"] = int(value)
    out["server"] = int(_read_sysctl(server_ns, TCP_ECN_KEY))
    return out


def _prague_defaults(flows: Sequence[Flow], topo: Topology, stack: contextlib.ExitStack) -> None:
    """Register Prague and make it the default where its flows connect and are accepted.

    ECN (and AccECN) is negotiated in the handshake, but iperf3 sets -C only
    after connect(): a prague flow started that way negotiates no ECN and
    Prague falls back to Reno (docs/l4s-kernel.md).  So prague becomes the
    namespace default of the server (listeners must run it to accept AccECN;
    done before the iperf3 servers start) and of every client whose flows are
    all prague.  A client mixing prague with other CCAs is refused: its other
    sockets would start on prague and keep Prague's DSCP after iperf3 switches them.
    """
    prague = [f for f in flows if f.cca == "prague"]
    if not prague:
        return
    from ccswitch.bpf.prague import ensure_prague, make_default

    for client in sorted({f.client for f in prague}):
        others = sorted({f.cca for f in flows if f.client == client and f.cca != "prague"})
        if others:
            raise RunError(f"client {client} runs prague and {', '.join(others)}: prague flows need a client "
                           f"of their own (prague is made the client's default CCA so that ECN is negotiated)")
    handle = ensure_prague()
    stack.callback(handle.close)
    make_default(topo.server)
    for client in sorted({f.client for f in prague}):
        make_default(topo.clients[client - 1])


def _prague_default_here(flows: Sequence[Flow], stack: contextlib.ExitStack) -> None:
    """External mode: register Prague and make it this host's default CCA while the run lasts.

    The same reason as _prague_defaults (ECN is negotiated in the handshake,
    iperf3 sets -C only after connect()).  The host's previous default comes
    back when the run ends, also on errors, before Prague's registration goes:
    a default holds a reference on the algorithm, so the host would otherwise
    keep an unregistered prague for every new socket.  This host's flows must
    then all be prague (one default per host).  The server's listeners are not
    this host's: testbed/l4s/README.md has the server side.
    """
    if not any(f.cca == "prague" for f in flows):
        return
    others = sorted({f.cca for f in flows if f.cca != "prague"})
    if others:
        raise RunError(f"this host runs prague and {', '.join(others)} flows: prague becomes the host's default "
                       f"CCA (so that ECN is negotiated); run the prague clients on a host of their own (--client N)")
    from ccswitch.bpf.prague import ensure_prague, make_default, set_default

    try:
        handle = ensure_prague()
    except Exception as e:
        raise RunError(f"cannot register prague on this host ({e}); run as root after scripts/setup.sh "
                       f"(or load a tcp_prague module)") from e
    stack.callback(handle.close)
    try:
        previous = make_default(None)
    except (OSError, RuntimeError) as e:
        raise RunError(f"cannot make prague this host's default CCA ({e}); run as root") from e
    stack.callback(set_default, None, previous)


def _start_monitors(sc: Scenario, flows: Sequence[Flow], client_ns: dict[int, str | None], clock: Clock,
                    stack: contextlib.ExitStack, run_dir: Path) -> list[ClientMonitor | DaemonClient]:
    """One monitor thread (or ccswitchd) per client, started one after the other (PCC registers once)."""
    monitors: list[ClientMonitor | DaemonClient] = []

    def stop_all() -> None:
        clock.stop.set()
        for m in monitors:
            m.join(timeout=m.join_timeout_s)

    stack.callback(stop_all)
    for client, ns in client_ns.items():
        mine = [f for f in flows if f.client == client]
        names = {f.name for f in mine}
        sw = [s for s in sc.switches if s.flow in names]
        m: ClientMonitor | DaemonClient
        if sc.daemon is not None and sc.daemon.runs_on(client):
            m = DaemonClient(client, ns, mine, sw, sc.sample_interval_s, clock, sc, run_dir)
        else:
            m = ClientMonitor(client, ns, mine, sw, sc.sample_interval_s, clock, sc)
        monitors.append(m)
        m.start()
        if not m.ready.wait(START_TIMEOUT_S + 15.0) or m.error is not None:
            what = "ccswitchd" if isinstance(m, DaemonClient) else "monitor"
            raise RunError(f"{what} for client {client} did not start: {m.error or 'timeout'}")
    return monitors


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
