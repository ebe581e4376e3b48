"""Network-namespace topologies for experiments and tests.

Everything here needs root.  The building blocks:

* :class:`Bottleneck` -- a sender and a receiver namespace joined by a veth pair,
  with a token-bucket (``tbf``) bottleneck on the sender's egress::

      with Bottleneck(rate_mbit=50) as bn:
          run_in(bn.receiver, ["iperf3", "-s", "-1"])  ...
          with entered(bn.sender):
              ...  # this thread now lives in the sender namespace

* :func:`run_in` / :func:`popen_in` -- run a command inside a namespace with
  ``nsenter --net=/run/netns/NAME``.  Unlike ``ip netns exec`` this does not enter
  a new mount namespace or remount ``/sys``, so ``/sys/fs/bpf`` (pinned BPF maps)
  stays visible to the command.
* :func:`entered` -- move the *current thread* into a namespace with ``setns(2)``
  and back.  Sockets (and BPF iterators) created inside see that namespace.
* :func:`set_tbf` / :func:`qdisc_drops` -- change the bottleneck at runtime and
  read its drop counter.  Both use iproute2's ``tc`` (the reference encoder:
  pyroute2 0.9.7's tbf support only knows the legacy 32-bit rate + rate table).
* :func:`cleanup_leftovers` -- remove ``ccs-*`` namespaces whose creating process
  is dead (a crashed or SIGKILLed test run).
* The pieces every namespace or process owner of the testbed shares:
  :func:`create_netns_group` / :func:`delete_netns_all` (one ``ccs-ID-*`` set),
  :func:`wait_oper_up`, :func:`stop_process` (SIGTERM, grace, SIGKILL),
  :class:`LiveHandles` (what is still open at interpreter exit gets closed)
  and :class:`Resource` (the ``with`` protocol over open/close).

Ownership: before a namespace is created, ``/run/ccswitch/netns/<name>.owner``
records the creating process (PID and its start time, so a recycled PID does not
look alive).  Namespace names are ``ccs-<6 hex>-<role>`` so concurrent runs never
collide.
"""

from __future__ import annotations

import abc
import atexit
import contextlib
import ctypes
import ctypes.util
import json
import os
import random
import secrets
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Generic, Self, TypeVar

from pyroute2 import IPRoute
from pyroute2 import netns as _pr_netns

__all__ = [
    "DEFAULT_RATE_MBIT",
    "NETNS_RUN_DIR",
    "OWNER_DIR",
    "PREFIX",
    "Bottleneck",
    "LiveHandles",
    "NetnsError",
    "Resource",
    "cleanup_leftovers",
    "clear_qdisc",
    "create_netns",
    "create_netns_group",
    "delete_netns",
    "delete_netns_all",
    "entered",
    "list_netns",
    "missing_tools",
    "netns_exists",
    "netns_path",
    "nsenter_argv",
    "owner_alive",
    "owner_pid",
    "popen_in",
    "qdisc_drops",
    "qdisc_stats",
    "run_in",
    "set_tbf",
    "stop_process",
    "tbf_defaults",
    "wait_for_stderr",
    "wait_oper_up",
]

PREFIX = "ccs-"
"""Name prefix of every namespace this module creates."""
NETNS_RUN_DIR = "/run/netns"
"""Where ``ip netns`` (and pyroute2) keep the namespace bind mounts."""
OWNER_DIR = "/run/ccswitch/netns"
"""Ownership records: ``<name>.owner`` containing ``"<pid> <starttime>"``."""

DEFAULT_RATE_MBIT = 50.0
"""Default bottleneck rate of :class:`Bottleneck`."""
MTU = 1500
FRAME_BYTES = MTU + 14
"""Bytes a full-size packet occupies in tbf's accounting (IP MTU + Ethernet header)."""
DEFAULT_QUEUE_MS = 20.0
"""Default tbf queue: this many milliseconds of data at the bottleneck rate."""

CLONE_NEWNET = 0x40000000


class NetnsError(RuntimeError):
    """A namespace operation failed."""


class Resource(abc.ABC):
    """Base of the testbed's context managers (namespace sets, processes).

    ``with X(...) as x`` calls :meth:`open` on entry and :meth:`leave` on exit,
    also through an exception; :meth:`leave` closes by default.
    """

    def open(self) -> None:  # noqa: B027 (optional hook: most acquire in open, processes in __init__)
        """Acquire what the handle holds (default: nothing, the constructor did)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release everything (idempotent)."""

    def leave(self, failed: bool) -> None:
        """End of the ``with`` block; *failed*: it is being left through an exception."""
        self.close()

    def __enter__(self) -> Self:
        self.open()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.leave(exc_type is not None)


_H = TypeVar("_H")


class LiveHandles(Generic[_H]):
    """Handles (namespace sets, processes) that must not outlive the interpreter.

    Owners :meth:`add` a handle when it starts holding something and
    :meth:`discard` it when released; at interpreter exit *close* is called on
    every handle still registered (errors suppressed).  The set holds strong
    references, so a forgotten handle is still closed.
    """

    def __init__(self, close: Callable[[_H], object]) -> None:
        self._close = close
        self._handles: set[_H] = set()
        self._lock = threading.Lock()
        atexit.register(self.close_all)

    def add(self, handle: _H) -> None:
        with self._lock:
            self._handles.add(handle)

    def discard(self, handle: _H) -> None:
        with self._lock:
            self._handles.discard(handle)

    def forget_all(self) -> None:
        """Drop every handle without closing it (a forked child's copy)."""
        self._handles.clear()

    def close_all(self) -> None:
        with self._lock:
            live = list(self._handles)
        for handle in live:
            with contextlib.suppress(Exception):
                self._close(handle)


# --------------------------------------------------------------- basics ---


def _check_name(name: str) -> str:
    if not name or "/" in name or name in (".", "..") or "\0" in name:
        raise ValueError(f"invalid network namespace name: {name!r}")
    return name


def netns_path(name: str) -> str:
    """Path of the bind mount that pins namespace *name* (``/run/netns/NAME``)."""
    return f"{NETNS_RUN_DIR}/{_check_name(name)}"


def _ns_file(name_or_path: str) -> str:
    return name_or_path if name_or_path.startswith("/") else netns_path(name_or_path)


def netns_exists(name: str) -> bool:
    """True if ``/run/netns/NAME`` exists."""
    return os.path.exists(netns_path(name))


def list_netns(prefix: str = PREFIX) -> list[str]:
    """Names of the named namespaces starting with *prefix* (sorted)."""
    try:
        names = os.listdir(NETNS_RUN_DIR)
    except FileNotFoundError:
        return []
    return sorted(n for n in names if n.startswith(prefix))


def _owner_file(name: str) -> Path:
    return Path(OWNER_DIR) / f"{_check_name(name)}.owner"


def _proc_starttime(pid: int) -> int | None:
    """Start time (clock ticks since boot) of a live, non-zombie *pid*, else None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # Fields after "(comm)": state is field 3, starttime field 22.
    fields = stat[stat.rfind(")") + 2 :].split()
    if not fields or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def _write_owner(name: str, pid: int | None = None) -> None:
    pid = os.getpid() if pid is None else pid
    start = _proc_starttime(pid)
    if start is None:
        raise NetnsError(f"owner process {pid} is not alive")
    path = _owner_file(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(f"{pid} {start}\n")
    tmp.replace(path)


def owner_pid(name: str) -> int | None:
    """PID recorded as the creator of *name*, or None if there is no record."""
    try:
        return int(_owner_file(name).read_text().split()[0])
    except (FileNotFoundError, ValueError, IndexError):
        return None


def owner_alive(name: str) -> bool | None:
    """True/False for a recorded owner that is alive/dead; None without a record."""
    try:
        pid_s, start_s = _owner_file(name).read_text().split()[:2]
        pid, recorded_start = int(pid_s), int(start_s)
    except FileNotFoundError:
        return None
    except ValueError:
        return False  # unreadable record: treat as dead
    return _proc_starttime(pid) == recorded_start


# ---------------------------------------------------- running commands ---


def nsenter_argv(name: str, argv: Sequence[str]) -> list[str]:
    """``nsenter --net=/run/netns/NAME -- argv...`` (only the network namespace)."""
    return ["nsenter", f"--net={_ns_file(name)}", "--", *argv]


def run_in(name: str, argv: Sequence[str], *, check: bool = True, **kwargs: Any) -> subprocess.CompletedProcess[Any]:
    """Run *argv* inside namespace *name* and wait (``subprocess.run`` semantics).

    ``check`` defaults to True; other keyword arguments go to ``subprocess.run``.
    """
    return subprocess.run(nsenter_argv(name, argv), check=check, **kwargs)


def popen_in(name: str, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
    """Start *argv* inside namespace *name*; keyword arguments go to ``Popen``.

    ``nsenter`` execs the command, so the returned PID is the command's own.
    """
    return subprocess.Popen(nsenter_argv(name, argv), **kwargs)


def wait_for_stderr(proc: subprocess.Popen[Any], needle: bytes, timeout_s: float = 30.0) -> None:
    """Block until *needle* appears on *proc*'s stderr (a pipe); RuntimeError with its last output if the
    process exits first or *timeout_s* passes (a loaded host can take seconds to import numpy)."""
    assert proc.stderr is not None
    os.set_blocking(proc.stderr.fileno(), False)
    seen, end = b"", time.monotonic() + timeout_s
    while time.monotonic() < end:
        seen += proc.stderr.read() or b""
        if needle in seen:
            return
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[-1]!r}... exited before {needle!r}: "
                               f"{seen.decode(errors='replace')[-500:]}")
        time.sleep(0.05)
    raise RuntimeError(f"no {needle!r} after {timeout_s} s: {seen.decode(errors='replace')[-500:]}")


def stop_process(proc: subprocess.Popen[Any], grace_s: float) -> None:
    """SIGTERM *proc* if it still runs, SIGKILL it after *grace_s* seconds; reap it."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


_libc: ctypes.CDLL | None = None


def _setns(fd: int) -> None:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns(CLONE_NEWNET): {os.strerror(err)}")


@contextlib.contextmanager
def entered(name: str) -> Iterator[None]:
    """Move the *current thread* into network namespace *name* (or a ns file path).

    Other (running) threads of the process are unaffected; threads *started*
    inside inherit the namespace, like any child task.  On exit (also on exceptions) the
    thread returns to the namespace it was in before.  Sockets created inside stay
    in the namespace they were created in.  Must be exited on the thread that
    entered it (do not ``await`` across threads inside).
    """
    target = os.open(_ns_file(name), os.O_RDONLY | os.O_CLOEXEC)
    try:
        orig = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    except BaseException:
        os.close(target)
        raise
    try:
        _setns(target)
        os.close(target)
        target = -1
        try:
            yield
        finally:
            try:
                _setns(orig)
            except OSError as e:  # pragma: no cover - should never happen
                raise NetnsError(f"could not restore the thread's network namespace: {e}") from e
    finally:
        if target >= 0:
            os.close(target)
        os.close(orig)


# ------------------------------------------------- create / delete ---


def _pids_in(name: str) -> list[int]:
    """PIDs (other than ours) whose main thread lives in namespace *name*."""
    try:
        st = os.stat(netns_path(name))
    except FileNotFoundError:
        return []
    me = os.getpid()
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            s = os.stat(f"/proc/{entry}/ns/net")
        except OSError:
            continue
        if (s.st_dev, s.st_ino) == (st.st_dev, st.st_ino):
            pids.append(int(entry))
    return pids


def _kill_all_in(name: str, grace_s: float = 1.0) -> None:
    pids = _pids_in(name)
    if not pids:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            pids = [p for p in pids if _proc_starttime(p) is not None]
            if not pids:
                return
            time.sleep(0.02)


def create_netns(name: str, *, owner: int | None = None) -> None:
    """Create named namespace *name* with loopback up, recording *owner* (default: us).

    Raises ``FileExistsError`` if the name is taken.
    """
    _check_name(name)
    if netns_exists(name):
        raise FileExistsError(f"network namespace {name} already exists")
    _write_owner(name, owner)  # before the namespace, so it is never unowned
    try:
        _pr_netns.create(name)
    except BaseException:
        _owner_file(name).unlink(missing_ok=True)
        raise
    try:
        with IPRoute(netns=name, flags=0) as ipr:
            ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], state="up")
    except BaseException:
        delete_netns(name)
        raise


def delete_netns(name: str) -> None:
    """Kill the processes inside *name*, remove the namespace and its owner record.

    Idempotent: a missing namespace is not an error.

    Between the two, the namespace's TCP sockets are aborted (``ss -K``,
    SOCK_DESTROY): a process killed mid-transfer leaves orphaned
    FIN-WAIT-1 sockets, and once the path is gone they retransmit for
    ~2 minutes (tcp_orphan_retries), each holding its congestion control
    (a BPF struct_ops map stays alive) and the namespace (docs/l4s-kernel.md).
    """
    _check_name(name)
    if os.path.exists(netns_path(name)):
        _kill_all_in(name)
        subprocess.run(nsenter_argv(name, ["ss", "-K", "-tanH"]), capture_output=True, check=False)
        with contextlib.suppress(FileNotFoundError):
            _pr_netns.remove(name)
    _owner_file(name).unlink(missing_ok=True)


def create_netns_group(roles: Sequence[str], created: list[str]) -> str:
    """Create ``ccs-ID-ROLE`` for every role under one fresh random ``ID``; return ``ID``.

    Each namespace made is appended to *created* as soon as it exists (so the
    caller's teardown finds it even if a later step fails).  If a name of the
    set is taken, the ones made in that attempt are deleted and another ID is
    tried (8 attempts).
    """
    for _attempt in range(8):
        ident = secrets.token_hex(3)
        made: list[str] = []
        try:
            for role in roles:
                name = f"{PREFIX}{ident}-{role}"
                create_netns(name)
                made.append(name)
                created.append(name)
        except FileExistsError:
            for name in reversed(made):
                delete_netns(name)
                created.remove(name)
            continue
        return ident
    raise NetnsError("could not find a free namespace name")


def delete_netns_all(created: list[str]) -> list[str]:
    """Delete the namespaces in *created*, newest first, going on past failures.

    Empties *created*; returns one ``"NAME: error"`` per namespace that could
    not be removed.
    """
    errors = []
    for name in reversed(created):
        try:
            delete_netns(name)
        except Exception as e:  # keep going: remove as much as possible
            errors.append(f"{name}: {e}")
    created.clear()
    return errors


def cleanup_leftovers(prefix: str = PREFIX, *, include_unowned: bool = False) -> list[str]:
    """Remove ``prefix*`` namespaces whose owner process is dead; return their names.

    Namespaces without an owner record are left alone unless *include_unowned*
    (they were not made by this module).  Stale owner records whose namespace is
    gone are deleted too.
    """
    removed = []
    for name in list_netns(prefix):
        alive = owner_alive(name)
        if alive or (alive is None and not include_unowned):
            continue
        delete_netns(name)
        removed.append(name)
    with contextlib.suppress(FileNotFoundError):
        for rec in Path(OWNER_DIR).glob(f"{prefix}*.owner"):
            name = rec.name.removesuffix(".owner")
            if not netns_exists(name) and not owner_alive(name):
                rec.unlink(missing_ok=True)
    return removed


# --------------------------------------------------------------- qdiscs ---


def tbf_defaults(
    rate_mbit: float,
    burst_bytes: int | None = None,
    limit_bytes: int | None = None,
    limit_packets: int | None = None,
) -> tuple[int, int]:
    """Resolve tbf ``(burst_bytes, limit_bytes)`` defaults for *rate_mbit*.

    * burst: 1 ms worth of the rate, at least 10 full-size frames (15 140 B);
    * limit: ``limit_bytes``, else ``limit_packets`` full-size frames (1514 B each),
      else 20 ms of queue at the rate; never less than two frames.
    """
    if rate_mbit <= 0:
        raise ValueError(f"rate_mbit must be > 0, got {rate_mbit}")
    if limit_bytes is not None and limit_packets is not None:
        raise ValueError("give limit_bytes or limit_packets, not both")
    rate_bytes_s = rate_mbit * 1e6 / 8
    burst = burst_bytes if burst_bytes is not None else max(int(rate_bytes_s / 1000), 10 * FRAME_BYTES)
    if limit_bytes is not None:
        limit = limit_bytes
    elif limit_packets is not None:
        limit = limit_packets * FRAME_BYTES
    else:
        limit = int(rate_bytes_s * DEFAULT_QUEUE_MS / 1000)
    if burst <= 0:
        raise ValueError(f"burst_bytes must be > 0, got {burst}")
    return burst, max(limit, 2 * FRAME_BYTES)


def set_tbf(
    ns: str,
    dev: str,
    rate_mbit: float,
    *,
    burst_bytes: int | None = None,
    limit_bytes: int | None = None,
    limit_packets: int | None = None,
) -> None:
    """Install or change (``tc qdisc replace``) a root tbf on *dev* inside *ns*.

    Defaults as in :func:`tbf_defaults`.  Replacing keeps the qdisc's counters.
    """
    burst, limit = tbf_defaults(rate_mbit, burst_bytes, limit_bytes, limit_packets)
    rate_bit = round(rate_mbit * 1e6)
    _tc(ns, f"qdisc replace dev {dev} root tbf rate {rate_bit}bit burst {burst} limit {limit}".split())


def clear_qdisc(ns: str, dev: str) -> None:
    """Remove the root qdisc of *dev* in *ns* (back to the default); no-op if none."""
    cp = run_in(ns, ["tc", "qdisc", "del", "dev", dev, "root"], check=False, capture_output=True, text=True)
    if cp.returncode != 0 and "No such file" not in cp.stderr and "Cannot delete" not in cp.stderr:
        raise NetnsError(f"tc qdisc del dev {dev} root (in {ns}) failed: {cp.stderr.strip()}")


def _tc(ns: str, args: list[str]) -> str:
    cp = run_in(ns, ["tc", *args], check=False, capture_output=True, text=True)
    if cp.returncode != 0:
        raise NetnsError(f"tc {' '.join(args)} (in {ns}) failed: {cp.stderr.strip()}")
    return cp.stdout


def qdisc_stats(ns: str, dev: str) -> list[dict[str, Any]]:
    """``tc -s -j qdisc show dev DEV`` inside *ns*, parsed (one dict per qdisc)."""
    out = _tc(ns, ["-s", "-j", "qdisc", "show", "dev", dev])
    return json.loads(out) if out.strip() else []


def qdisc_drops(ns: str, dev: str) -> int:
    """Packets dropped by the tbf qdisc(s) on *dev* in *ns* (cumulative).

    Raises :class:`NetnsError` if *dev* has no tbf qdisc.
    """
    tbfs = [q for q in qdisc_stats(ns, dev) if q.get("kind") == "tbf"]
    if not tbfs:
        raise NetnsError(f"no tbf qdisc on {dev} in {ns}")
    return sum(int(q.get("drops", 0)) for q in tbfs)


# ----------------------------------------------------------- Bottleneck ---

_SENDER_IFINDEX = 10


def wait_oper_up(ns: str, dev: str, timeout_s: float = 3.0) -> None:
    """Wait until *dev* in *ns* reports operstate UP (its qdisc is active)."""
    deadline = time.monotonic() + timeout_s
    with IPRoute(netns=ns, flags=0) as ipr:
        while True:
            links = ipr.get_links(ifname=dev)
            state = links[0].get_attr("IFLA_OPERSTATE") if links else None
            if state == "UP":
                return
            if time.monotonic() > deadline:
                raise NetnsError(f"{dev} in {ns} did not come up (operstate {state})")
            time.sleep(0.01)


@contextlib.contextmanager
def _sigint_deferred() -> Iterator[None]:
    """Hold back Ctrl-C while the body runs (main thread only), then re-deliver it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []
    try:
        old = signal.signal(signal.SIGINT, lambda signum, _frame: got.append(signum))
    except ValueError:  # not in the main interpreter
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
        if got:
            if callable(old):
                old(signal.SIGINT, None)
            elif old == signal.SIG_DFL:
                os.kill(os.getpid(), signal.SIGINT)


class Bottleneck(Resource):
    """Sender and receiver namespaces joined by a veth pair with a tbf bottleneck.

    Topology (``ID`` is 6 random hex digits, ``A.B.C`` a random 10/8 subnet)::

        ccs-ID-snd                              ccs-ID-rcv
        snd0 10.A.B.C+1/30  ==== veth ====  rcv0 10.A.B.C+2/30
        (root tbf: rate_mbit, burst, limit)

    Parameters:
        rate_mbit: bottleneck rate in Mbit/s (10^6 bit/s) on the sender's egress;
            default 50.  ``None`` installs no qdisc (unshaped veth).
        burst_bytes: tbf bucket size; default 1 ms at the rate, >= 10 frames.
        limit_bytes: tbf queue size in bytes; default 20 ms at the rate.
        limit_packets: alternative to *limit_bytes*, in 1514-byte frames.
        disable_ipv6: turn IPv6 off on both veth ends (no RS/DAD noise in captures).
        router: put a forwarding router namespace (``ccs-ID-rtr``) between sender and
            receiver and the tbf on its egress towards the receiver, so queue overflow
            is real packet loss for the sender (see :attr:`shaper`).

    Use as a context manager; leaving it (also through an exception or Ctrl-C)
    kills the processes inside and removes both namespaces.  Attributes:
    ``sender``, ``receiver`` (namespace names), ``sender_dev``, ``receiver_dev``,
    ``sender_addr``, ``receiver_addr`` (IPv4 strings), ``prefixlen``, ``id``.
    """

    sender_dev = "snd0"
    receiver_dev = "rcv0"
    router_devs = ("rtr0", "rtr1")  # towards the sender, towards the receiver
    prefixlen = 30

    def __init__(
        self,
        rate_mbit: float | None = DEFAULT_RATE_MBIT,
        *,
        burst_bytes: int | None = None,
        limit_bytes: int | None = None,
        limit_packets: int | None = None,
        disable_ipv6: bool = True,
        router: bool = False,
    ) -> None:
        if rate_mbit is not None:
            tbf_defaults(rate_mbit, burst_bytes, limit_bytes, limit_packets)  # validate
        self.rate_mbit = rate_mbit
        self.burst_bytes = burst_bytes
        self.limit_bytes = limit_bytes
        self.limit_packets = limit_packets
        self.disable_ipv6 = disable_ipv6
        self.router = ""  # router namespace name when router=True
        self._with_router = router
        self.id = ""
        self.sender = ""
        self.receiver = ""
        rnd = random.SystemRandom()
        base = f"10.{rnd.randint(1, 254)}.{rnd.randint(0, 255)}.{rnd.randrange(0, 256, 8)}"  # two /30s: .0-.7
        net = base.rsplit(".", 1)
        self.sender_addr = f"{net[0]}.{int(net[1]) + 1}"
        self.receiver_addr = f"{net[0]}.{int(net[1]) + 2}"
        if router:  # sender net .0/30 (router .2), receiver net .4/30 (router .5, receiver .6)
            self.router_addrs = (f"{net[0]}.{int(net[1]) + 2}", f"{net[0]}.{int(net[1]) + 5}")
            self.receiver_addr = f"{net[0]}.{int(net[1]) + 6}"
        self._created: list[str] = []
        self._closed = False

    # -- lifecycle --

    def open(self) -> None:
        """Create the namespaces, veth pair, addresses and qdisc."""
        if self._created:
            raise NetnsError("Bottleneck is already open")
        _live.add(self)
        self._closed = False
        try:
            self._create_namespaces()
            self._configure()
        except BaseException:
            self.close()
            raise

    def _create_namespaces(self) -> None:
        roles = ("snd", "rcv", "rtr") if self._with_router else ("snd", "rcv")
        self.id = create_netns_group(roles, self._created)
        self.sender, self.receiver = f"{PREFIX}{self.id}-snd", f"{PREFIX}{self.id}-rcv"
        if self._with_router:
            self.router = f"{PREFIX}{self.id}-rtr"

    def _configure(self) -> None:
        if self.router:
            self._configure_routed()
        else:
            self._configure_direct()
        if self.disable_ipv6:
            for ns, dev in self._ends():
                with entered(ns), contextlib.suppress(OSError):
                    Path(f"/proc/sys/net/ipv6/conf/{dev}/disable_ipv6").write_text("1\n")
        if self.rate_mbit is not None:
            self.set_rate(
                self.rate_mbit,
                burst_bytes=self.burst_bytes,
                limit_bytes=self.limit_bytes,
                limit_packets=self.limit_packets,
            )

    def _ends(self) -> list[tuple[str, str]]:
        ends = [(self.sender, self.sender_dev), (self.receiver, self.receiver_dev)]
        if self.router:
            ends += [(self.router, self.router_devs[0]), (self.router, self.router_devs[1])]
        return ends

    @property
    def shaper(self) -> tuple[str, str]:
        """(namespace, device) whose egress holds the tbf: the router's side
        towards the receiver when routed, else the sender's own veth."""
        return (self.router, self.router_devs[1]) if self.router else (self.sender, self.sender_dev)

    def _veth(self, ns: str, dev: str, addr: str, peer_ns: str, peer_dev: str, peer_addr: str,
              index: int) -> None:
        with IPRoute(netns=ns, flags=0) as ipr:
            ipr.link("add", index=index, ifname=dev, kind="veth",
                     peer={"ifname": peer_dev, "net_ns_fd": peer_ns})
            idx = ipr.link_lookup(ifname=dev)[0]
            ipr.addr("add", index=idx, address=addr, prefixlen=self.prefixlen)
            ipr.link("set", index=idx, state="up")
        with IPRoute(netns=peer_ns, flags=0) as ipr:
            idx = ipr.link_lookup(ifname=peer_dev)[0]
            ipr.addr("add", index=idx, address=peer_addr, prefixlen=self.prefixlen)
            ipr.link("set", index=idx, state="up")
        wait_oper_up(ns, dev)
        wait_oper_up(peer_ns, peer_dev)

    def _configure_routed(self) -> None:
        """sender --veth-- router --veth-- receiver; the router forwards and shapes.

        Drops at the router are real losses for the sender's TCP, whereas a full
        qdisc on the sender's own device only makes its stack hold packets back.
        """
        r_snd, r_rcv = self.router_devs
        self._veth(self.sender, self.sender_dev, self.sender_addr, self.router, r_snd,
                   self.router_addrs[0], _SENDER_IFINDEX)
        self._veth(self.router, r_rcv, self.router_addrs[1], self.receiver, self.receiver_dev,
                   self.receiver_addr, _SENDER_IFINDEX + 1)
        with entered(self.router):
            Path("/proc/sys/net/ipv4/ip_forward").write_text("1\n")
        for ns, gw in ((self.sender, self.router_addrs[0]), (self.receiver, self.router_addrs[1])):
            with IPRoute(netns=ns, flags=0) as ipr:
                ipr.route("add", dst="0.0.0.0/0", gateway=gw)

    def _configure_direct(self) -> None:
        with IPRoute(netns=self.sender, flags=0) as ipr:
            # Explicit ifindex: the peer gets ifindex 2 in its fresh namespace; were
            # ours 2 as well, the kernel's linkwatch would treat the carrier change as
            # non-urgent and keep the devices' qdiscs inactive for ~1 s.
            ipr.link(
                "add",
                index=_SENDER_IFINDEX,
                ifname=self.sender_dev,
                kind="veth",
                peer={"ifname": self.receiver_dev, "net_ns_fd": self.receiver},
            )
            idx = ipr.link_lookup(ifname=self.sender_dev)[0]
            ipr.addr("add", index=idx, address=self.sender_addr, prefixlen=self.prefixlen)
            ipr.link("set", index=idx, state="up")
        with IPRoute(netns=self.receiver, flags=0) as ipr:
            idx = ipr.link_lookup(ifname=self.receiver_dev)[0]
            ipr.addr("add", index=idx, address=self.receiver_addr, prefixlen=self.prefixlen)
            ipr.link("set", index=idx, state="up")
        wait_oper_up(self.sender, self.sender_dev)
        wait_oper_up(self.receiver, self.receiver_dev)

    def close(self) -> None:
        """Kill processes inside and remove both namespaces (idempotent).

        Ctrl-C arriving meanwhile is delivered after the teardown finished.
        """
        if self._closed:
            return
        with _sigint_deferred():
            errors = delete_netns_all(self._created)
            self._closed = True
            _live.discard(self)
        if errors:
            raise NetnsError("teardown incomplete: " + "; ".join(errors))

    # -- runtime --

    @property
    def namespaces(self) -> list[str]:
        """Names of the namespaces currently owned by this instance."""
        return list(self._created)

    def set_rate(
        self,
        rate_mbit: float,
        *,
        burst_bytes: int | None = None,
        limit_bytes: int | None = None,
        limit_packets: int | None = None,
    ) -> None:
        """Change (or install) the bottleneck tbf (see :attr:`shaper`, :func:`set_tbf`)."""
        set_tbf(
            *self.shaper,
            rate_mbit,
            burst_bytes=burst_bytes,
            limit_bytes=limit_bytes,
            limit_packets=limit_packets,
        )
        self.rate_mbit = rate_mbit

    def drops(self) -> int:
        """Cumulative drops of the bottleneck tbf."""
        return qdisc_drops(*self.shaper)

    def __repr__(self) -> str:
        return (
            f"Bottleneck(sender={self.sender!r}, receiver={self.receiver!r}, "
            f"receiver_addr={self.receiver_addr!r}, rate_mbit={self.rate_mbit})"
        )


_live: LiveHandles[Bottleneck] = LiveHandles(Bottleneck.close)


def missing_tools() -> list[str]:
    """Names of the external tools this module needs that are missing from PATH."""
    return [t for t in ("nsenter", "tc") if shutil.which(t) is None]
