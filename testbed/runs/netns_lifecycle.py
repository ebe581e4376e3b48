"""Network namespaces themselves: names, ownership records, creation and removal.

A testbed namespace is named ``ccs-<6 hex>-<role>`` (:data:`PREFIX`), pinned at
``/run/netns/NAME`` and owned: before it is created,
``/run/ccswitch/netns/<name>.owner`` records the creating process (PID and its
start time, so a recycled PID does not look alive).  :func:`create_netns_group`
/ :func:`delete_netns_all` make and remove one ``ccs-ID-*`` set;
:func:`cleanup_leftovers` removes the ones whose owner is dead.
:func:`nsenter_argv` is how a command addresses a namespace (``nsenter --net``).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from pyroute2 import IPRoute
from pyroute2 import netns as _pr_netns

PREFIX = "ccs-"
"""Name prefix of every namespace this module creates."""
NETNS_RUN_DIR = "/run/netns"
"""Where ``ip netns`` (and pyroute2) keep the namespace bind mounts."""
OWNER_DIR = "/run/ccswitch/netns"
"""Ownership records: ``<name>.owner`` containing ``"<pid> <starttime>"``."""


class NetnsError(RuntimeError):
    """A namespace operation failed."""


# --------------------------------------------------------------- basics ---


def _check_name(name: str) -> str:
    if not name or "/" in name or name in (".", "..") or "\0" in name:
        raise ValueError(f"invalid network namespace name: {name!r}")
    return name


def netns_path(name: str) -> str:
    """Path of the bind mount that pins namespace *name* (``/run/netns/NAME``)."""
    return f"{NETNS_RUN_DIR}/{_check_name(name)}"


def ns_file(name_or_path: str) -> str:
    """*name_or_path* as a namespace file: a name becomes ``/run/netns/NAME``, a path stays."""
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


def nsenter_argv(name: str, argv: Sequence[str]) -> list[str]:
    """``nsenter --net=/run/netns/NAME -- argv...`` (only the network namespace)."""
    return ["nsenter", f"--net={ns_file(name)}", "--", *argv]


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


@contextlib.contextmanager
def sigterm_as_exit() -> Iterator[None]:
    """SIGTERM raises SystemExit in the main thread while the body runs, so the namespace owners' ``with``
    blocks (topologies, bottlenecks, linkemu) tear down on ``kill`` as on Ctrl-C; a long driver without it
    dies at once and leaves its namespaces and linkemu behind.  Outside the main thread: no change."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _exit(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    old = signal.signal(signal.SIGTERM, _exit)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


@contextlib.contextmanager
def sigint_deferred() -> Iterator[None]:
    """Hold back Ctrl-C while the body runs (main thread only), then re-deliver it.

    Namespace owners tear down inside it (:class:`~ccswitch.testbed.runs.bottleneck.Bottleneck`, the topology).
    """
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
