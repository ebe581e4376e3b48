"""iperf3 servers and flows inside network namespaces (see :mod:`.netns`).

Typical use with a :class:`~ccswitch.testbed.runs.netns.Bottleneck`::

    with Bottleneck(rate_mbit=50) as bn, \\
            start_server(bn.receiver, 5201, bind=bn.receiver_addr), \\
            start_flow(bn.sender, bn.receiver_addr, 5201, cca="cubic",
                       seconds=5, cport=40001) as flow:
        result = flow.wait()
    print(result.receiver_bps / 1e6, "Mbit/s")

Every server/flow handle is a context manager; leaving it (or interpreter exit)
kills a still-running iperf3.  Servers are ``--one-off`` by default: one server
per flow, each on its own port.  A flow's local port is known in advance when
``cport`` is given (``--cport``: it applies to the data connection; the control
connection uses an ephemeral port).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from .netns import LiveHandles, Resource, entered, popen_in, stop_process

__all__ = [
    "DEFAULT_PORT",
    "Interval",
    "IperfError",
    "IperfFlow",
    "IperfResult",
    "IperfServer",
    "parse_result",
    "run_flow",
    "start_flow",
    "start_server",
]

DEFAULT_PORT = 5201
IPERF3 = "iperf3"


class IperfError(RuntimeError):
    """iperf3 failed, timed out, or produced output we cannot parse."""


# ----------------------------------------------------------------- results ---


@dataclass(frozen=True)
class Interval:
    """One ``-i`` reporting interval of the client (sender side for TCP)."""

    start: float
    """Seconds since the test started."""
    end: float
    bytes: int
    bits_per_second: float
    retransmits: int | None = None
    """TCP retransmissions in this interval (None for UDP)."""
    snd_cwnd: int | None = None
    """Congestion window in bytes at the end of the interval (first stream)."""
    rtt_us: int | None = None
    """Smoothed RTT in microseconds (first stream), if iperf3 reported it."""
    rttvar_us: int | None = None
    omitted: bool = False


@dataclass(frozen=True)
class IperfResult:
    """Parsed ``iperf3 -J`` client output."""

    protocol: str
    """``"TCP"`` or ``"UDP"``."""
    intervals: tuple[Interval, ...]
    sender_bps: float
    """Average rate the sender put on the wire (bit/s, payload)."""
    receiver_bps: float
    """Average goodput the receiver got (bit/s, payload)."""
    retransmits: int | None
    congestion: str | None
    """Congestion control iperf3 reports for the sender (TCP)."""
    local_port: int | None
    """Local (client) port of the first data stream."""
    lost_percent: float | None = None
    """UDP loss percentage (None for TCP)."""
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def sender_mbps(self) -> float:
        return self.sender_bps / 1e6

    @property
    def receiver_mbps(self) -> float:
        return self.receiver_bps / 1e6


def _opt_int(d: dict[str, Any], key: str) -> int | None:
    v = d.get(key)
    return int(v) if v is not None else None


def parse_result(data: dict[str, Any]) -> IperfResult:
    """Turn the decoded JSON of an iperf3 client run into an :class:`IperfResult`.

    Raises :class:`IperfError` if the JSON carries an ``error`` field.
    """
    if data.get("error"):
        raise IperfError(f"iperf3 error: {data['error']}")
    start = data.get("start", {})
    protocol = str(start.get("test_start", {}).get("protocol", "TCP")).upper()
    intervals = []
    for iv in data.get("intervals", []):
        s = iv.get("sum", {})
        streams = iv.get("streams") or [{}]
        first = streams[0]
        intervals.append(
            Interval(
                start=float(s.get("start", 0.0)),
                end=float(s.get("end", 0.0)),
                bytes=int(s.get("bytes", 0)),
                bits_per_second=float(s.get("bits_per_second", 0.0)),
                retransmits=_opt_int(s, "retransmits"),
                snd_cwnd=_opt_int(first, "snd_cwnd"),
                rtt_us=_opt_int(first, "rtt"),
                rttvar_us=_opt_int(first, "rttvar"),
                omitted=bool(s.get("omitted", False)),
            )
        )
    end = data.get("end", {})
    sent = end.get("sum_sent") or end.get("sum") or {}
    received = end.get("sum_received") or end.get("sum") or {}
    lost = None
    if protocol == "UDP":
        udp = end.get("sum") or {}
        if "lost_percent" in udp:
            lost = float(udp["lost_percent"])
    connected = start.get("connected") or [{}]
    return IperfResult(
        protocol=protocol,
        intervals=tuple(intervals),
        sender_bps=float(sent.get("bits_per_second", 0.0)),
        receiver_bps=float(received.get("bits_per_second", 0.0)),
        retransmits=_opt_int(sent, "retransmits"),
        congestion=end.get("sender_tcp_congestion"),
        local_port=_opt_int(connected[0], "local_port"),
        lost_percent=lost,
        raw=data,
    )


# ----------------------------------------------------------------- process ---

class _Proc(Resource):
    """An iperf3 process in a namespace with stdout/stderr in temporary files."""

    def __init__(self, ns: str, argv: list[str]) -> None:
        self.ns = ns
        self.argv = argv
        # Owned by the handle, closed in close().
        self._out: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115
        self._err: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115
        try:
            self.proc = popen_in(
                ns,
                argv,
                stdin=subprocess.DEVNULL,
                stdout=self._out,
                stderr=self._err,
                start_new_session=True,  # a Ctrl-C for the test runner is ours to handle
            )
        except BaseException:
            self._out.close()
            self._err.close()
            raise
        _live.add(self)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        return self.proc.poll()

    def _read(self, f: IO[bytes]) -> str:
        if f.closed:
            return ""
        f.flush()
        f.seek(0)
        return f.read().decode(errors="replace")

    def stdout(self) -> str:
        return self._read(self._out)

    def stderr(self) -> str:
        return self._read(self._err).strip()

    def kill(self) -> None:
        """Terminate (then kill) the process if it still runs; reap it."""
        stop_process(self.proc, grace_s=2.0)

    def close(self) -> None:
        """Kill the process and release the output files."""
        self.kill()
        self._out.close()
        self._err.close()
        _live.discard(self)


_live: LiveHandles[_Proc] = LiveHandles(_Proc.close)

# ------------------------------------------------------------------ server ---


def _socket_inodes(pid: int) -> set[int]:
    """Inodes of the sockets process *pid* has open."""
    inodes = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except FileNotFoundError:
        return inodes
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


def _listening(port: int, pid: int) -> bool:
    """True if *pid* has a TCP socket listening on *port* in this thread's namespace."""
    listeners = set()
    for table in ("tcp", "tcp6"):
        try:
            with open(f"/proc/thread-self/net/{table}") as f:
                next(f, None)
                for line in f:
                    # sl local_address(HEXIP:HEXPORT) rem_address st(0A=LISTEN) ... inode
                    cols = line.split()
                    if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                        listeners.add(int(cols[9]))
        except FileNotFoundError:
            continue
    return bool(listeners and listeners & _socket_inodes(pid))


class IperfServer(_Proc):
    """``iperf3 -s`` in namespace *ns*; see :func:`start_server`."""

    def __init__(
        self,
        ns: str,
        port: int = DEFAULT_PORT,
        *,
        bind: str | None = None,
        one_off: bool = True,
        extra_args: Sequence[str] = (),
    ) -> None:
        self.port = port
        argv = [IPERF3, "-s", "-p", str(port)]
        if bind:
            argv += ["-B", bind]
        if one_off:
            argv.append("--one-off")
        argv += list(extra_args)
        super().__init__(ns, argv)

    def wait_listening(self, timeout: float = 5.0) -> None:
        """Block until the server listens; raise :class:`IperfError` if it died."""
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise IperfError(
                    f"iperf3 server on port {self.port} in {self.ns} exited with "
                    f"{self.proc.returncode}: {self.stderr() or self.stdout().strip()}"
                )
            with entered(self.ns):
                if _listening(self.port, self.proc.pid):
                    return
            if time.monotonic() > deadline:
                raise IperfError(f"iperf3 server on port {self.port} in {self.ns} not listening")
            time.sleep(0.02)

    def wait(self, timeout: float | None = None) -> int:
        """Wait for a one-off server to exit after its test; return its exit status."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired as e:
            raise IperfError(f"iperf3 server on port {self.port} still running") from e


def start_server(
    ns: str,
    port: int = DEFAULT_PORT,
    *,
    bind: str | None = None,
    one_off: bool = True,
    timeout: float = 5.0,
    extra_args: Sequence[str] = (),
) -> IperfServer:
    """Start ``iperf3 -s -p PORT [-B bind] [--one-off]`` in *ns* and wait until it listens.

    Raises :class:`IperfError` (with iperf3's stderr) if it exits or does not
    listen within *timeout* seconds; the process is killed in that case.
    """
    srv = IperfServer(ns, port, bind=bind, one_off=one_off, extra_args=extra_args)
    try:
        srv.wait_listening(timeout)
    except BaseException:
        srv.close()
        raise
    return srv


# -------------------------------------------------------------------- flow ---


class IperfFlow(_Proc):
    """``iperf3 -c ADDR -p PORT -C CCA -t SECONDS -i INTERVAL -J`` in *ns*, started at once.

    *cport* pins the data connection's local port (``--cport``); *bitrate* is
    ``-b`` (bit/s, or an iperf3 string such as ``"100M"``); *udp* sends UDP
    (``-u``; *cca* is then ignored).  Call :meth:`wait` for the
    :class:`IperfResult`.  :func:`start_flow` is this constructor.
    """

    def __init__(
        self,
        ns: str,
        server_addr: str,
        port: int = DEFAULT_PORT,
        *,
        cca: str | None = "cubic",
        seconds: float = 10.0,
        interval: float = 1.0,
        cport: int | None = None,
        bitrate: str | float | None = None,
        udp: bool = False,
        extra_args: Sequence[str] = (),
    ) -> None:
        self.server_addr = server_addr
        self.port = port
        self.cca = cca
        self.seconds = seconds
        self.cport = cport
        argv = [
            IPERF3,
            "-c",
            server_addr,
            "-p",
            str(port),
            "-t",
            _num(seconds),
            "-i",
            _num(interval),
            "-J",
        ]
        if udp:
            argv.append("-u")
        elif cca:
            argv += ["-C", cca]
        if cport is not None:
            argv += ["--cport", str(cport)]
        if bitrate is not None:
            argv += ["-b", bitrate if isinstance(bitrate, str) else _num(bitrate)]
        argv += list(extra_args)
        self._result: IperfResult | None = None
        super().__init__(ns, argv)

    def wait(self, timeout: float | None = None) -> IperfResult:
        """Wait for the flow to finish and parse its JSON report.

        *timeout* defaults to the flow's duration + 20 s.  Raises
        :class:`IperfError` on timeout (the process is killed), on a non-zero
        exit or an ``error`` field (message includes iperf3's error and stderr).
        """
        if self._result is not None:
            return self._result
        if timeout is None:
            timeout = self.seconds + 20.0
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired as e:
            self.kill()
            raise IperfError(f"iperf3 flow {self._desc()} timed out after {timeout:g} s") from e
        out, err = self.stdout(), self.stderr()
        rc = self.proc.returncode
        try:
            data = json.loads(out)
        except ValueError:
            raise IperfError(
                f"iperf3 flow {self._desc()} exited with {rc} without a JSON report; "
                f"stderr: {err or '(empty)'}; stdout: {out.strip()[:500] or '(empty)'}"
            ) from None
        if data.get("error") or rc != 0:
            msg = data.get("error") or "(no error field)"
            raise IperfError(
                f"iperf3 flow {self._desc()} failed: {msg} (exit status {rc}" + (f"; stderr: {err})" if err else ")")
            )
        self._result = parse_result(data)
        return self._result

    def _desc(self) -> str:
        return f"{self.ns} -> {self.server_addr}:{self.port} ({self.cca or 'default'})"


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


start_flow = IperfFlow
"""Start an iperf3 client flow in a namespace and return its handle at once (see :class:`IperfFlow`)."""


def run_flow(
    sender_ns: str,
    receiver_ns: str,
    server_addr: str,
    port: int = DEFAULT_PORT,
    **flow_kwargs: Any,
) -> IperfResult:
    """One-off server in *receiver_ns* + flow from *sender_ns*; wait and return the result."""
    with (
        start_server(receiver_ns, port, bind=server_addr),
        start_flow(sender_ns, server_addr, port, **flow_kwargs) as flow,
    ):
        return flow.wait()
