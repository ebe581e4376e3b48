"""DataPlane: the kernel side of ccswitch for one network namespace.

Owns the monitor (sockops + sampling iterator), the switcher and its use
of PCC and (prague=True) Prague (registered if missing, kept by a holder
process while any ccswitch process uses them: bpf/holder.py), and releases
all of them on close, on SIGTERM/SIGHUP (turned into SystemExit so that
`with` blocks unwind) and on exceptions.  Nothing is pinned: if the process
is killed outright the kernel drops every link and lock with its fds.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Sequence
from types import FrameType
from typing import TYPE_CHECKING

from ccswitch.bpf.monitor import Monitor
from ccswitch.bpf.pcc import PccHandle, ensure_pcc
from ccswitch.bpf.prague import NAME as PRAGUE
from ccswitch.bpf.prague import PragueHandle, ensure_prague, refuse_without_ecn
from ccswitch.bpf.switcher import INHERIT_MODES, Switcher, SwitchError, SwitchResult
from ccswitch.host import (
    InstanceLock,
    available_ccas,
    require_bpffs,
    require_btf,
    require_root,
)
from ccswitch.sampler import Sampler

if TYPE_CHECKING:
    import pyarrow as pa

    from ccswitch.frame import FlowFrame

_handler_pid = 0


def _exit_on_signal(signum: int, _frame: FrameType | None) -> None:
    if os.getpid() != _handler_pid:
        # a forked child (pyroute2 forks helpers and stops them with SIGTERM)
        # must not unwind the parent's copied stack and close its resources
        os._exit(128 + signum)
    raise SystemExit(128 + signum)


def install_signal_handlers() -> None:
    """SIGTERM/SIGHUP unwind like an exception, so every `with` detaches."""
    global _handler_pid
    _handler_pid = os.getpid()
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _exit_on_signal)


LOADABLE = ("pcc", "prague")
"""CCAs ccswitch registers itself (BPF struct_ops) when a switch asks for one the kernel lacks."""


def validate_request(cca: str, inherit: str, available: Sequence[str]) -> None:
    if cca not in available:
        extra = [c for c in LOADABLE if c not in available]
        more = f"; ccswitch loads on request: {' '.join(extra)} (BPF)" if extra else ""
        raise SwitchError(
            f"unknown congestion control '{cca}'; available here: {' '.join(available)}{more}")
    if inherit not in INHERIT_MODES:
        raise SwitchError(f"unknown inheritance mode '{inherit}'; use 'limited' or 'full'")


class DataPlane:
    """Monitor, sampler and switcher for the caller's network namespace.

    monitor=False gives a switch-only data plane (no sockops hook, no
    instance lock), which is what a one-shot `ccswitch switch` needs.
    """

    def __init__(self, *, monitor: bool = True, pcc: bool = True, prague: bool = False):
        require_root()
        require_btf()
        require_bpffs()
        self._lock = InstanceLock() if monitor else None
        self.pcc: PccHandle | None = None
        self.prague: PragueHandle | None = None
        self.monitor: Monitor | None = None
        self.switcher: Switcher | None = None
        try:
            if self._lock:
                self._lock.acquire()
            if pcc:
                self.pcc = ensure_pcc()
            if prague:
                self.prague = ensure_prague()
            if monitor:
                self.monitor = Monitor()
                self.sampler = Sampler(self.monitor.snapshot)
            self.switcher = Switcher(self.pcc.seed_fd if self.pcc else None)
        except BaseException:
            self.close()
            raise

    def sample(self) -> pa.Table:
        """One FlowSample row per socket since the last read, as a pyarrow.Table."""
        return self.sample_frame().to_arrow()

    def sample_frame(self) -> FlowFrame:
        """As :meth:`sample`, as numpy columns (ccswitchd: no pyarrow on its path)."""
        if not self.monitor:
            raise RuntimeError("this DataPlane was opened without the monitor")
        return self.sampler.tick_frame()

    def switch(self, flow: int, cca: str, inherit: str = "limited") -> SwitchResult:
        """Switch one live flow (socket cookie) to `cca`."""
        return self.switch_many([(flow, cca, inherit)])[0]

    def switch_many(self, requests: Sequence[tuple[int, str, str]]) -> list[SwitchResult]:
        avail = available_ccas()
        for _, cca, inherit in requests:
            validate_request(cca, inherit, avail)
        assert self.switcher is not None
        refused = self._refused_without_ecn([f for f, cca, _ in requests if cca == PRAGUE])
        if not refused:
            return self.switcher.apply(requests)
        done = iter(self.switcher.apply([r for r in requests if r[0] not in refused or r[1] != PRAGUE]))
        return [SwitchResult(f, cca, inh, ok=False, error=refused[f]) if f in refused and cca == PRAGUE
                else next(done) for f, cca, inh in requests]

    def _refused_without_ecn(self, flows: list[int]) -> dict[int, str]:
        """Prague needs ECN feedback: flows that negotiated none are refused (bpf/prague.py)."""
        if not flows:
            return {}
        if self.monitor:
            return refuse_without_ecn(self.monitor.snapshot(), flows)
        with Monitor() as mon:
            return refuse_without_ecn(mon.snapshot(), flows)

    def refresh_pcc(self) -> bool:
        """Register PCC again when it vanished although we use it: its holder was stopped (with the
        ccswitchd unit that started it) or killed, or its link was detached from outside.

        Rebinds the switcher to the new registration's seed map.  Returns True
        when it re-registered.  A no-op for data planes opened with pcc=False.
        """
        if self.pcc is None or "pcc" in available_ccas():
            return False
        assert self.switcher is not None
        # The new registration first: if it fails, the old switcher stays (switches to
        # pcc fail per socket, the others go on) and the caller retries next tick.
        pcc = ensure_pcc()
        try:
            switcher = Switcher(pcc.seed_fd)
        except BaseException:
            pcc.close()
            raise
        self.switcher.close()
        self.pcc.close()
        self.pcc, self.switcher = pcc, switcher
        return True

    def close(self) -> None:
        for part in (self.switcher, self.monitor, self.pcc, self.prague):
            if part is not None:
                part.close()
        self.switcher = self.monitor = self.pcc = self.prague = None
        if self._lock:
            self._lock.release()

    def __enter__(self) -> DataPlane:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
