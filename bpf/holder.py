"""Keep a BPF congestion control (prague, pcc) registered while any ccswitch process uses it.

A struct_ops registration is kernel-wide but lives as long as its link fd: made by one process,
it vanished when that process exited, under every other process that was using it.  The link fd
is therefore handed to a small holder process, one per algorithm, which keeps it for as long as
any ccswitch process that asked for the algorithm is alive, and no longer:

* users -- every process that asked (ensure_prague(), ensure_pcc()) holds LOCK_SH on
  RUN_DIR/<name>.users for as long as its handle is open (`use()`).  The kernel drops a flock
  with the last fd of its open file, so a user that dies (SIGKILL included) stops counting
  without doing anything; a child forked without exec keeps its parent's lock, and uses the
  algorithm as much as its parent does.
* holder -- `python -m ccswitch.bpf.holder NAME --link-fd N`, started detached (its own session,
  reparented to init by a second fork, so no user has to reap it) with the link fd inherited
  from the process that registered.  Every POLL_S it tries LOCK_EX|LOCK_NB on the users file;
  when that succeeds no user is left: it closes the link (the algorithm disappears, as it did
  with its registrar before) and exits.  Its users' shared locks wait for that exclusive one,
  so a process arriving at that moment sees the algorithm gone and registers it afresh.
* start-up -- RUN_DIR/<name>.start, LOCK_EX around "is it registered? if not, register and
  start a holder", so two processes racing never start two holders.  A registration made
  outside these locks (another mount namespace with its own /run, an older ccswitch) still
  answers the attach with EEXIST; callers keep handling that by sharing it.
* namespace -- the holder moves to the host's network namespace (that of its oldest ancestor
  it may see, PID 1 as a rule): started by a process inside a testbed namespace (a run's daemon)
  it would otherwise die with it (delete_netns kills every process inside) and take the
  registration from everyone.

Why the caller registers and hands the link over, instead of the holder loading the object:
errors (verifier, EPERM, EEXIST) surface in the caller as they always did; Prague's tunables
are set through the caller's own object before the attach, so no socket can run untuned; the
first caller holds PCC's seed map directly, without CAP_SYS_ADMIN (which systemd's unit lacks
and which finding another process' map by name needs).  The holder needs no libbpf at all.

Nothing is pinned: when every user and the holder are gone (SIGKILL included), the link, its
maps and programs go with their fds.  A holder started by ccswitchd lives in the unit's cgroup
and is stopped with it (SIGTERM, its default action); other users then see the algorithm gone,
and a DataPlane registers it again on its next tick (DataPlane.refresh_pcc).  The lock files
must not be removed while in use (/run/ccswitch is kept across restarts by the unit:
RuntimeDirectoryPreserve=yes).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:  # the holder process itself needs no libbpf
    from ccswitch.bpf.libbpf import BpfObject

RUN_DIR = Path("/run/ccswitch")
POLL_S = 0.25  # the holder's look for users: the algorithm outlives its last user by this much
READY_TIMEOUT_S = 5.0
USE_TIMEOUT_S = 10.0  # a holder holds the users file exclusively only while it unregisters
STARTUP_TIMEOUT_S = 60.0  # another process' load + verify + holder start-up (PCC: seconds on a loaded VM)
AVAILABLE = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")
MODULE = "ccswitch.bpf.holder"
# systemd's per-unit variables (sd_notify, watchdog) are the daemon's, never the holder's
UNIT_ENV = ("NOTIFY_SOCKET", "WATCHDOG_PID", "WATCHDOG_USEC", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES")


class HolderError(RuntimeError):
    """The algorithm could not be kept beyond this process (one line: what and the fix)."""


def lock_path(name: str, kind: str) -> Path:
    return RUN_DIR / f"{name}.{kind}"


def _open_lock(name: str, kind: str) -> int:
    RUN_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
    return os.open(lock_path(name, kind), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)


def _flock_within(fd: int, op: int, timeout_s: float) -> bool:
    """flock(fd, op) retried until timeout_s; False if it stayed taken (no blocking flock: no signal
    handler games, and a stuck peer gives an error instead of a hang)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            fcntl.flock(fd, op | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)


class Use:
    """This process' use of algorithm `name`: LOCK_SH on its users file while open."""

    def __init__(self, name: str, timeout_s: float = USE_TIMEOUT_S):
        self.name = name
        self._fd: int | None = None
        self._fd = _open_lock(name, "users")
        if not _flock_within(self._fd, fcntl.LOCK_SH, timeout_s):
            self.close()
            raise HolderError(
                f"{lock_path(name, 'users')} stayed locked for {timeout_s:g} s by an exiting {name} holder; "
                f"kill it (pgrep -af '{MODULE} {name}') and retry")

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # releases the lock: one user fewer
            self._fd = None

    def __del__(self) -> None:  # last resort; handles close() it
        self.close()


@contextlib.contextmanager
def startup(name: str, timeout_s: float = STARTUP_TIMEOUT_S) -> Iterator[None]:
    """Serialise "registered? else register and start a holder" between processes."""
    fd = _open_lock(name, "start")
    try:
        if not _flock_within(fd, fcntl.LOCK_EX, timeout_s):
            raise HolderError(f"another process has been registering {name} for {timeout_s:g} s "
                              f"({lock_path(name, 'start')} locked); find it with `fuser {lock_path(name, 'start')}`")
        yield
    finally:
        os.close(fd)


H = TypeVar("H")


def ensure(name: str, registered: Callable[[], bool], existing: Callable[[Use], H],
           register: Callable[[Use], H]) -> H:
    """The one protocol of ensure_prague() and ensure_pcc(): count this process as a user, then under
    the start-up lock share the registration there is (`existing`) or make one and start its holder
    (`register`).  An EEXIST from the attach means a registration made outside our lock (another mount
    namespace with its own /run, an older ccswitch): shared as well.  The Use is the handle's to close."""
    use = Use(name)
    try:
        with startup(name):
            if registered():
                return existing(use)
            try:
                return register(use)
            except Exception as e:
                if getattr(e, "errno", None) == errno.EEXIST and registered():
                    return existing(use)
                raise
    except BaseException:
        use.close()
        raise


def _holder_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in UNIT_ENV}


def start(name: str, link_fd: int, timeout_s: float = READY_TIMEOUT_S) -> int:
    """Start the holder of `name` with a duplicate of `link_fd`; return its pid once it holds it.

    The caller must hold its Use (or the holder, seeing no user, would exit at once) and startup().
    """
    proc = subprocess.Popen(
        [sys.executable, "-m", MODULE, name, "--link-fd", str(link_fd)], pass_fds=(link_fd,),
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd="/",
        env=_holder_env(), start_new_session=True)
    assert proc.stdout is not None and proc.stderr is not None
    try:
        line = _read_line_within(proc.stdout.fileno(), timeout_s)
        if line.startswith("ready "):
            proc.wait(timeout_s)  # the first fork, which exits once the holder runs
            return int(line.split()[1])
        status = proc.poll()
        with contextlib.suppress(ProcessLookupError):  # the session: first fork and holder
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        err = _read_available(proc.stderr.fileno()).strip().splitlines()
        why = (f"not ready within {timeout_s:g} s" if status is None and not line
               else f"exit status {status}" if status else f"it said {line!r}" if line else "it exited")
        raise HolderError(
            f"the {name} holder ({sys.executable} -m {MODULE}) did not start ({why}"
            + (f": {err[-1]}" if err else "") + f"); {name} would end with this process; "
            f"check that `{sys.executable} -m {MODULE} --help` runs as this user (scripts/setup.sh installs it)")
    finally:
        proc.stdout.close()
        proc.stderr.close()


@dataclass
class Held:
    """This process's use of a held algorithm (prague.py, bic.py): where its registration came from
    ("ccswitch": made here, "ccswitch-shared": another ccswitch process's, "kernel": not ours), the loaded
    object if made here, and the Use that counts this process."""

    source: str
    _obj: BpfObject | None = None
    _use: Use | None = None

    def close(self) -> None:
        """Stop using the algorithm: its holder unregisters it once no ccswitch process uses it."""
        if self._obj:
            self._obj.close()
            self._obj = None
        if self._use:
            self._use.close()
            self._use = None

    def __enter__(self) -> Held:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def existing_source(struct_ops_map: str) -> str:
    """Where a registration made outside this process comes from: "ccswitch-shared" when the struct_ops map
    of ours is live (another ccswitch process registered it), else "kernel" (a module, not ours)."""
    from ccswitch.bpf.libbpf import find_map_by_name

    fd = find_map_by_name(struct_ops_map)
    if fd is None:
        return "kernel"
    os.close(fd)
    return "ccswitch-shared"


def register_held(name: str, obj_path: Path, struct_ops_map: str,
                  before_attach: Callable[[BpfObject], None] | None = None) -> BpfObject:
    """Load `obj_path`, attach its struct_ops map as a link and hand the link to a holder of `name`.

    The one registration of ensure_prague(), ensure_pcc() and ensure_bic() (their `register`); call it
    under ensure()'s locks.  `before_attach` gets the loaded object first (Prague sets its tunables there,
    so no socket runs untuned).  Returns the loaded object, the caller's to close; on any error it is closed.
    """
    from ccswitch.bpf.libbpf import BPF_F_LINK, BpfObject

    obj = BpfObject(obj_path)
    try:
        obj.set_map_flags(struct_ops_map, BPF_F_LINK)
        obj.load()
        if before_attach is not None:
            before_attach(obj)
        link = obj.attach_struct_ops(struct_ops_map)
        start(name, link.fd)
        return obj
    except BaseException:
        obj.close()
        raise


def _read_line_within(fd: int, timeout_s: float) -> str:
    """One line from a pipe, or what came before EOF or the timeout."""
    deadline = time.monotonic() + timeout_s
    buf = b""
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            break
        chunk = os.read(fd, 256)
        if not chunk:
            break
        buf += chunk
    return buf.decode(errors="replace").split("\n")[0]


def _read_available(fd: int) -> str:
    os.set_blocking(fd, False)
    with contextlib.suppress(BlockingIOError):
        return os.read(fd, 1 << 16).decode(errors="replace")
    return ""


def running(name: str | None = None) -> list[int]:
    """Pids of live holders (of `name`, or of any algorithm), from their command lines."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:  # gone meanwhile
            continue
        if _is_holder(argv, name):
            pids.append(int(entry))
    return pids


def _is_holder(argv: list[str], name: str | None) -> bool:
    for i in range(len(argv) - 2):
        if argv[i] == "-m" and argv[i + 1] == MODULE:
            return name is None or argv[i + 2] == name
    return False


# -- the holder process ------------------------------------------------------------------------

def no_user_left(users_fd: int) -> bool:
    """True once nobody holds LOCK_SH: we then hold LOCK_EX, so no newcomer counts until we exit."""
    try:
        fcntl.flock(users_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def unregistered_within(name: str, timeout_s: float = 1.0) -> bool:
    """Whether congestion control `name` leaves the kernel's list within timeout_s.  A holder's own
    unregistration runs when close() returns (this covers a slow list update, so that a waiting user
    never sees the algorithm listed after it is let in); another user's ends within that holder's
    poll (POLL_S) of its last user's end."""
    deadline = time.monotonic() + timeout_s
    while name in AVAILABLE.read_text().split() and time.monotonic() < deadline:
        time.sleep(0.02)
    return name not in AVAILABLE.read_text().split()


CLONE_NEWNET = 0x40000000


def _parent(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2:].split()[1])  # after "pid (comm) state": ppid


def _outermost_netns() -> int | None:
    """An fd of the network namespace of our oldest ancestor whose namespace we may open: PID 1's on an
    ordinary host; where PID 1's is not readable (ccswitchd without CAP_SYS_PTRACE; a sandbox whose
    init holds more capabilities than root's shell), the oldest process of ours, which runs in the
    host's namespace as a rule."""
    found, pid = None, os.getpid()
    while pid > 0:
        with contextlib.suppress(OSError):
            fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
            if found is not None:
                os.close(found)
            found = fd
        if pid == 1:
            break
        try:
            pid = _parent(pid)
        except (OSError, ValueError, IndexError):
            break
    return found


def _to_outermost_netns() -> None:
    """Leave the starter's network namespace (module docstring); without CAP_SYS_ADMIN it stays, and may
    die with that namespace as its registrar would have before holders."""
    fd = _outermost_netns()
    if fd is None:
        return
    try:
        if os.fstat(fd).st_ino != os.stat("/proc/self/ns/net").st_ino:
            ctypes.CDLL(None, use_errno=True).setns(fd, CLONE_NEWNET)
    finally:
        os.close(fd)


def hold(name: str, link_fd: int) -> None:
    """Keep link_fd open while the users file of `name` has a shared lock on it."""
    users = _open_lock(name, "users")
    try:
        sys.stdout.write(f"ready {os.getpid()}\n")
        sys.stdout.flush()
    except OSError:  # the starter died meanwhile: no user left either, the loop ends at once
        pass
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # let go of the starter's pipes: it may exit, we stay
        os.dup2(devnull, fd)
    while not no_user_left(users):
        time.sleep(POLL_S)
    os.close(link_fd)  # unregisters (the last fd of the link)
    unregistered_within(name)


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=__doc__.split("\n")[0])
    ap.add_argument("name", help="the algorithm (prague, pcc): its lock files under " + str(RUN_DIR))
    ap.add_argument("--link-fd", type=int, required=True, help="the inherited struct_ops link fd to keep")
    args = ap.parse_args(argv)
    try:
        os.fstat(args.link_fd)
    except OSError as e:
        print(f"holder: error: --link-fd {args.link_fd}: {e}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # not the starter's terminal's to stop; SIGTERM is
    _to_outermost_netns()  # while the starter is still our parent: its ancestors lead there
    if os.fork() > 0:  # the starter reaps this first fork; init reaps the holder
        os._exit(0)
    hold(args.name, args.link_fd)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
