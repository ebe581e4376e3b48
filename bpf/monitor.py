"""User-space half of the monitor (monitor.bpf.c, monitor.h).

`Monitor` loads the programs, points the sockops hook at this network
namespace, and returns raw `flow_record` snapshots as a numpy structured
array; turning them into per-interval samples is the sampler's job.

A snapshot walks only the tracked sockets (the socket-storage iterator,
cost proportional to the flows); the full walk of the kernel's TCP hash
table (iter/tcp, a fixed ~2 ms for its 262,144 buckets plus the sockets)
runs on the first snapshot and then every FULL_WALK_EVERY_S, to adopt
sockets that predate the monitor or escaped its sockops hook (a socket in
a cgroup outside the hooked one).  Both passes write the same records.

A pass writes its first RECORD_SLOTS records into the memory-mapped array
ccs_records and the rest, if any, into the iterator's output, which ends
with the pass's record count (monitor.bpf.c says why: an output read in
32 KiB pieces made the storage walk restart ~70 times at 10,000 sockets).
Passes of one Monitor run one at a time (a lock): they share that array.

Some kernels refuse map-element iterators (iter/bpf_sk_storage_map,
iter/bpf_map_elem, iter/sockmap) with EPERM even to root: seen on a 6.18
Firecracker build, where iter/tcp and iter/task load.  The monitor then loads
without the tracked pass, says so once, and every snapshot is the full walk:
the same records at the full walk's fixed cost (`Monitor.tracked` is False).
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import struct
import threading
import time
from pathlib import Path

import numpy as np

from ccswitch.bpf.libbpf import BpfError, BpfObject, Link, run_iter
from ccswitch.host import cgroup2_root, netns_cookie

OBJ_PATH = Path(__file__).with_name("monitor.bpf.o")
log = logging.getLogger("ccswitch.monitor")
FULL_WALK_EVERY_S = 5.0
"""Safety-net period of the full hash-table walk (new flows are tracked by sockops at once)."""

# Mirror of struct flow_record (monitor.h); tests/test_bpf_contract.py checks
# every name, offset and size against the object's BTF.
FLOW_RECORD_DTYPE = np.dtype([
    ("cookie", "<u8"), ("netns_cookie", "<u8"), ("cgroup_id", "<u8"), ("ts_ns", "<u8"),
    ("bytes_acked", "<u8"), ("bytes_sent", "<u8"), ("bytes_retrans", "<u8"),
    ("bytes_received", "<u8"), ("pacing_rate", "<u8"), ("delivery_rate", "<u8"),
    ("rtt_samples", "<u8"), ("rtt_absdiff_sum_us", "<u8"), ("established_ns", "<u8"),
    ("saddr", "<u4", (4,)), ("daddr", "<u4", (4,)),
    ("srtt_us", "<u4"), ("rttvar_us", "<u4"), ("min_rtt_us", "<u4"), ("last_rtt_us", "<u4"),
    ("snd_cwnd", "<u4"), ("snd_ssthresh", "<u4"), ("mss", "<u4"),
    ("delivered", "<u4"), ("delivered_ce", "<u4"), ("lost", "<u4"), ("total_retrans", "<u4"),
    ("segs_out", "<u4"), ("data_segs_out", "<u4"), ("retrans_events", "<u4"),
    ("packets_out", "<u4"), ("sndq_bytes", "<u4"), ("write_seq", "<u4"), ("cb_flags", "<u4"),
    ("family", "<u2"), ("sport", "<u2"), ("dport", "<u2"), ("state", "u1"), ("ca_state", "u1"),
    ("cca", "S16"), ("ecn_flags", "<u4"), ("received_ce", "<u4"),
])
# the C compiler pads the struct to 8-byte alignment
FLOW_RECORD_SIZE = (FLOW_RECORD_DTYPE.itemsize + 7) & ~7
FLOW_RECORD_DTYPE = np.dtype({"names": FLOW_RECORD_DTYPE.names,
                              "formats": [FLOW_RECORD_DTYPE.fields[n][0] for n in FLOW_RECORD_DTYPE.names],
                              "offsets": [FLOW_RECORD_DTYPE.fields[n][1] for n in FLOW_RECORD_DTYPE.names],
                              "itemsize": FLOW_RECORD_SIZE})
RECORD_SLOTS = 16384
"""CCS_RECORD_SLOTS of monitor.h: records a pass writes into the mapped array (default size)."""
MAPPED_SLOTS_MIN = 256
"""Slots user space maps at first (60 KiB); more, in powers of two, once a pass fills more."""
_COUNT = struct.Struct("<Q")
_RECORD_BYTES = np.dtype((np.void, FLOW_RECORD_SIZE))
"""A record as opaque bytes: numpy copies a structured dtype field by field (2 ms for 10,000
records here), opaque records as one memcpy (0.2 ms)."""
_ZERO_KEY, _ZERO_COUNT = struct.pack("<I", 0), _COUNT.pack(0)


def pass_count(out: bytes) -> int:
    """The record count that ends a pass's iterator output (overflow records, then the count)."""
    if len(out) < _COUNT.size or (len(out) - _COUNT.size) % FLOW_RECORD_SIZE:
        raise BpfError(f"monitor: a sampling pass returned {len(out)} bytes, not records and a count "
                       "(monitor.bpf.o and bpf/monitor.py from different versions? run `make -C bpf`)")
    return _COUNT.unpack_from(out, len(out) - _COUNT.size)[0]


def pass_records(slots: np.ndarray, out: bytes, count: int) -> np.ndarray:
    """A pass's records, owned by the caller: the slots it filled, then the overflow its output holds.

    `out` is the iterator's output: overflow records, then the pass's record
    *count* (:func:`pass_count` of *out*).  Only the slots are taken from the count:
    an overflow record the kernel had to show twice is counted twice, and it is past the slots.
    """
    head = slots[:min(count, len(slots))].view(_RECORD_BYTES)
    if len(out) == _COUNT.size:
        return head.copy().view(FLOW_RECORD_DTYPE)
    tail = np.frombuffer(out, dtype=_RECORD_BYTES, count=(len(out) - _COUNT.size) // FLOW_RECORD_SIZE)
    return np.concatenate([head, tail]).view(FLOW_RECORD_DTYPE)


def _load_object(obj_path: Path, record_slots: int) -> tuple[BpfObject, bool]:
    """The loaded monitor object and whether it has the tracked pass.

    A kernel that refuses the socket-storage iterator gets the object without
    it (one warning); any other load failure is raised as it is.
    """
    obj = BpfObject(obj_path)
    try:
        obj.set_max_entries("ccs_records", record_slots)
        obj.set_autoload("ccs_count_tracked", False)  # the benchmarks' counter
        obj.load()
        return obj, True
    except BpfError as first:
        obj.close()
        refused = first
    obj = BpfObject(obj_path)
    try:
        obj.set_max_entries("ccs_records", record_slots)
        obj.set_autoload("ccs_sample_tracked", False)
        obj.set_autoload("ccs_count_tracked", False)
        obj.load()
    except BaseException:
        obj.close()
        raise refused from None
    log.warning("monitor: this kernel refuses the socket-storage iterator (%s); every sampling pass walks "
                "the whole TCP hash table instead (same records, a fixed ~2 ms per pass)",
                os.strerror(refused.errno) if refused.errno else refused)
    return obj, False


class Monitor:
    """The loaded monitor for the current network namespace.

    Create it from the thread that is in the namespace to monitor: the
    iterator and the netns filter both bind to the caller's namespace.
    """

    def __init__(self, obj_path: Path = OBJ_PATH, cgroup: str | None = None, record_slots: int = RECORD_SLOTS):
        """`record_slots`: the mapped array's size (tests make it small to exercise the overflow)."""
        self.netns_cookie = netns_cookie()
        self._obj, self.tracked = _load_object(obj_path, record_slots)
        try:
            self._obj.map("ccs_mon_cfg").update(struct.pack("<I", 0),
                                                struct.pack("<Q", self.netns_cookie))
            self.cgroup = cgroup or cgroup2_root()
            self.sockops_link: Link = self._obj.attach_cgroup("ccs_sockops", self.cgroup)
            self.iter_link: Link = self._obj.attach_iter("ccs_sample")
            self.tracked_link: Link = (self._obj.attach_iter("ccs_sample_tracked", map_name="ccs_flow_sk")
                                       if self.tracked else self.iter_link)
            records = self._obj.map("ccs_records")
            if records.value_size != FLOW_RECORD_SIZE:
                raise BpfError(f"monitor: ccs_records holds {records.value_size}-byte values, bpf/monitor.py "
                               f"{FLOW_RECORD_SIZE} (run `make -C bpf`)")
            self._pass_count = self._obj.map("ccs_pass_count")
        except BaseException:
            self._obj.close()
            raise
        self._records_fd, self.record_slots = records.fd, record_slots
        self._slots_mem: mmap.mmap | None = None
        self._slots = np.empty(0, dtype=FLOW_RECORD_DTYPE)
        self._map_slots(min(MAPPED_SLOTS_MIN, record_slots))
        self._pass_lock = threading.Lock()
        self._last_full = -float("inf")
        self.reattached = 0  # times the sockops hook was re-attached after an outside detach

    def snapshot(self, full: bool | None = None) -> np.ndarray:
        """A record per TCP socket of this netns.

        full=None: the tracked pass, or the full walk when FULL_WALK_EVERY_S
        has passed since the last one; True/False force one (benchmarks).
        Without the tracked pass (`tracked` False) every snapshot is the full walk.
        """
        with self._pass_lock:
            self._keep_sockops_attached()
            now = time.monotonic()
            if full is None:
                full = now - self._last_full >= FULL_WALK_EVERY_S
            if full:
                self._last_full = now
            self._pass_count.update(_ZERO_KEY, _ZERO_COUNT)
            out = run_iter(self.iter_link if full else self.tracked_link)
            count = pass_count(out)
            filled = min(count, self.record_slots)
            if filled > len(self._slots):
                self._map_slots(min(self.record_slots, 1 << (filled - 1).bit_length()))
            return pass_records(self._slots, out, count)

    def _map_slots(self, n: int) -> None:
        """Map the first *n* slots of ccs_records (replacing the smaller mapping).

        The kernel maps a BPF array's pages all at once, so the mapping is resident
        memory: it grows with the most records a pass has filled, not to the array's size.
        """
        mem = mmap.mmap(self._records_fd, n * FLOW_RECORD_SIZE, mmap.MAP_SHARED, mmap.PROT_READ)
        self._release_slots()
        self._slots_mem, self._slots = mem, np.frombuffer(mem, dtype=FLOW_RECORD_DTYPE, count=n)

    def _release_slots(self) -> None:
        # drop our view first: an mmap with views exported refuses to close
        self._slots = np.empty(0, dtype=FLOW_RECORD_DTYPE)
        if self._slots_mem is not None:
            with contextlib.suppress(BufferError):
                self._slots_mem.close()
            self._slots_mem = None

    def _keep_sockops_attached(self) -> None:
        """Re-attach the sockops hook when something detached it from outside (one syscall per pass).

        Without it new flows would reach the tracked set only through the full
        walk, without RTT callbacks (no jitter).  One warning per detachment.
        """
        if self.sockops_link.cgroup_id() != 0:
            return
        log.warning("monitor: the sockops link was detached from outside (e.g. bpftool link detach); "
                    "re-attaching it to %s", self.cgroup)
        self.sockops_link.detach()
        self.sockops_link = self._obj.attach_cgroup("ccs_sockops", self.cgroup)
        self.reattached += 1

    def close(self) -> None:
        self._release_slots()
        self._obj.close()

    def __enter__(self) -> Monitor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
