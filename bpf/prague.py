"""User-space half of Prague (prague.bpf.c, prague.h): make `prague` available.

Same order of preference as PCC (pcc.py), so loading is idempotent:
1. the kernel already offers `prague` (another ccswitch process registered
   ours, or a real tcp_prague module): use it as it is;
2. otherwise register ours and hand its struct_ops link to a holder process
   (holder.py), which keeps `prague` registered for as long as any ccswitch
   process holding a PragueHandle is alive (also when the one that registered
   it exits or is SIGKILLed), and unregisters it after the last one.  Sockets
   still running it then keep running it; new selections fail until it is
   registered again.

Our registration's RTT independence (prague.bpf.c header) is set with
PragueTunables: ensure_prague(tunables=...), PragueHandle.set_tunables(),
`python -m ccswitch.bpf.prague --rtt-scaling/--rtt-target-ms`.  The process
that registers applies its tunables before the attach, so no socket runs
untuned; a later process gets the registration as it is (its `tunables`
argument is ignored, its handle's set_tunables() refuses: they are the
registrar's).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ccswitch.bpf import holder
from ccswitch.bpf.libbpf import BpfObject
from ccswitch.host import available_ccas

OBJ_PATH = Path(__file__).with_name("prague.bpf.o")
NAME = "prague"
STRUCT_OPS_MAP = "ccs_prague"
PRAGUE_DSCP = 40  # prague.h PRAGUE_DSCP: the DSCP Prague's packets carry (L4S by DSCP)
TUNABLES_MAP = ".data.tunables"  # prague.bpf.c prague_cfg (struct prague_tunables, prague.h), alone in it
STATS_MAP = ".data.stats"  # prague.bpf.c prague_stats (struct prague_stats, prague.h), alone in it
RTT_SCALING = {"none": 0, "rate": 1, "scalable": 2, "additive": 3}  # prague.h PRAGUE_RTT_SCALING_*


@dataclass(frozen=True)
class PragueTunables:
    """RTT independence of ccswitch's Prague (prague.bpf.c header; prague.h struct prague_tunables).

    rtt_scaling: "rate" (default: below the reference RTT a flow gets the rate of a flow at
    that RTT), "additive" (as if the reference RTT were added to its own), "none" (DCTCP's
    RTT-dependent law); "scalable" is accepted and behaves as "rate".
    rtt_target_us: the reference RTT (TCP Prague's prague_rtt_target, 25 ms).
    rtt_transition: rounds after slow start before the scaling starts.
    """

    rtt_scaling: str = "rate"
    rtt_target_us: int = 25_000
    rtt_transition: int = 4

    def __post_init__(self) -> None:
        if self.rtt_scaling not in RTT_SCALING:
            raise ValueError(f"rtt_scaling: one of {', '.join(RTT_SCALING)}, got {self.rtt_scaling!r}")
        if not 0 <= self.rtt_target_us <= 100_000:
            raise ValueError(f"rtt_target_us: 0..100000 (0 = no scaling), got {self.rtt_target_us}")
        if not 0 <= self.rtt_transition <= 1000:
            raise ValueError(f"rtt_transition: 0..1000 rounds, got {self.rtt_transition}")

    def pack(self) -> bytes:
        return struct.pack("<3I", RTT_SCALING[self.rtt_scaling], self.rtt_target_us, self.rtt_transition)

    @classmethod
    def unpack(cls, raw: bytes) -> PragueTunables:
        mode, target, transition = struct.unpack_from("<3I", raw)
        names = {v: k for k, v in RTT_SCALING.items()}
        return cls(names.get(mode, "rate"), target, transition)


class PragueHandle(holder.Held):
    """prague in use by this process (holder.Held: source "ccswitch", "ccswitch-shared" or "kernel",
    close()); its tunables when the registration is ours."""

    def tunables(self) -> PragueTunables | None:
        """The RTT-independence settings of our registration (None if not ours)."""
        if self._obj is None:
            return None
        raw = self._obj.map(TUNABLES_MAP).lookup(struct.pack("<I", 0))
        return PragueTunables.unpack(raw) if raw else None

    def repairs(self) -> int | None:
        """Reductions the kernel entered without Prague's ssthresh() and Prague redid (prague.bpf.c
        header, "Reductions made without us"), over every socket of our registration (None if not ours)."""
        if self._obj is None:
            return None
        raw = self._obj.map(STATS_MAP).lookup(struct.pack("<I", 0))
        return struct.unpack_from("<Q", raw)[0] if raw else 0

    def set_tunables(self, t: PragueTunables) -> None:
        """Change them on our registration; every Prague socket uses them from its next ACK."""
        if self._obj is None:
            raise RuntimeError(f"prague is registered by another process ({self.source}): "
                               f"its tunables are that process's")
        m = self._obj.map(TUNABLES_MAP)
        m.update(struct.pack("<I", 0), t.pack())


def _existing(use: holder.Use) -> PragueHandle:
    """prague is registered: ours (its struct_ops map is live) or not ccswitch's."""
    return PragueHandle(holder.existing_source(STRUCT_OPS_MAP), None, use)


def _register(obj_path: Path, tunables: PragueTunables | None, use: holder.Use) -> PragueHandle:
    def tune(obj: BpfObject) -> None:  # before the first socket can use it
        if tunables is not None:
            PragueHandle("ccswitch", obj, None).set_tunables(tunables)

    return PragueHandle("ccswitch", holder.register_held(NAME, obj_path, STRUCT_OPS_MAP, tune), use)


def ensure_prague(obj_path: Path = OBJ_PATH, tunables: PragueTunables | None = None) -> PragueHandle:
    """Make prague available (module docstring) until the handle is closed or this process ends;
    `tunables` applies to our own registration only (None: the object's defaults, PragueTunables())."""
    return holder.ensure(NAME, lambda: NAME in available_ccas(), _existing,
                         lambda use: _register(obj_path, tunables, use))


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


DEFAULT_SYSCTL = "/proc/sys/net/ipv4/tcp_congestion_control"
ALLOWED_SYSCTL = "/proc/sys/net/ipv4/tcp_allowed_congestion_control"  # global: NON_RESTRICTED ones


def default_cca(ns: str | None = None) -> str:
    """The default congestion control of network namespace `ns` (None: the caller's)."""
    if ns is None:
        return Path(DEFAULT_SYSCTL).read_text().strip()
    from ccswitch.testbed.runs.netns import run_in  # testbed imports bpf, not the reverse

    return run_in(ns, ["sysctl", "-n", "net.ipv4.tcp_congestion_control"],
                  capture_output=True, text=True).stdout.strip()


def set_default(ns: str | None, cca: str) -> None:
    """Set the default congestion control of `ns` (None: the caller's namespace)."""
    if ns is None:
        Path(DEFAULT_SYSCTL).write_text(cca)
        return
    from ccswitch.testbed.runs.netns import run_in

    run_in(ns, ["sysctl", "-qw", f"net.ipv4.tcp_congestion_control={cca}"])


def _in_init_netns() -> bool:
    """Whether the calling thread is in the initial network namespace (False if unknown)."""
    try:
        return os.stat("/proc/thread-self/ns/net").st_ino == os.stat("/proc/1/ns/net").st_ino
    except OSError:  # /proc/1/ns is not readable from every namespace
        return False


def make_default(ns: str | None, name: str = NAME) -> str:
    """Make prague the default congestion control of network namespace `ns`; return the old default.

    `ns` None means the caller's own namespace (a real host in the testbed's
    external mode); restore the returned default with set_default() when done:
    a namespace's default holds a reference on the algorithm, so an
    unregistered BPF prague would stay the default (and alive) otherwise.

    ECN and AccECN are negotiated in the handshake, so a socket must run
    prague *before* connect() (and a listener must run it to accept AccECN).
    Tools that set the algorithm only after connecting (iperf3 3.12's -C) get
    no ECN and Prague falls back to Reno; with prague as the namespace's
    default every new socket starts with it.  Needs prague registered
    (ensure_prague()); outside the initial namespace the kernel allows it as
    a default only with TCP_CONG_NON_RESTRICTED (ccswitch's Prague has it).
    An algorithm without it is refused here, before the sysctl: Linux (6.18
    included) refuses it with EPERM but leaks a reference on it doing so, which
    keeps a BPF algorithm's struct_ops map alive until reboot (docs/l4s-kernel.md).
    `name`: the algorithm (tests register renamed builds).
    """
    if name not in available_ccas():
        raise RuntimeError(f"cannot make {name} the default of {ns or 'this host'}: it is not registered; "
                           f"call ensure_prague() (or open DataPlane(prague=True)) first")
    in_init = ns is None and _in_init_netns()
    if not in_init and name not in Path(ALLOWED_SYSCTL).read_text().split():
        raise RuntimeError(f"cannot make {name} the default of {ns or 'this namespace'}: it lacks "
                           f"TCP_CONG_NON_RESTRICTED (not in net.ipv4.tcp_allowed_congestion_control); rebuild "
                           f"bpf/prague.bpf.o with `make -C bpf` (its flags include it)")
    previous = default_cca(ns)
    set_default(ns, name)
    return previous


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m ccswitch.bpf.prague [--default]`: keep prague registered until SIGINT/SIGTERM.

    For hosts the testbed runner does not run on, e.g. the server of a real
    L4S test bed, whose listeners must run prague to accept AccECN
    (testbed/l4s/README.md).  --default also makes it this host's default
    CCA, and restores the previous one on exit.
    """
    import argparse
    import signal
    import sys

    ap = argparse.ArgumentParser(prog="python -m ccswitch.bpf.prague", description=main.__doc__)
    ap.add_argument("--default", action="store_true", help="also make prague this host's default CCA")
    ap.add_argument("--rtt-scaling", choices=list(RTT_SCALING), default="rate",
                    help="RTT independence (default rate: below --rtt-target-ms, the rate of a flow at it)")
    ap.add_argument("--rtt-target-ms", type=float, default=25.0, help="reference RTT (default 25, TCP Prague's)")
    args = ap.parse_args(argv)
    try:
        tunables = PragueTunables(args.rtt_scaling, round(args.rtt_target_ms * 1000))
    except ValueError as e:
        print(f"prague: error: {e}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        handle = ensure_prague(tunables=tunables)
    except Exception as e:
        print(f"prague: error: cannot register prague ({e}); run as root after scripts/setup.sh", file=sys.stderr)
        return 1
    previous: str | None = None
    try:
        previous = make_default(None) if args.default else None
        scaling = (f", RTT scaling {tunables.rtt_scaling} to {tunables.rtt_target_us / 1000:g} ms"
                   if handle.source == "ccswitch" else ", RTT scaling: the registering process's")
        print(f"prague registered ({handle.source})" + scaling
              + (f", host default (was {previous})" if previous else "") + "; Ctrl-C to stop", flush=True)
        signal.pause()
    except KeyboardInterrupt:
        pass
    except RuntimeError as e:
        print(f"prague: error: {e}", file=sys.stderr)
        return 1
    finally:
        if previous is not None:
            set_default(None, previous)
        repairs = handle.repairs()
        if repairs:  # the kernel's skipped reductions (prague.bpf.c header), worth knowing about
            print(f"prague: {repairs} reductions the kernel made without prague were redone "
                  f"(docs/l4s-kernel.md section 8)", flush=True)
        handle.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
