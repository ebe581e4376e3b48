"""ccswitchd in a client namespace of a testbed run: config, process, records.

For every client with the daemon on, the runner (testbed/runs/runner.py) does::

    daemon/C<n>/ccswitchd.toml     config written here from the scenario's [daemon] table:
                                   tick, policy, inheritance, guard overrides, and the flows
                                   to manage (the iperf3 data flows: their local ports)
    nsenter --net=<client ns> -- ccswitchd --config ... --socket S --record R --decisions D
                                   (new session; stdout/stderr -> daemon/C<n>/ccswitchd.log)
    wait until S answers "status" (the daemon holds the namespace's monitor then)
    ... the run: scripted switches go through S (the control protocol of daemon/protocol.py,
        op "switch", what `ccswitch --socket S switch FLOW CCA` sends): a manual override
        that the daemon's guard respects (the flow stays pinned) ...
    SIGTERM; wait STOP_TIMEOUT_S; SIGKILL the session if it hangs (also on every error path)
    daemon/C<n>/record.parquet     each tick's FlowSample rows (ccswitch/schema.py)
    daemon/C<n>/decisions.jsonl    one JSON line per decision

The socket lives in a short private directory (a UNIX socket path has at most
107 bytes, run folders can be deeper) that is removed at the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..scenario import DaemonSettings, Flow, daemon_config, toml_text
from .netns import nsenter_argv

__all__ = ["DaemonError", "DaemonProcess", "daemon_config", "toml_text"]

START_TIMEOUT_S = 30.0
"""How long ccswitchd may take to load the policy, attach the monitor and open its socket."""
START_ATTEMPTS = 2
TRANSIENT_START_ERROR = "File exists"
"""A start failure worth one retry: PCC's struct_ops link refused because another
instance's PCC of the same name was still being unregistered (observed under load)."""
RETRY_DELAY_S = 2.0
STOP_TIMEOUT_S = 10.0
"""How long ccswitchd may take to stop on SIGTERM (detach, flush the record) before SIGKILL."""
KILL_TIMEOUT_S = 5.0
REQUEST_TIMEOUT_S = 10.0
"""One control request (the daemon answers between ticks)."""


class DaemonError(RuntimeError):
    """ccswitchd could not be started, reached or stopped (the message says which client)."""


# ---------------------------------------------------------------- process ---


def daemon_command() -> list[str]:
    """The ccswitchd of this installation (the console script beside our Python)."""
    exe = Path(sys.executable).parent / "ccswitchd"
    if exe.is_file():
        return [str(exe)]
    return [sys.executable, "-c", "from ccswitch.daemon.main import main; main()"]


class DaemonProcess:
    """One ccswitchd in namespace *ns* (None: this process's namespace), files under *out_dir*."""

    def __init__(self, label: str, ns: str | None, settings: DaemonSettings, flows: Sequence[Flow],
                 out_dir: Path) -> None:
        self.label, self.ns, self.settings, self.flows = label, ns, settings, list(flows)
        self.out_dir = out_dir
        self.config_path = out_dir / "ccswitchd.toml"
        self.record_path = out_dir / "record.parquet"
        self.decisions_path = out_dir / "decisions.jsonl"
        self.log_path = out_dir / "ccswitchd.log"
        self._sock_dir = ""
        self.socket_path = ""
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self.returncode: int | None = None
        self.killed = False

    # -- start ----------------------------------------------------------------

    def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        for old in (self.record_path, self.decisions_path):  # a run folder written again: fresh files
            old.unlink(missing_ok=True)
        cfg = daemon_config(self.settings, self.flows)
        self.config_path.write_text(toml_text(cfg, f"ccswitchd config of {self.label}, written by the testbed runner"))
        self._sock_dir = tempfile.mkdtemp(prefix="ccsd-")
        self.socket_path = os.path.join(self._sock_dir, f"{self.label}.sock")
        argv = [*daemon_command(), "--config", str(self.config_path), "--socket", self.socket_path,
                "--record", str(self.record_path), "--decisions", str(self.decisions_path)]
        if self.ns is not None:
            argv = nsenter_argv(self.ns, argv)
        self._log = self.log_path.open("wb")
        deadline = time.monotonic() + timeout_s
        for attempt in range(1, START_ATTEMPTS + 1):
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log,
                                         start_new_session=True)
            if self._await_ready(deadline, last=attempt == START_ATTEMPTS):
                return
            # a transient start failure (e.g. PCC's struct_ops registration racing another
            # instance's un-registration): once more, with a fresh record file
            if self.record_path.is_file() and self.record_path.stat().st_size == 0:
                self.record_path.unlink()
            time.sleep(RETRY_DELAY_S)

    def _await_ready(self, deadline: float, *, last: bool) -> bool:
        """True when the daemon answers; False when it exited and may be retried; else DaemonError."""
        assert self.proc is not None
        while True:
            if self.proc.poll() is not None:
                self.returncode = self.proc.returncode
                if not last and TRANSIENT_START_ERROR in self.log_tail():
                    return False
                raise DaemonError(f"ccswitchd of {self.label} exited with {self.returncode} at start: "
                                  f"{self.log_tail()}")
            if self._connectable():
                return True
            if time.monotonic() > deadline:
                raise DaemonError(f"ccswitchd of {self.label} did not open its socket within {START_TIMEOUT_S:g} "
                                  f"s: {self.log_tail()}")
            time.sleep(0.05)

    def _connectable(self) -> bool:
        """The daemon answers ``status`` (it opens the socket last, after the data plane)."""
        if not os.path.exists(self.socket_path):
            return False
        try:
            self.request("status")
        except DaemonError:
            return False
        return True

    def log_tail(self, n: int = 400) -> str:
        try:
            text = self.log_path.read_text(errors="replace").strip()
        except FileNotFoundError:
            return "(no log)"
        return " ".join(text[-n:].split()) or "(empty log)"

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    # -- requests ------------------------------------------------------------

    def request(self, op: str, **args: Any) -> Any:
        """One request on the control socket (daemon/protocol.py); raises DaemonError."""
        from ccswitch.daemon.protocol import ProtocolError, request

        try:
            return request(self.socket_path, op, timeout=REQUEST_TIMEOUT_S, **args)
        except (ProtocolError, OSError) as e:
            raise DaemonError(f"ccswitchd of {self.label}: {op}: {e}") from None

    def flow_id(self, cport: int, port: int) -> int | None:
        """The flow id (socket cookie) of the connection cport -> port, from the daemon's flow table."""
        for row in self.request("flows") or []:
            if row.get("sport") == cport and row.get("dport") == port:
                return int(row["flow_id"])
        return None

    def switch(self, flow_id: int, cca: str, inherit: str) -> dict[str, Any]:
        """Manual override through the daemon (the guard pins the flow on *cca*)."""
        try:
            res = self.request("switch", flow=flow_id, cca=cca, inherit=inherit)
        except DaemonError as e:
            return {"ok": False, "error": str(e)}
        out = dict(res) if isinstance(res, dict) else {"reply": res}
        out.setdefault("ok", True)
        return out

    # -- stop ----------------------------------------------------------------

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM, then SIGKILL of its session after *timeout_s*; idempotent.  Returns the exit code."""
        if self.proc is not None:
            if self.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.proc.pid, signal.SIGTERM)
                try:
                    self.proc.wait(timeout=timeout_s)
                except subprocess.TimeoutExpired:
                    self.killed = True
            # whatever is left in its session (also after a clean exit), then the daemon itself
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=KILL_TIMEOUT_S)
            self.returncode = self.proc.returncode
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._sock_dir:
            shutil.rmtree(self._sock_dir, ignore_errors=True)
            self._sock_dir = ""
        return self.returncode

    def __enter__(self) -> DaemonProcess:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- outputs -------------------------------------------------------------

    def record(self) -> pa.Table:
        """The daemon's FlowSample rows (after :meth:`stop`)."""
        if not self.record_path.is_file():
            raise DaemonError(f"ccswitchd of {self.label} wrote no record ({self.record_path}): {self.log_tail()}")
        try:
            return pq.read_table(self.record_path)
        except (OSError, pa.ArrowInvalid) as e:
            how = "was killed (SIGKILL after SIGTERM timed out)" if self.killed else "did not close it"
            raise DaemonError(f"ccswitchd of {self.label} {how}; its record {self.record_path} is "
                              f"unreadable: {e}") from None

    def decisions(self) -> list[dict[str, Any]]:
        if not self.decisions_path.is_file():
            return []
        out = []
        for line in self.decisions_path.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
        return out


@contextlib.contextmanager
def daemon_running(label: str, ns: str | None, settings: DaemonSettings, flows: Sequence[Flow],
                   out_dir: Path) -> Iterator[DaemonProcess]:
    """Start ccswitchd, yield it, stop it on the way out (also on errors and Ctrl-C)."""
    d = DaemonProcess(label, ns, settings, flows, out_dir)
    with d:
        yield d
