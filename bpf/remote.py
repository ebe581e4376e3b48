"""User-space half of the `remote` congestion control (remote.bpf.c, remote.h).

`ensure_remote()` makes `remote` available and returns a `RemoteHandle` with
the three maps of the contract in remote.h: the agent reads each socket's
state (`observations()`), writes its decisions (`write()`), releases
sockets it has no decision for (`release()`: they fall back at once instead
of at the deadline) and may set the deadline and cwnd bounds (`configure()`).

Registration follows pcc.py and prague.py: a struct_ops *link* owned by this
process, so the algorithm is unregistered when the handle closes or the
process dies (also on SIGKILL); nothing is pinned.  If `remote` is already
registered by another ccswitch process its maps are found by name (needs
CAP_SYS_ADMIN to walk map ids) and shared; every fd opened on the way is
closed again on any error.

Cookies: the kernel assigns a socket's cookie lazily, and struct_ops
programs cannot ask for one, so `touch_cookies()` dumps the calling
network namespace's TCP sockets through sock_diag, which assigns one to
every socket (see remote.bpf.c, "Cookies").
"""

from __future__ import annotations

import errno
import os
import socket
import struct
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ccswitch.bpf.libbpf import BPF_F_LINK, BpfError, BpfObject, Map, find_map_by_name
from ccswitch.host import available_ccas

OBJ_PATH = Path(__file__).with_name("remote.bpf.o")
NAME = "remote"
STRUCT_OPS_MAP = "ccs_remote"
DEC_MAP, OBS_MAP, CFG_MAP = "ccs_remote_dec", "ccs_remote_obs", "ccs_remote_cfg"

# remote.h, byte for byte (little-endian, natural alignment)
DECISION = np.dtype([("seq", "<u8"), ("stamp_ns", "<u8"), ("max_pacing_Bps", "<u8"),
                     ("cwnd", "<u4"), ("ssthresh", "<u4")])
OBS = np.dtype([("cookie", "<u8"), ("stamp_ns", "<u8"), ("acks", "<u8"), ("delivered", "<u8"),
                ("delivered_ce", "<u8"), ("lost", "<u8"), ("retrans", "<u8"), ("rtt_sum_us", "<u8"),
                ("rtt_cnt", "<u8"), ("inflight_sum", "<u8"), ("applied_seq", "<u8"), ("fallbacks", "<u8"),
                ("congestion_ns", "<u8"), ("cwnd", "<u4"), ("ssthresh", "<u4"), ("mss", "<u4"),
                ("inflight", "<u4"), ("srtt_us", "<u4"), ("min_rtt_us", "<u4"), ("ca_state", "<u4"),
                ("mode", "<u4")])
CFG = struct.Struct("<QII")
MODES = ("start", "applied", "fallback", "wait")  # enum remote_mode
DEFAULT_DEADLINE_S = 0.3
CWND_MIN, CWND_MAX = 2, 65535
RELEASE = 0  # REMOTE_RELEASE: a decision with this cwnd makes the socket fall back at its next ACK


@dataclass
class RemoteHandle:
    """The maps of a registered `remote` (ours or another ccswitch process')."""

    source: str  # "ccswitch" (this process' link) or "ccswitch-shared"
    dec: Map
    obs: Map
    cfg: Map
    _obj: BpfObject | None = None
    _fds: list[int] = field(default_factory=list)

    def configure(self, deadline_s: float = DEFAULT_DEADLINE_S, cwnd_min: int = CWND_MIN,
                  cwnd_max: int = CWND_MAX) -> None:
        """Set the kernel's deadline (decision age before fallback) and cwnd bounds (packets)."""
        if not (0 < deadline_s <= 60 and 1 <= cwnd_min <= cwnd_max <= 0xFFFFFFFF):
            raise ValueError(f"bad remote config: deadline {deadline_s} s, cwnd [{cwnd_min}, {cwnd_max}]")
        self.cfg.update(struct.pack("<I", 0), CFG.pack(int(deadline_s * 1e9), cwnd_min, cwnd_max))

    def observations(self) -> np.ndarray:
        """Every exported socket's state (OBS records)."""
        _, values, n = self.obs.lookup_batch()
        return np.frombuffer(values, dtype=OBS, count=n).copy()

    def write(self, cookies: Iterable[int], decisions: np.ndarray) -> None:
        """Write one DECISION record per cookie (batched)."""
        keys = np.fromiter(cookies, dtype="<u8")
        if len(keys) != len(decisions):
            raise ValueError(f"{len(keys)} cookies for {len(decisions)} decisions")
        dec = np.ascontiguousarray(decisions, dtype=DECISION)
        self.dec.update_batch(keys.tobytes(), dec.tobytes(), len(keys))

    def release(self, cookies: Iterable[int], seqs: Iterable[int], stamp_ns: int) -> None:
        """Tell the kernel there is no decision this step: the sockets fall back (counted) at their next ACK."""
        keys = list(cookies)
        self.write(keys, decision_records([RELEASE] * len(keys), seqs, [stamp_ns] * len(keys)))

    def withdraw(self, cookies: Iterable[int]) -> None:
        """Delete decisions (their sockets go to Reno: REMOTE_WAIT)."""
        keys = np.fromiter(cookies, dtype="<u8")
        self.dec.delete_batch(keys.tobytes(), len(keys))

    def close(self) -> None:
        if self._obj:
            self._obj.close()
            self._obj = None
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()


def _shared_remote() -> RemoteHandle:
    """Maps of a `remote` registered by another ccswitch process (found by name)."""
    fds: list[int] = []
    try:
        maps = []
        for name, (ks, vs) in ((DEC_MAP, (8, DECISION.itemsize)), (OBS_MAP, (8, OBS.itemsize)),
                               (CFG_MAP, (4, CFG.size))):
            fd = find_map_by_name(name)
            if fd is None:
                raise BpfError(f"`{NAME}` is registered but its map {name} was not found: it is not "
                               "ccswitch's, or this process lacks CAP_SYS_ADMIN to look maps up by id")
            fds.append(fd)
            maps.append(Map(name, fd, ks, vs))
        return RemoteHandle("ccswitch-shared", *maps, _fds=fds)
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise


def ensure_remote(obj_path: Path = OBJ_PATH, name: str = NAME) -> RemoteHandle:
    """Register `remote` (or share the registration of another ccswitch process)."""
    if name in available_ccas():
        return _shared_remote()
    obj = BpfObject(obj_path)
    try:
        obj.set_map_flags(STRUCT_OPS_MAP, BPF_F_LINK)
        obj.load()
        obj.attach_struct_ops(STRUCT_OPS_MAP)
        return RemoteHandle("ccswitch", obj.map(DEC_MAP), obj.map(OBS_MAP), obj.map(CFG_MAP), obj)
    except BpfError as e:
        obj.close()
        if e.errno == errno.EEXIST and name in available_ccas():  # registered meanwhile
            return _shared_remote()
        raise
    except BaseException:
        obj.close()
        raise


def touch_cookies() -> int:
    """Have the kernel assign a cookie to every TCP socket of this network namespace.

    A sock_diag dump (what `ss` does) fills sk_cookie for each socket it
    reports.  Returns the number of sockets seen.
    """
    from pyroute2 import DiagSocket

    n = 0
    with DiagSocket() as ds:
        ds.bind()
        for family in (socket.AF_INET, socket.AF_INET6):
            n += len(ds.get_sock_stats(family=family))
    return n


def decision_records(cwnds: Iterable[int], seqs: Iterable[int], stamps_ns: Iterable[int],
                     ssthresh: Iterable[int] | None = None, pacing_Bps: Iterable[int] | None = None) -> np.ndarray:
    """DECISION records from columns (ssthresh and pacing default to 0: none)."""
    c = np.fromiter(cwnds, dtype="<u4")
    out = np.zeros(len(c), dtype=DECISION)
    out["cwnd"] = c
    out["seq"] = np.fromiter(seqs, dtype="<u8", count=len(c))
    out["stamp_ns"] = np.fromiter(stamps_ns, dtype="<u8", count=len(c))
    if ssthresh is not None:
        out["ssthresh"] = np.fromiter(ssthresh, dtype="<u4", count=len(c))
    if pacing_Bps is not None:
        out["max_pacing_Bps"] = np.fromiter(pacing_Bps, dtype="<u8", count=len(c))
    return out


def now_ns() -> int:
    """CLOCK_MONOTONIC in ns: the kernel's bpf_ktime_get_ns() clock."""
    return time.monotonic_ns()
