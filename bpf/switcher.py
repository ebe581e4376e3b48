"""User-space half of the switcher (switcher.bpf.c, switcher.h).

Inheritance modes (paper 002, section 4: limited vs unrestricted switching):

limited  The kernel's own re-initialisation: cwnd, ssthresh, srtt, rttvar
         and the min-RTT filter carry over, the new algorithm's private
         state starts from its defaults.  cwnd is not reset to the initial
         window, so the flow does not restart from scratch.  (After BBR,
         whose ssthresh is "infinite", CUBIC keeps growing in slow start
         from the inherited cwnd until HyStart or a loss ends it.)
full     limited + the new algorithm's private state seeded from the old
         one.  Only possible for ccswitch's own BPF algorithms, whose state
         BPF may write: PCC starts its rate control at the old algorithm's
         delivery rate with the old min RTT as its baseline, skipping its
         doubling start-up.  The built-in CUBIC and BBR keep their private
         state in kernel memory that BPF cannot write; for them `full` is
         accepted and behaves as `limited` (the result says seeded=False).
         Both already pick up what matters: BBR takes min RTT from the
         socket's filter at init, CUBIC starts its epoch at the current cwnd.
         Seeding needs the registered PCC's own seed map (pcc.py): a
         switcher opened without it writes the seed into a private copy
         that no PCC reads, so its results say seeded=False even where the
         kernel program reports a write (a PCC shared without
         CAP_SYS_ADMIN, a kernel module's PCC, pcc=False data planes).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ccswitch.bpf.libbpf import BpfObject, run_iter

OBJ_PATH = Path(__file__).with_name("switcher.bpf.o")
SEED_MAP_HERE = "ccs_sw_seed"
"""This object's handle on PCC's seed map (pcc.SEED_MAP, reused by fd); a different name, so a
switcher's private copy is never mistaken for the registered PCC's map by a lookup by name."""
INHERIT_MODES = {"limited": 0, "full": 1}

REQUEST = struct.Struct("<16sII")  # struct switch_request
RESULT_DTYPE = np.dtype([  # struct switch_result
    ("err", "<i4"), ("seeded", "<u4"), ("ts_ns", "<u8"),
    ("cwnd_before", "<u4"), ("cwnd_after", "<u4"),
    ("ssthresh_before", "<u4"), ("ssthresh_after", "<u4"),
    ("srtt_us_before", "<u4"), ("srtt_us_after", "<u4"),
    ("min_rtt_us_before", "<u4"), ("min_rtt_us_after", "<u4"),
    ("cca_before", "S16"), ("cca_after", "S16"),
])


class SwitchError(ValueError):
    """A switch request that cannot be carried out as asked."""


@dataclass
class SwitchResult:
    flow_id: int
    requested: str
    inherit: str
    ok: bool
    error: str | None = None
    cca_before: str = ""
    cca_after: str = ""
    seeded: bool = False
    cwnd_before: int = 0
    cwnd_after: int = 0
    ssthresh_before: int = 0
    ssthresh_after: int = 0
    srtt_us_before: int = 0
    srtt_us_after: int = 0
    min_rtt_us_before: int = 0
    min_rtt_us_after: int = 0
    ts_ns: int = 0

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def _errno_text(err: int) -> str:
    import os

    return f"{os.strerror(-err)} (errno {-err})"


class Switcher:
    """Applies (flow, cca, inherit) requests to sockets of this netns."""

    def __init__(self, pcc_seed_fd: int | None = None, obj_path: Path = OBJ_PATH):
        self.seedable = pcc_seed_fd is not None  # else the seed map is private: no PCC reads it
        self._obj = BpfObject(obj_path)
        try:
            if pcc_seed_fd is not None:
                self._obj.reuse_map_fd(SEED_MAP_HERE, pcc_seed_fd)
            self._obj.load()
            self._req = self._obj.map("ccs_sw_req")
            self._res = self._obj.map("ccs_sw_res")
            self._iter = self._obj.attach_iter("ccs_switch")
        except BaseException:
            self._obj.close()
            raise

    def apply(self, requests: Sequence[tuple[int, str, str]]) -> list[SwitchResult]:
        """Switch each (flow_id, cca, inherit) in one pass over the sockets."""
        if not requests:
            return []
        keys = b"".join(struct.pack("<Q", fid) for fid, _, _ in requests)
        vals = b"".join(REQUEST.pack(cca.encode(), INHERIT_MODES[inh], 0)
                        for _, cca, inh in requests)
        self._req.update_batch(keys, vals, len(requests))
        try:
            run_iter(self._iter)
            out = []
            for fid, cca, inh in requests:
                raw = self._res.lookup(struct.pack("<Q", fid))
                out.append(self._result(fid, cca, inh, raw))
        finally:
            self._req.delete_batch(keys, len(requests))
            self._res.delete_batch(keys, len(requests))
        return out

    def _result(self, fid: int, cca: str, inherit: str, raw: bytes | None) -> SwitchResult:
        if raw is None:
            return SwitchResult(fid, cca, inherit, ok=False,
                                error=f"flow {fid} not found among this namespace's TCP sockets "
                                      "(closed, or in another namespace)")
        r = np.frombuffer(raw, dtype=RESULT_DTYPE)[0]
        fields = {n: (r[n].decode() if RESULT_DTYPE[n].kind == "S" else int(r[n]))
                  for n in RESULT_DTYPE.names if n not in ("err", "seeded")}
        err = int(r["err"])
        return SwitchResult(fid, cca, inherit, ok=err == 0,
                            error=None if err == 0 else f"setsockopt(TCP_CONGESTION, {cca}) failed: "
                                                        f"{_errno_text(err)}",
                            seeded=bool(r["seeded"]) and self.seedable, **fields)

    def close(self) -> None:
        self._obj.close()
