"""User-space half of the CE marker (cemark.bpf.c, cemark.h).

`CeMarker(ns, dev, prob)` loads the marker, attaches it to the clsact hook
of device `dev` in network namespace `ns` (ingress by default) and sets the
marking probability; `close()` detaches the filter.  The program and its
maps live as long as the filter; the filter goes with the namespace.

Uses libbpf's bpf_tc_* API (libbpf >= 0.6), which talks netlink in the
calling thread's namespace: hence `entered(ns)` around hook creation and
attach.
"""

from __future__ import annotations

import ctypes
import errno
import socket
import struct
from pathlib import Path

from ccswitch.bpf import libbpf
from ccswitch.bpf.libbpf import BpfError, BpfObject

OBJ_PATH = Path(__file__).with_name("cemark.bpf.o")
PROG = "ccs_cemark"
BPF_TC_INGRESS, BPF_TC_EGRESS = 1, 2
DIRECTIONS = {"ingress": BPF_TC_INGRESS, "egress": BPF_TC_EGRESS}
PRIORITY = 7  # tc filter priority of the marker (any fixed value; one marker per hook)
STATS = struct.Struct("<QQ")  # struct cemark_stats


class _TcHook(ctypes.Structure):
    _fields_ = [("sz", ctypes.c_size_t), ("ifindex", ctypes.c_int),
                ("attach_point", ctypes.c_int), ("parent", ctypes.c_uint32)]


class _TcOpts(ctypes.Structure):
    _fields_ = [("sz", ctypes.c_size_t), ("prog_fd", ctypes.c_int), ("flags", ctypes.c_uint32),
                ("prog_id", ctypes.c_uint32), ("handle", ctypes.c_uint32),
                ("priority", ctypes.c_uint32)]


_lib = libbpf._lib
for _fn in ("bpf_tc_hook_create", "bpf_tc_attach", "bpf_tc_detach"):
    getattr(_lib, _fn).restype = ctypes.c_int
_lib.bpf_tc_hook_create.argtypes = [ctypes.POINTER(_TcHook)]
_lib.bpf_tc_attach.argtypes = [ctypes.POINTER(_TcHook), ctypes.POINTER(_TcOpts)]
_lib.bpf_tc_detach.argtypes = [ctypes.POINTER(_TcHook), ctypes.POINTER(_TcOpts)]


def prob_to_u32(prob: float) -> int:
    if not 0.0 <= prob <= 1.0:
        raise ValueError(f"CE marking probability {prob} is outside 0..1; pass a fraction such as 0.05")
    return min(round(prob * (1 << 32)), (1 << 32) - 1)


class CeMarker:
    """Random CE marking of ECN-capable packets on one device hook."""

    def __init__(self, ns: str, dev: str, prob: float, direction: str = "ingress",
                 obj_path: Path = OBJ_PATH):
        from ccswitch.testbed.runs.netns import entered  # testbed imports bpf, not the reverse

        if direction not in DIRECTIONS:
            raise ValueError(f"unknown direction '{direction}'; use 'ingress' or 'egress'")
        self.ns, self.dev = ns, dev
        self._obj = BpfObject(obj_path)
        self._hook: _TcHook | None = None
        try:
            self._obj.load()
            self.set_prob(prob)
            with entered(ns):
                ifindex = socket.if_nametoindex(dev)
                hook = _TcHook(ctypes.sizeof(_TcHook), ifindex, DIRECTIONS[direction], 0)
                rc = _lib.bpf_tc_hook_create(ctypes.byref(hook))
                if rc < 0 and rc != -errno.EEXIST:
                    raise BpfError(f"clsact on {dev} in {ns}: {errno.errorcode.get(-rc, rc)}")
                opts = _TcOpts(ctypes.sizeof(_TcOpts), self._obj.prog_fd(PROG), 0, 0, 1, PRIORITY)
                rc = _lib.bpf_tc_attach(ctypes.byref(hook), ctypes.byref(opts))
                if rc < 0:
                    raise BpfError(f"tc attach of the CE marker on {dev} in {ns}: "
                                   f"{errno.errorcode.get(-rc, rc)}")
                self._hook = hook
        except BaseException:
            self.close()
            raise

    def set_prob(self, prob: float) -> None:
        self._obj.map("ccs_cemark_cfg").update(struct.pack("<I", 0),
                                               struct.pack("<II", prob_to_u32(prob), 0))

    def stats(self) -> tuple[int, int]:
        """(segments seen, segments marked CE) since attach."""
        raw = self._obj.map("ccs_cemark_stats").lookup(struct.pack("<I", 0))
        return STATS.unpack(raw) if raw else (0, 0)

    def close(self) -> None:
        from ccswitch.testbed.runs.netns import entered, netns_exists

        if self._hook is not None and netns_exists(self.ns):
            opts = _TcOpts(ctypes.sizeof(_TcOpts), 0, 0, 0, 1, PRIORITY)
            with entered(self.ns):
                _lib.bpf_tc_detach(ctypes.byref(self._hook), ctypes.byref(opts))
        self._hook = None
        self._obj.close()

    def __enter__(self) -> CeMarker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
