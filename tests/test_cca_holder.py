"""A BPF congestion control registered by ccswitch lives as long as any process using it (bpf/holder.py).

Real processes on the real kernel: A registers prague (or pcc), B shares it, A exits or is
SIGKILLed, and B's new sockets must still select the algorithm (before the holder they failed
with "unable to set TCP_CONGESTION").  Once the last user has gone, however it went, the
algorithm must be gone from the kernel within GONE_WITHIN_S, with no holder process and no
pinned object left.  Processes racing to register end with one holder.

Each test needs the algorithm unregistered when it starts (other processes on a development
machine, e.g. testbed runs, may hold it: then it is skipped, and fails under CI=true).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ccswitch.bpf import holder
from ccswitch.host import available_ccas

pytestmark = pytest.mark.kernel
GONE_WITHIN_S = 2.0  # the holder looks for users every holder.POLL_S (0.25 s)

# A user: ensures the algorithm, prints "<source> <seedable>", then answers each stdin line with
# "ok" or "error ..." for a new socket selecting it (pcc: "ok" also needs its seed map to be the
# one the kernel's pcc uses, found again by name); closes its handle at EOF.
USER = r"""
import ctypes, os, socket, sys
from ccswitch.bpf.libbpf import _lib, find_map_by_name
from ccswitch.bpf.pcc import SEED_MAP, ensure_pcc
from ccswitch.bpf.prague import ensure_prague

def map_id(fd):
    info = ctypes.create_string_buffer(256)
    ln = ctypes.c_uint32(len(info))
    assert _lib.bpf_obj_get_info_by_fd(fd, info, ctypes.byref(ln)) == 0
    return int.from_bytes(info.raw[4:8], "little")

name = sys.argv[1]
h = ensure_prague() if name == "prague" else ensure_pcc()
print(h.source, getattr(h, "seed_fd", None) is not None, flush=True)
for _ in sys.stdin:
    s = socket.socket()
    try:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, name.encode())
        got = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b"\0").decode()
        live = find_map_by_name(SEED_MAP) if name == "pcc" else None
        if live is not None and map_id(live) != map_id(h.seed_fd):
            print(f"error seed map {map_id(h.seed_fd)} is not the live one {map_id(live)}", flush=True)
        else:
            print("ok" if got == name else f"error the socket runs {got}", flush=True)
    except OSError as e:
        print(f"error {e}", flush=True)
    finally:
        s.close()
h.close()
"""


class User:
    """A process that uses `name` until its stdin closes."""

    def __init__(self, name: str):
        self.proc = subprocess.Popen([sys.executable, "-c", USER, name], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def handle(self) -> tuple[str, bool]:
        """Its source and whether it is seedable, once it has ensured the algorithm."""
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().split()
        if not line:
            raise AssertionError(f"user failed: {self.proc.communicate(timeout=10)[1][-2000:]}")
        return line[0], line[1] == "True"

    def new_socket(self) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("check\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def exit(self) -> None:
        _, err = self.proc.communicate(timeout=20)
        assert self.proc.returncode == 0, err[-2000:]

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.communicate(timeout=20)

    def end(self, how: str) -> None:
        self.exit() if how == "exit" else self.kill()


def _pinned() -> set[str]:
    return {str(p) for p in Path("/sys/fs/bpf").rglob("*")}


def _gone_within(name: str, timeout_s: float) -> tuple[bool, list[int]]:
    """Whether `name` left the kernel within timeout_s; and the holders of it still running then."""
    deadline = time.monotonic() + timeout_s
    while (name in available_ccas() or holder.running(name)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return name not in available_ccas(), holder.running(name)


@pytest.fixture
def unregistered(require: Callable[[bool, str], None]) -> Iterator[Callable[[str], None]]:
    """`unregistered(name)`: require `name` unregistered now; at the end, no new pinned object, and
    the holders of a failed test's algorithm killed."""
    names: list[str] = []

    def check(name: str) -> None:
        gone, holders = _gone_within(name, 3.0)  # an earlier test's registration ends within its holder's poll
        require(gone and not holders,
                f"{name} is registered by another process (a testbed run, a daemon): the test needs it "
                f"unregistered to see it go")
        names.append(name)

    pinned = _pinned()
    yield check
    for pid in [p for n in names for p in holder.running(n)]:
        os.kill(pid, signal.SIGKILL)
    assert _pinned() == pinned, "pinned BPF objects left behind"


@pytest.mark.parametrize("name", ["prague", "pcc"])
@pytest.mark.parametrize("how", ["exit", "SIGKILL"])
def test_registration_outlives_its_registrar_and_ends_with_its_last_user(unregistered, name: str, how: str) -> None:
    unregistered(name)
    a = User(name)
    b: User | None = None
    try:
        assert a.handle() == ("ccswitch", name == "pcc")
        assert len(holder.running(name)) == 1
        b = User(name)
        assert b.handle() == ("ccswitch-shared", name == "pcc")
        a.end(how)
        time.sleep(3 * holder.POLL_S)  # a holder would have seen "no user" by now
        assert name in available_ccas()
        assert b.new_socket() == "ok"  # a new socket selects it (pcc: with the live seed map)
        b.end(how)
        gone, holders = _gone_within(name, GONE_WITHIN_S)
        assert gone and not holders, (gone, holders)
    finally:
        for u in (a, b):
            if u is not None and u.proc.poll() is None:
                u.kill()


@pytest.mark.parametrize("name", ["prague", "pcc"])
def test_processes_racing_to_register_start_one_holder(unregistered, name: str) -> None:
    unregistered(name)
    users = [User(name) for _ in range(3)]
    try:
        sources = sorted(u.handle()[0] for u in users)
        assert sources == ["ccswitch", "ccswitch-shared", "ccswitch-shared"], sources
        assert len(holder.running(name)) == 1
        for u in users:
            u.exit()
        gone, holders = _gone_within(name, GONE_WITHIN_S)
        assert gone and not holders, (gone, holders)
    finally:
        for u in users:
            if u.proc.poll() is None:
                u.kill()


def test_holder_that_cannot_start_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A holder that exits at once (here: a Python that cannot import it) is reported with its stderr."""
    r, w = os.pipe()
    try:
        monkeypatch.setattr(holder, "MODULE", "ccswitch.bpf.no_such_holder")
        with pytest.raises(holder.HolderError, match=r"did not start .*No module named"):
            holder.start("ccst-none", w)
    finally:
        os.close(r)
        os.close(w)


def test_holder_outlives_the_namespace_of_its_registrar(unregistered) -> None:
    """A run's daemon registers inside the run's namespace, and the run's end kills every process in
    it (delete_netns): the holder it started has moved to the initial namespace and stays for B."""
    from ccswitch.testbed.runs.netns import create_netns, delete_netns, nsenter_argv

    unregistered("prague")
    ns = f"ccs-hold{os.getpid() % 100000}"
    create_netns(ns)
    a = b = None
    try:
        a = subprocess.Popen(nsenter_argv(ns, [sys.executable, "-c", USER, "prague"]), stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert a.stdout is not None and a.stdout.readline().split()[:1] == ["ccswitch"]
        (pid,) = holder.running("prague")
        assert os.stat(f"/proc/{pid}/ns/net").st_ino == os.stat("/proc/self/ns/net").st_ino  # this test's: the host's
        b = User("prague")
        assert b.handle()[0] == "ccswitch-shared"
        delete_netns(ns)  # kills A
        a.wait(timeout=10)
        assert b.new_socket() == "ok"
        b.exit()
        gone, holders = _gone_within("prague", GONE_WITHIN_S)
        assert gone and not holders, (gone, holders)
    finally:
        delete_netns(ns)
        for p in (a, b.proc if b else None):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
