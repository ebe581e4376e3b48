"""User-space half of PCC (pcc.bpf.c, pcc.h): make `pcc` available.

Order of preference, so that loading is idempotent and never duplicates:
1. the kernel already offers `pcc` and ccswitch's seed map is live: another
   ccswitch process registered our PCC; share its seed map;
2. the kernel offers `pcc` without our seed map: a real kernel module; use it
   (full inheritance then has nothing to seed);
3. otherwise register ours through a struct_ops link owned by this process,
   so the algorithm disappears with the process.  Sockets already running
   it keep running it (the kernel holds a reference), only new selections
   of `pcc` fail until it is registered again.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path

from ccswitch.bpf.libbpf import BPF_F_LINK, BpfError, BpfObject, find_map_by_name
from ccswitch.host import available_ccas

OBJ_PATH = Path(__file__).with_name("pcc.bpf.o")
STRUCT_OPS_MAP = "ccs_pcc"
SEED_MAP = "ccs_pcc_seed"


@dataclass
class PccHandle:
    source: str  # "ccswitch" (ours, this process), "ccswitch-shared", "kernel", "unavailable"
    seed_fd: int | None
    _obj: BpfObject | None = None

    def close(self) -> None:
        if self._obj:
            self._obj.close()
            self._obj = None
        elif self.seed_fd is not None:
            os.close(self.seed_fd)
        self.seed_fd = None


def _shared_pcc() -> PccHandle:
    fd = find_map_by_name(SEED_MAP)
    return PccHandle("ccswitch-shared" if fd is not None else "kernel", fd)


def ensure_pcc(obj_path: Path = OBJ_PATH) -> PccHandle:
    if "pcc" in available_ccas():
        return _shared_pcc()
    obj = BpfObject(obj_path)
    try:
        obj.set_map_flags(STRUCT_OPS_MAP, BPF_F_LINK)
        obj.load()
        obj.attach_struct_ops(STRUCT_OPS_MAP)
        return PccHandle("ccswitch", obj.map(SEED_MAP).fd, obj)
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
