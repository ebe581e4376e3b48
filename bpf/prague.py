"""User-space half of Prague (prague.bpf.c, prague.h): make `prague` available.

Same order of preference as PCC (pcc.py), so loading is idempotent:
1. the kernel already offers `prague` (another ccswitch process registered
   ours, or a real tcp_prague module): use it as it is;
2. otherwise register ours through a struct_ops link owned by this process,
   so the algorithm disappears with the process (also on SIGKILL).  Sockets
   already running it keep running it; new selections fail until it is
   registered again.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ccswitch.bpf.libbpf import BPF_F_LINK, BpfObject, find_map_by_name
from ccswitch.host import available_ccas

OBJ_PATH = Path(__file__).with_name("prague.bpf.o")
NAME = "prague"
STRUCT_OPS_MAP = "ccs_prague"
PRAGUE_DSCP = 40  # prague.h PRAGUE_DSCP: the DSCP Prague's packets carry (L4S by DSCP)


@dataclass
class PragueHandle:
    source: str  # "ccswitch" (ours, this process), "ccswitch-shared", "kernel"
    _obj: BpfObject | None = None

    def close(self) -> None:
        if self._obj:
            self._obj.close()
            self._obj = None


def ensure_prague(obj_path: Path = OBJ_PATH) -> PragueHandle:
    if NAME in available_ccas():
        ours = find_map_by_name(STRUCT_OPS_MAP)
        if ours is not None:
            import os
            os.close(ours)
        return PragueHandle("ccswitch-shared" if ours is not None else "kernel")
    obj = BpfObject(obj_path)
    try:
        obj.set_map_flags(STRUCT_OPS_MAP, BPF_F_LINK)
        obj.load()
        obj.attach_struct_ops(STRUCT_OPS_MAP)
        return PragueHandle("ccswitch", obj)
    except BaseException:
        obj.close()
        raise
