"""One client's side of a run: the in-process monitor thread or ccswitchd, on the scenario clock.

* :class:`Clock` -- the scenario clock shared by the main thread and the monitors.
* :class:`ClientMonitor` -- a DataPlane in the client's namespace: samples its
  flows every ``sample_interval_s`` and runs its scripted switches.
* :class:`DaemonClient` -- ccswitchd in the client's namespace instead
  (:func:`daemon_session`); sends the scripted switches through its socket and
  re-bins its record onto ``sample_interval_s`` at the end.
* :func:`start_monitors` -- one of the two per client, started one after the other.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ccswitch.schema import FLOW_SAMPLE_SCHEMA

from ..scenario import Flow, Scenario, Switch
from .daemons import KILL_TIMEOUT_S, START_TIMEOUT_S, STOP_TIMEOUT_S, DaemonError, DaemonProcess, daemon_running
from .netns import entered
from .run_error import RunError

PROGRESS_LOOK_S = 2.0
"""How often a daemon client asks ccswitchd for its flow table (the progress line)."""
DISCOVERY_DELAY_S = 0.25
"""An extra sample this long after a flow starts (see ClientMonitor._loop)."""
MONITOR_FIFO_PRIORITY = 5
"""SCHED_FIFO priority of a monitor thread while it samples (0: stay SCHED_OTHER).

Below linkemu's forwarding thread (``timing.sched_fifo_priority``, 10), so the
emulator keeps precedence.  Without it, three runs at once on this 2-core
machine (three SCHED_FIFO linkemu threads, their iperf3 and softirq load) left
the monitor threads so little CPU that a sample costing ~5 ms of CPU took
0.1-2 s and samples fell 2-29 s apart; with it, under the same load, at most
63 ms and 1.05 s (docs/matrix/monitor-under-load.md).  A sample is a few
milliseconds of CPU once a second, so the raised thread cannot crowd out others.
"""


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
        self.sched = "other"
        """The scheduling the sampling thread ran with ("fifo:N", or "other" when not allowed)."""
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
                self.sched = raise_to_fifo(MONITOR_FIFO_PRIORITY)
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


def raise_to_fifo(priority: int) -> str:
    """Run the calling thread SCHED_FIFO at *priority* when allowed; returns "fifo:N" or "other".

    Linux applies sched_setscheduler(0, ...) to the calling thread only, so the
    runner's other threads keep their scheduling.  Without CAP_SYS_NICE (or with
    RT time not granted to this cgroup) the thread stays SCHED_OTHER: the run
    goes on and its summary says so (``meta.monitor_sched``).
    """
    if priority <= 0:
        return "other"
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
    except (PermissionError, OSError):
        return "other"
    return f"fifo:{priority}"


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


def start_monitors(sc: Scenario, flows: Sequence[Flow], client_ns: dict[int, str | None], clock: Clock,
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
