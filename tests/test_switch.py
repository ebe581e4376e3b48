"""Live switching of a running flow, checked from the outside with ss(8) and iperf3."""

from __future__ import annotations

import time

import pytest

from ccswitch.dataplane import DataPlane
from ccswitch.testbed.runs.iperf import start_flow, start_server
from ccswitch.testbed.runs.netns import entered

from helpers import sample_for, ss_info

pytestmark = pytest.mark.kernel
PORT, CPORT = 5311, 42011
INITIAL_WINDOW = 10


def _flow_id(dp: DataPlane, sport: int) -> int:
    for _ in range(20):
        ids = [int(r["cookie"]) for r in dp.monitor.snapshot() if r["sport"] == sport]
        if ids:
            return ids[0]
        time.sleep(0.1)
    raise AssertionError(f"no socket with local port {sport}")


def test_live_flow_switched_bbr_cubic_pcc_bbr(bottleneck, iperf3) -> None:
    """ss shows each algorithm; no 1 s interval at zero; limited switches keep cwnd."""
    plan = ["cubic", "pcc", "bbr"]
    with start_server(bottleneck.receiver, PORT, bind=bottleneck.receiver_addr), \
            entered(bottleneck.sender), DataPlane() as dp:
        flow = start_flow(bottleneck.sender, bottleneck.receiver_addr, PORT, cca="bbr",
                          seconds=12, cport=CPORT)
        fid = _flow_id(dp, CPORT)
        time.sleep(3)
        seen, results = [ss_info(bottleneck.sender, CPORT)["cca"]], []
        for cca in plan:
            res = dp.switch(fid, cca, "limited")
            results.append(res)
            seen.append(ss_info(bottleneck.sender, CPORT)["cca"])
            time.sleep(3)
        result = flow.wait(timeout=30)
    assert seen == ["bbr", *plan]
    # The BBR flow has grown past the initial window before the first switch, so
    # "cwnd kept" below is distinguishable from "cwnd reset".  Later switches may
    # start below it: PCC sizes cwnd as rate x RTT, and on this delay-free veth
    # (RTT of tens of microseconds) that is its 4-packet floor, carried over as is.
    assert results[0].cwnd_before > INITIAL_WINDOW
    for res in results:
        assert res.ok, res.error
        if res.cca_after == "pcc":  # rate based: sizes cwnd from the inherited rate, never below
            assert res.cwnd_after >= res.cwnd_before
        else:  # connection state carried over as is
            assert res.cwnd_after == res.cwnd_before
        if res.cwnd_before > INITIAL_WINDOW:  # not reset to the initial window
            assert res.cwnd_after > INITIAL_WINDOW
        assert res.srtt_us_after == res.srtt_us_before
        assert not res.seeded
    rates = [iv.bits_per_second for iv in result.intervals]
    assert len(rates) >= 11 and min(rates) > 0, rates  # never stalls for a whole second


def test_full_inheritance_seeds_pcc(bottleneck, iperf3) -> None:
    """A full switch into PCC seeds its rate from the delivery rate: no collapse after."""
    with start_server(bottleneck.receiver, PORT, bind=bottleneck.receiver_addr), \
            entered(bottleneck.sender), DataPlane() as dp:
        flow = start_flow(bottleneck.sender, bottleneck.receiver_addr, PORT, cca="cubic",
                          seconds=8, cport=CPORT)
        fid = _flow_id(dp, CPORT)
        dp.sample()
        before = sample_for(dp, 3, CPORT)
        res = dp.switch(fid, "pcc", "full")
        after = sample_for(dp, 3, CPORT)
        flow.wait(timeout=30)
    assert res.ok and res.seeded and res.cca_after == "pcc"
    assert all(r["cca"] == "pcc" for r in after)
    # the first second on PCC keeps at least half of CUBIC's steady rate
    assert after[0]["goodput_bps"] > 0.5 * before[-1]["goodput_bps"], (before, after)


def test_switch_errors_leave_flow_untouched(bottleneck, iperf3) -> None:
    with start_server(bottleneck.receiver, PORT, bind=bottleneck.receiver_addr), \
            entered(bottleneck.sender), DataPlane(pcc=False) as dp:
        flow = start_flow(bottleneck.sender, bottleneck.receiver_addr, PORT, cca="cubic",
                          seconds=3, cport=CPORT)
        fid = _flow_id(dp, CPORT)
        gone = dp.switch(fid + 10_000_000, "bbr")
        with pytest.raises(ValueError, match="unknown congestion control 'vegas'"):
            dp.switch(fid, "vegas")
        with pytest.raises(ValueError, match="inheritance mode"):
            dp.switch(fid, "bbr", "everything")
        cca = ss_info(bottleneck.sender, CPORT)["cca"]
        flow.wait(timeout=30)
    assert not gone.ok and "not found" in (gone.error or "")
    assert cca == "cubic"
