"""Which flows the daemon manages: cgroup, process name, ports, destination prefix.

Every configured filter must match (an empty filter matches everything);
the age filter (flows.min_age_s) is applied by the controller, which knows
when it first saw a flow.  All filters run vectorised over a FlowSample
table except the process-name one:

* cgroup: FlowSample carries the socket's cgroup v2 id (bpf_sk_cgroup_id), which
  is the inode number of the cgroup's directory.  Configured paths are
  resolved to the ids of the directory and all its descendants, again every
  RESOLVE_EVERY_S (cgroups come and go).
* process name: the monitor does not record the owning process (a socket
  has no single owner: it can be shared across fork, passed over UNIX
  sockets, and sockops run in softirq without the writer's task).  The
  daemon resolves it the way ss -p does, only for flows it has not
  classified yet: /proc/net/tcp{,6} maps the 4-tuple to the socket inode,
  and a scan of /proc/PID/fd finds the process holding "socket:[inode]".
  A flow whose process cannot be found (closed meanwhile, or owned by no
  process, e.g. an orphaned FIN-WAIT socket) is not managed.  Once
  classified, a flow keeps its verdict.
* ports: remote (flows.ports) and local (flows.local_ports);
* destination: flows.dst_prefixes, each distinct address checked once.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
import struct
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ccswitch.frame import FlowFrame, as_frame
from ccswitch.host import cgroup2_root

if TYPE_CHECKING:
    import pyarrow as pa

RESOLVE_EVERY_S = 10.0


def cgroup_ids(spec: str | int, root: str | None = None) -> set[int]:
    """Ids (inode numbers) of a cgroup v2 directory and its descendants."""
    if isinstance(spec, int):
        return {spec}
    base = Path(root or cgroup2_root())
    p = Path(spec)
    if not p.is_absolute():
        p = base / p
    elif not str(p).startswith(str(base)):
        p = base / str(p).lstrip("/")
    if not p.is_dir():
        return set()
    ids = set()
    for dirpath, _dirs, _files in os.walk(p):
        with contextlib.suppress(OSError):
            ids.add(os.stat(dirpath).st_ino)
    return ids


def _proc_net_inodes() -> dict[tuple[str, int, str, int], int]:
    """(src, sport, dst, dport) -> socket inode, from /proc/net/tcp and tcp6 (this netns)."""
    out: dict[tuple[str, int, str, int], int] = {}
    for name, fam in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        try:
            lines = Path(f"/proc/net/{name}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) < 10:
                continue
            (la, lp), (ra, rp) = (x.split(":") for x in f[1:3])
            out[(_addr(la, fam), int(lp, 16), _addr(ra, fam), int(rp, 16))] = int(f[9])
    return out


def _addr(hexaddr: str, fam: int) -> str:
    raw = bytes.fromhex(hexaddr)
    # /proc prints each 32-bit word in host (little-endian) order
    words = b"".join(struct.pack("<I", struct.unpack(">I", raw[i:i + 4])[0]) for i in range(0, len(raw), 4))
    addr = socket.inet_ntop(fam, words)
    if fam == socket.AF_INET6 and addr.startswith("::ffff:") and "." in addr:
        return addr[7:]
    return addr


def _inode_owners() -> dict[int, str]:
    """socket inode -> comm of a process holding it."""
    owners: dict[int, str] = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        fd_dir = f"/proc/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"{fd_dir}/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                owners.setdefault(int(link[8:-1]), comm)
    return owners


class FlowSelector:
    def __init__(self, flows_cfg: Mapping[str, Any], clock: Any = time.monotonic):
        self.cfg = flows_cfg
        self.clock = clock
        self._cgroups: set[int] = set()
        self._resolved_at = -1e18
        self._ports = np.array(sorted(set(flows_cfg["ports"])), dtype=np.uint16)
        self._lports = np.array(sorted(set(flows_cfg["local_ports"])), dtype=np.uint16)
        self._nets = [ipaddress.ip_network(p, strict=False) for p in flows_cfg["dst_prefixes"]]
        self._dst_ok: dict[str, bool] = {}
        self._comms = set(flows_cfg["comms"])
        self._comm_of: dict[int, str | None] = {}

    @property
    def filters(self) -> list[str]:
        return [k for k in ("cgroups", "comms", "ports", "local_ports", "dst_prefixes") if self.cfg[k]]

    def _cgroup_set(self) -> set[int]:
        now = self.clock()
        if now - self._resolved_at >= RESOLVE_EVERY_S:
            ids: set[int] = set()
            for spec in self.cfg["cgroups"]:
                ids |= cgroup_ids(spec)
            self._cgroups, self._resolved_at = ids, now
        return self._cgroups

    def _dst_match(self, dst: str) -> bool:
        ok = self._dst_ok.get(dst)
        if ok is None:
            try:
                a = ipaddress.ip_address(dst)
                ok = any(a.version == n.version and a in n for n in self._nets)
            except ValueError:
                ok = False
            if len(self._dst_ok) > 65536:
                self._dst_ok.clear()
            self._dst_ok[dst] = ok
        return ok

    def comm_of(self, table: FlowFrame | pa.Table, rows: np.ndarray) -> dict[int, str | None]:
        """Resolve the owning process name of *rows* (indices into *table*) not classified yet."""
        table = as_frame(table)
        ids = table.column("flow_id")
        todo = [int(i) for i in rows if int(ids[i]) not in self._comm_of]
        if todo:
            inodes = _proc_net_inodes()
            owners = _inode_owners()
            src, sport = table.column("src"), table.column("sport")
            dst, dport = table.column("dst"), table.column("dport")
            for i in todo:
                key = (str(src[i]), int(sport[i]), str(dst[i]), int(dport[i]))
                ino = inodes.get(key)
                self._comm_of[int(ids[i])] = owners.get(ino) if ino else None
        return self._comm_of

    def forget(self, alive: set[int]) -> None:
        for fid in [f for f in self._comm_of if f not in alive]:
            del self._comm_of[fid]

    def select(self, table: FlowFrame | pa.Table) -> np.ndarray:
        """Boolean mask over *table*'s rows: the flows the filters admit."""
        table = as_frame(table)
        n = table.num_rows
        mask = np.ones(n, dtype=bool)
        if not n:
            return mask
        if self.cfg["cgroups"]:
            cg = self._cgroup_set()
            mask &= np.isin(table.column("cgroup_id"), np.fromiter(cg, np.uint64, len(cg)))
        if len(self._ports):
            mask &= np.isin(table.column("dport"), self._ports)
        if len(self._lports):
            mask &= np.isin(table.column("sport"), self._lports)
        if self._nets:
            codes, values = table.codes("dst")
            ok = np.array([self._dst_match(d) for d in values], dtype=bool)
            mask &= ok[codes] if len(ok) else False
        if self._comms:
            rows = np.flatnonzero(mask)
            comm = self.comm_of(table, rows)
            ids = table.column("flow_id")
            for i in rows:
                if comm.get(int(ids[i])) not in self._comms:
                    mask[i] = False
        return mask
