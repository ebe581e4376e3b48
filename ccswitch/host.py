"""Facts about the host (this network namespace) that the kernel programs need."""

from __future__ import annotations

import os
import socket
from pathlib import Path

SO_NETNS_COOKIE = 71  # Linux 5.14+
AVAILABLE_CCAS = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")
BPFFS = Path("/sys/fs/bpf")
BTF_VMLINUX = Path("/sys/kernel/btf/vmlinux")


class HostError(RuntimeError):
    """A host prerequisite is missing; the message says how to fix it."""


def netns_cookie() -> int:
    """The cookie of the network namespace this thread is in."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        return int.from_bytes(s.getsockopt(socket.SOL_SOCKET, SO_NETNS_COOKIE, 8), "little")


def netns_inode() -> int:
    return os.stat("/proc/thread-self/ns/net").st_ino


def available_ccas() -> list[str]:
    return AVAILABLE_CCAS.read_text().split()


def cgroup2_root() -> str:
    """Mount point of the cgroup v2 hierarchy (/sys/fs/cgroup or .../unified)."""
    candidates = []
    with open("/proc/self/mounts") as mounts:
        for line in mounts:
            parts = line.split()
            if len(parts) > 2 and parts[2] == "cgroup2":
                candidates.append(parts[1])
    for preferred in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
        if preferred in candidates:
            return preferred
    if candidates:
        return candidates[0]
    raise HostError(
        "no cgroup v2 hierarchy is mounted; mount one with "
        "`mount -t cgroup2 none /sys/fs/cgroup/unified` (or boot with systemd.unified_cgroup_hierarchy=1)")


def require_root() -> None:
    if os.geteuid() != 0:
        raise HostError("ccswitch needs root (CAP_BPF, CAP_NET_ADMIN, CAP_PERFMON); rerun with sudo")


def require_btf() -> None:
    if not BTF_VMLINUX.exists():
        raise HostError(
            f"{BTF_VMLINUX} is missing: the kernel lacks BTF; use a kernel built with CONFIG_DEBUG_INFO_BTF=y")


def bpffs_mounted() -> bool:
    with open("/proc/self/mounts") as mounts:
        return any(line.split()[1:3] == [str(BPFFS), "bpf"] for line in mounts)


def require_bpffs() -> None:
    if not bpffs_mounted():
        raise HostError(f"bpffs is not mounted at {BPFFS}; run `mount -t bpf bpf {BPFFS}`")


class InstanceLock:
    """At most one ccswitch monitor per network namespace.

    An abstract UNIX socket name is scoped to the network namespace and is
    released by the kernel when the holder dies, so a crash never leaves a
    stale lock behind (unlike a pid file).
    """

    def __init__(self, role: str = "monitor"):
        self.name = f"\0ccswitch-{role}"
        self._sock: socket.socket | None = None

    def acquire(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.bind(self.name)
        except OSError as exc:
            s.close()
            raise HostError(
                "another ccswitch instance is already running in this network namespace; "
                "stop it first (one instance per namespace)") from exc
        self._sock = s

    def release(self) -> None:
        if self._sock:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> InstanceLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
