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

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

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


# tcp_sock.ecn_flags (prague.h): RFC 3168 or AccECN feedback negotiated
ECN_MODE_ANY = (1 << 0) | (1 << 4)


def refuse_without_ecn(records: np.ndarray, flows: Sequence[int]) -> dict[int, str]:
    """Flows (socket cookies) that must not be switched to prague, with the reason.

    A connection that negotiated no ECN gets no CE feedback, yet the kernel
    sets ECT(0) on its packets once it runs an ECN congestion control (and
    Prague's fallback to Reno cannot run inside the switcher's setsockopt):
    an AQM would mark it instead of dropping and nobody would answer the
    marks.  `records` are monitor flow_records (bpf/monitor.py).  Flows not
    in `records` are left to the switcher, which reports them as not found.
    """
    ecn = dict(zip(records["cookie"].tolist(), (records["ecn_flags"] & ECN_MODE_ANY).tolist(),
                   strict=True))
    return {f: (f"flow {f} negotiated no ECN, so {NAME} would get no feedback from ECN marks; "
                f"start it with {NAME} (or with net.ipv4.tcp_ecn=1) to be able to switch it to {NAME}")
            for f in flows if ecn.get(f, 1) == 0}


def make_default(ns: str) -> None:
    """Make prague the default congestion control of network namespace `ns`.

    ECN and AccECN are negotiated in the handshake, so a socket must run
    prague *before* connect() (and a listener must run it to accept AccECN).
    Tools that set the algorithm only after connecting (iperf3 3.12's -C) get
    no ECN and Prague falls back to Reno; with prague as the namespace's
    default every new socket starts with it.  Needs prague registered
    (ensure_prague()); the kernel allows it as a netns default because its
    flags include TCP_CONG_NON_RESTRICTED.
    """
    from ccswitch.testbed.netns import run_in  # testbed imports bpf, not the reverse

    if NAME not in available_ccas():
        raise RuntimeError(f"cannot make {NAME} the default of {ns}: it is not registered; "
                           f"call ensure_prague() (or open DataPlane(prague=True)) first")
    run_in(ns, ["sysctl", "-qw", f"net.ipv4.tcp_congestion_control={NAME}"])
