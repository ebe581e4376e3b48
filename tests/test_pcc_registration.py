"""PCC's registration is kernel-wide, so daemons in different namespaces share it and race for it.

When ``pcc`` vanishes (before bpf/holder.py: when the process that registered it
exited; now: when its holder is stopped with the unit that started it), every
daemon notices on its next tick (DataPlane.refresh_pcc) and tries to register it
again; daemons that do not share the start-up lock (another mount namespace's
/run) get EEXIST from the struct_ops link.  Seen in an end-to-end run: the losing
daemon closed its switcher before the failed attempt and crashed on its next
switch.  These tests pin the fix: the loser adopts the winner's registration,
and a failed refresh leaves the working switcher in place.
"""

from __future__ import annotations

import pytest

import ccswitch.bpf.pcc as pcc_mod
import ccswitch.dataplane as dataplane_mod
from ccswitch.bpf.libbpf import BpfError
from ccswitch.bpf.pcc import ensure_pcc
from ccswitch.dataplane import DataPlane
from ccswitch.host import available_ccas

pytestmark = pytest.mark.kernel


def test_losing_the_registration_race_adopts_the_winner(monkeypatch: pytest.MonkeyPatch) -> None:
    """ensure_pcc saw no pcc, but by its attach someone had registered it: a real EEXIST from the
    kernel, answered with the existing registration instead of an error."""
    winner = ensure_pcc()  # ours, or the one already on this host: either way "pcc" is registered
    try:
        assert "pcc" in available_ccas()
        calls = {"n": 0}

        def stale_view() -> list[str]:  # the first look predates the winner's registration
            calls["n"] += 1
            return [c for c in available_ccas() if c != "pcc"] if calls["n"] == 1 else available_ccas()

        monkeypatch.setattr(pcc_mod, "available_ccas", stale_view)
        loser = ensure_pcc()
        try:
            assert loser.source == "ccswitch-shared" and loser.seed_fd is not None
            assert calls["n"] == 2  # it did try to register, and looked again after EEXIST
        finally:
            loser.close()
        assert "pcc" in available_ccas()  # closing the loser's handle left the winner's registration alone
    finally:
        winner.close()


def test_failed_refresh_keeps_the_working_switcher(monkeypatch: pytest.MonkeyPatch) -> None:
    """refresh_pcc registers the new PCC before dropping the old switcher: when that fails the
    data plane still switches (to the other CCAs) instead of crashing on a None switcher."""
    with DataPlane(monitor=False) as dp:
        before = dp.switcher
        monkeypatch.setattr(dataplane_mod, "available_ccas", lambda: ["cubic", "reno"])

        def refused() -> None:
            raise BpfError("struct_ops link for ccs_pcc: Operation not permitted (errno 1)")

        monkeypatch.setattr(dataplane_mod, "ensure_pcc", refused)
        with pytest.raises(BpfError):
            dp.refresh_pcc()
        assert dp.switcher is before and dp.pcc is not None
        res = dp.switch(1, "cubic")  # no such socket: a per-flow error, not an exception
        assert not res.ok
