"""User-space half of PCC (pcc.bpf.c, pcc.h): make `pcc` available.

Order of preference, so that loading is idempotent and never duplicates:
1. the kernel already offers `pcc` and ccswitch's seed map is live: another
   ccswitch process registered our PCC; share its seed map;
2. the kernel offers `pcc` without our seed map: a real kernel module (or
   another BPF PCC); use it (full inheritance then has nothing to seed).
   Finding the seed map needs CAP_SYS_ADMIN (BPF_MAP_GET_NEXT_ID and
   BPF_MAP_GET_FD_BY_ID); without it the map cannot be told apart from a
   missing one, and the source says so (SHARED_UNSEEDED) instead of "kernel";
3. otherwise register ours and hand its struct_ops link to a holder process
   (holder.py), which keeps `pcc` registered for as long as any ccswitch
   process holding a PccHandle is alive (also when the one that registered it
   exits or is SIGKILLed), and unregisters it after the last one.  Sockets
   already running it keep running it (the kernel holds a reference), only
   new selections of `pcc` fail until it is registered again.  The seed map
   lives with the registration: the registrar holds it through its object,
   later processes find it by name (case 1).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ccswitch.bpf import holder
from ccswitch.bpf.libbpf import BpfObject, find_map_by_name, missing_capabilities
from ccswitch.host import available_ccas

OBJ_PATH = Path(__file__).with_name("pcc.bpf.o")
NAME = "pcc"
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
    OWN: "registered by this process (kept by a holder process while any ccswitch process uses it)",
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
    _use: holder.Use | None = None  # counts this process as a user of the held registration

    @property
    def seedable(self) -> bool:
        """True when full inheritance into this PCC seeds it (we hold its seed map)."""
        return self.seed_fd is not None

    def close(self) -> None:
        """Stop using pcc: the holder unregisters it once no ccswitch process uses it."""
        if self._obj:
            self._obj.close()
            self._obj = None
        elif self.seed_fd is not None:
            os.close(self.seed_fd)
        self.seed_fd = None
        if self._use:
            self._use.close()
            self._use = None


def _shared_pcc(use: holder.Use | None = None) -> PccHandle:
    fd = find_map_by_name(SEED_MAP)
    if fd is not None:
        return PccHandle(SHARED, fd, None, use)
    # without CAP_SYS_ADMIN the map ids cannot be walked: absence proves nothing
    return PccHandle(SHARED_UNSEEDED if missing_capabilities(["CAP_SYS_ADMIN"]) else KERNEL, None, None, use)


@contextlib.contextmanager
def pcc_held(needed: bool = True, on_error: Callable[[Exception], None] | None = None) -> Iterator[None]:
    """Use PCC for the block (nothing when not *needed*): ensure_pcc() and close at the end.

    The registration outlives each of its users (holder.py), so this is no longer what keeps a
    run's PCC from vanishing when another run ends; held by the process that starts many runs, it
    spares each of them registering PCC again (a verifier pass) when none overlap.  *on_error*:
    called instead of raising when the registration cannot be made (the runs then register it
    themselves)."""
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


def _register(obj_path: Path, use: holder.Use) -> PccHandle:
    obj = holder.register_held(NAME, obj_path, STRUCT_OPS_MAP)
    return PccHandle(OWN, obj.map(SEED_MAP).fd, obj, use)


def ensure_pcc(obj_path: Path = OBJ_PATH) -> PccHandle:
    """Make pcc available (module docstring) until the handle is closed or this process ends."""
    # available_ccas looked up at call time: tests replace it to stage the registration race
    return holder.ensure(NAME, lambda: NAME in available_ccas(), _shared_pcc,
                         lambda use: _register(obj_path, use))
