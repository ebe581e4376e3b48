"""User-space half of PCC (pcc.bpf.c, pcc.h): make `pcc` available.

Order of preference, so that loading is idempotent and never duplicates:
1. the kernel already offers `pcc` and ccswitch's seed map is live: another
   ccswitch process registered our PCC; share its seed map;
2. the kernel offers `pcc` without our seed map: a real kernel module (or
   another BPF PCC); use it (full inheritance then has nothing to seed).
   Finding the seed map needs CAP_SYS_ADMIN (BPF_MAP_GET_NEXT_ID and
   BPF_MAP_GET_FD_BY_ID); without it the map cannot be told apart from a
   missing one, and the source says so (SHARED_UNSEEDED) instead of "kernel";
3. otherwise register ours through a struct_ops link owned by this process,
   so the algorithm disappears with the process.  Sockets already running
   it keep running it (the kernel holds a reference), only new selections
   of `pcc` fail until it is registered again.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ccswitch.bpf.libbpf import BPF_F_LINK, BpfError, BpfObject, find_map_by_name, missing_capabilities
from ccswitch.host import available_ccas

OBJ_PATH = Path(__file__).with_name("pcc.bpf.o")
STRUCT_OPS_MAP = "ccs_pcc"
SEED_MAP = "ccs_pcc_seed"

# Where this process' `pcc` comes from (PccHandle.source): the one definition that status,
# logs, docs/daemon.md and the tests use.  Only OWN and SHARED have a seed map, i.e. only
# there does inherit = "full" seed PCC's rate and min RTT.
OWN = "ccswitch"
SHARED = "ccswitch-shared"
SHARED_UNSEEDED = "shared-unseeded"
KERNEL = "kernel"
NONE = "none"
SOURCES: dict[str, str] = {
    OWN: "registered by this process (its struct_ops link)",
    SHARED: "registered by another ccswitch process, its seed map shared",
    SHARED_UNSEEDED: "registered by another process, its seed map not reachable without CAP_SYS_ADMIN",
    KERNEL: "not ccswitch's (a kernel module or another BPF program), nothing to seed",
    NONE: "PCC not loaded by this data plane",
}
SEEDABLE = frozenset({OWN, SHARED})
UNSEEDED_WARNING = ('inherit = "full" into pcc is not seeded (PCC starts from its own start-up); fix: add '
                    "CAP_SYS_ADMIN to the unit with a drop-in, or let this daemon register PCC (start it "
                    "before the other ccswitch processes)")


@dataclass
class PccHandle:
    source: str  # one of SOURCES
    seed_fd: int | None
    _obj: BpfObject | None = None

    @property
    def seedable(self) -> bool:
        """True when full inheritance into this PCC seeds it (we hold its seed map)."""
        return self.seed_fd is not None

    def close(self) -> None:
        if self._obj:
            self._obj.close()
            self._obj = None
        elif self.seed_fd is not None:
            os.close(self.seed_fd)
        self.seed_fd = None


def _shared_pcc() -> PccHandle:
    fd = find_map_by_name(SEED_MAP)
    if fd is not None:
        return PccHandle(SHARED, fd)
    # without CAP_SYS_ADMIN the map ids cannot be walked: absence proves nothing
    return PccHandle(SHARED_UNSEEDED if missing_capabilities(["CAP_SYS_ADMIN"]) else KERNEL, None)


@contextlib.contextmanager
def pcc_held(needed: bool = True, on_error: Callable[[Exception], None] | None = None) -> Iterator[None]:
    """Hold a PCC registration of this process for the block (nothing when not *needed*).

    PCC's registration is kernel-wide and belongs to the process that made it: when a run whose
    daemon registered it ends, `pcc` is gone until another daemon registers it again, and a
    concurrent run that starts a PCC flow in that moment fails ("unable to set TCP_CONGESTION").
    Held by the process that starts the runs, it outlives every run.  *on_error*: called instead
    of raising when the registration cannot be made (the runs then register it themselves)."""
    handle = None
    if needed:
        try:
            handle = ensure_pcc()
        except Exception as e:
            if on_error is None:
                raise
            on_error(e)
    try:
        yield
    finally:
        if handle is not None:
            handle.close()


def ensure_pcc(obj_path: Path = OBJ_PATH) -> PccHandle:
    if "pcc" in available_ccas():
        return _shared_pcc()
    obj = BpfObject(obj_path)
    try:
        obj.set_map_flags(STRUCT_OPS_MAP, BPF_F_LINK)
        obj.load()
        obj.attach_struct_ops(STRUCT_OPS_MAP)
        return PccHandle(OWN, obj.map(SEED_MAP).fd, obj)
    except BpfError as e:
        obj.close()
        # Registration is kernel-wide: another process (a daemon in another namespace)
        # registered "pcc" between our check and our attach.  Use theirs.
        if e.errno == errno.EEXIST and "pcc" in available_ccas():
            return _shared_pcc()
        raise
    except BaseException:
        obj.close()
        raise
