"""Prague (bpf/prague.bpf.c) and the ECN columns of FlowSample on real kernel TCP.

CE marks come from the CE marker (bpf/cemark.bpf.c, tc BPF on the receiver's
ingress): this kernel has no marking qdisc, and the emulator's DualPI2 is
not needed to check the sender side.  Bulk flows are plain Python sockets
whose congestion control is set *before* connect(), because ECN (and
AccECN) is negotiated in the handshake; iperf3 3.12 sets -C only after
connect, so the iperf3 test makes prague the namespaces' default instead.
AccECN needs the receiver's listener to run an algorithm that asks for it
(this kernel's net.ipv4.tcp_ecn stops at 2): the receiver listens with
prague too.  docs/l4s-kernel.md has the probes behind all this.
"""

from __future__ import annotations

import collections
import contextlib
import json
import socket
import statistics
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ccswitch.bpf.cemark import CeMarker
from ccswitch.bpf.prague import PRAGUE_DSCP, STRUCT_OPS_MAP, PragueHandle, PragueTunables, ensure_prague, make_default
from ccswitch.dataplane import DataPlane
from ccswitch.host import available_ccas
from ccswitch.testbed.runs.iperf import start_flow, start_server
from ccswitch.testbed.runs.netns import entered, popen_in

from helpers import unregistered_within

pytestmark = pytest.mark.kernel
RATE_MBIT = 50.0
ECT0, CE = 2, 3
ECN_NONE, ECN_RFC3168, ECN_ACCECN = 0, 1, 2
SO_MAX_PACING_RATE = 47  # asm-generic/socket.h (bytes/s)
SAMPLE_S = 0.25  # monitor sampling interval of the marked runs: 16 samples of a 4 s run's sawtooth


@contextlib.contextmanager
def bulk_flow(bn, port: int, cca: str, rcv_cca: str | None, max_pacing_bps: float | None = None) -> Iterator[int]:
    """A sender->receiver bulk TCP flow running in a thread; yields its local port.

    ``max_pacing_bps``: SO_MAX_PACING_RATE on the sender (bit/s), a bound on how fast a window the
    sender did not choose can leave (test_prague_reduces_in_proportion_to_marks)."""
    with entered(bn.receiver):
        ls = socket.socket()
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if rcv_cca:
            ls.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, rcv_cca.encode())
        ls.bind((bn.receiver_addr, port))
        ls.listen()
    stop = threading.Event()

    def sink() -> None:
        conn, _ = ls.accept()
        with conn:
            while conn.recv(1 << 16):
                pass

    def pump(s: socket.socket) -> None:
        buf = b"x" * 65536
        s.settimeout(0.2)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                s.send(buf)

    rx = threading.Thread(target=sink, daemon=True)
    rx.start()
    with entered(bn.sender):
        s = socket.socket()
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cca.encode())
    if max_pacing_bps:
        s.setsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE, round(max_pacing_bps / 8))
    tx = threading.Thread(target=pump, args=(s,), daemon=True)
    try:
        s.connect((bn.receiver_addr, port))
        tx.start()
        yield s.getsockname()[1]
    finally:
        stop.set()
        if tx.is_alive():
            tx.join()
        s.close()
        rx.join(timeout=5)
        ls.close()


def rows_for(dp: DataPlane, sport: int, seconds: float, interval: float = 0.5) -> list[dict]:
    dp.sample()
    rows: list[dict] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(interval)
        rows += [r for r in dp.sample().to_pylist() if r["sport"] == sport]
    return rows


def marked_run(bn, port: int, prob: float, rcv_cca: str | None, seconds: float = 4.0,
               cca: str = "prague", max_pacing_bps: float | None = None) -> tuple[list[dict], tuple[int, int]]:
    """Flow through the CE marker at `prob`; (steady rows after 1 s, marker stats)."""
    with CeMarker(bn.receiver, bn.receiver_dev, prob) as mk, \
            entered(bn.sender), DataPlane(pcc=False, prague=True) as dp, \
            bulk_flow(bn, port, cca, rcv_cca, max_pacing_bps) as sport:
        rows = rows_for(dp, sport, seconds, interval=SAMPLE_S)
        stats = mk.stats()
    return rows[round(1.0 / SAMPLE_S):], stats


def struct_ops_map_ids() -> set[int]:
    """Ids of the live struct_ops maps named like ours (bpftool -j map show)."""
    out = subprocess.run(["bpftool", "-j", "map", "show"], capture_output=True, text=True, check=True).stdout
    return {m["id"] for m in json.loads(out) if m.get("name") == STRUCT_OPS_MAP}


def test_prague_registers_and_unregisters() -> None:
    """Registered while the DataPlane lives; after it: not offered, and its map is freed.

    Only the map ids that appeared during the test count: another process
    (a concurrent run) may hold its own registration.  The holder unregisters
    within its poll of the users' lock (bpf/holder.py, 0.25 s) and the map is
    freed after an RCU grace period, hence the waits of up to 2 and 3 s.
    """
    before = struct_ops_map_ids()
    with DataPlane(monitor=False, pcc=False, prague=True) as dp:
        assert "prague" in available_ccas()
        source = dp.prague.source if dp.prague else None
        ours = struct_ops_map_ids() - before
    if source == "ccswitch":  # ours: gone with the DataPlane
        assert len(ours) == 1
        assert unregistered_within("prague")
        deadline = time.monotonic() + 3.0
        while ours & struct_ops_map_ids() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not ours & struct_ops_map_ids(), f"struct_ops map {ours} still exists"


@pytest.mark.bottleneck(rate_mbit=RATE_MBIT)
def test_prague_iperf3_fills_bottleneck_with_ect0_and_dscp(bottleneck, iperf3) -> None:
    """>= 85% of the 50 Mbit/s tbf over seconds 1..5; data packets ECT(0) + PRAGUE_DSCP.

    85%: the ceiling is ~95.6% (1448 payload bytes per 1514-byte frame); a
    Reno-growth flow over a 20 ms tbf queue keeps it nearly full, the rest
    is margin for a loaded 2-core machine.  The first second is slow start.
    """
    bn, port = bottleneck, 5411
    with entered(bn.sender), DataPlane(pcc=False, prague=True):
        for ns in (bn.sender, bn.receiver):  # iperf3 -C acts after connect(): too late for ECN
            make_default(ns)
        cap = popen_in(bn.receiver, ["tshark", "-i", bn.receiver_dev, "-c", "300", "-T", "fields",
                                     "-e", "ip.src", "-e", "tcp.flags.syn", "-e", "tcp.flags.ae",
                                     "-e", "ip.dsfield.dscp", "-e", "ip.dsfield.ecn", "-e", "tcp.len",
                                     f"tcp port {port}"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert cap.stderr is not None
            while (line := cap.stderr.readline()) and "Capturing on" not in line:
                pass  # the SYN must not be sent before tshark captures
            time.sleep(0.3)
            with start_server(bn.receiver, port, bind=bn.receiver_addr):
                res = start_flow(bn.sender, bn.receiver_addr, port, cca=None, seconds=5).wait(timeout=40)
            out = cap.communicate(timeout=20)[0]
        finally:
            if cap.poll() is None:
                cap.kill()
                cap.wait()
    steady = statistics.mean(iv.bits_per_second for iv in res.intervals[1:5]) / 1e6
    assert steady >= 0.85 * RATE_MBIT, [round(iv.bits_per_second / 1e6, 1) for iv in res.intervals]
    kinds: collections.Counter = collections.Counter()
    for line in out.splitlines():
        src, syn, ae, dscp, ecn, ln = line.split("\t")
        if src == bn.sender_addr:
            kind = "syn" if syn in ("1", "True") else "data" if int(ln) > 0 else "ack"
            # AE is set on the SYN to ask for AccECN; later it is a bit of the ACE counter
            kinds[(kind, int(dscp), int(ecn), kind == "syn" and ae in ("1", "True"))] += 1
    data = {k: v for k, v in kinds.items() if k[0] == "data"}
    assert data and set(data) == {("data", PRAGUE_DSCP, ECT0, False)}, kinds
    syns = [k for k in kinds if k[0] == "syn"]
    assert syns and all(k[3] for k in syns), kinds  # AccECN requested (AE set on the SYN)


@pytest.mark.bottleneck(rate_mbit=RATE_MBIT)
def test_ce_fraction_is_zero_without_marks_and_follows_the_marker(bottleneck) -> None:
    """ce_fraction = 0 with no marks; with 10% marking it matches the marker's count.

    The marker counts the segments it set to CE (the ground truth); the
    monitor reports what the peer fed back (AccECN).  +-0.03 absolute covers
    the segments still in flight at the ends of the sampled window.
    """
    rows, stats = marked_run(bottleneck, 5421, 0.0, "prague", seconds=2.5)
    assert rows and stats[1] == 0
    assert all(r["ecn_mode"] == ECN_ACCECN for r in rows), [r["ecn_mode"] for r in rows]
    assert sum(r["ce_segs"] for r in rows) == 0
    assert all(r["ce_fraction"] == 0.0 for r in rows if r["delivered_segs"] > 0)
    rows, stats = marked_run(bottleneck, 5422, 0.1, "prague", seconds=2.5)
    truth = stats[1] / stats[0]
    measured = sum(r["ce_segs"] for r in rows) / sum(r["delivered_segs"] for r in rows)
    assert 0.05 < truth < 0.15, stats
    assert abs(measured - truth) <= 0.03, (measured, truth)
    assert all(0.0 <= r["ce_fraction"] <= 1.0 for r in rows if r["delivered_segs"] > 0)


def fed_back_fraction(rows: list[dict]) -> float:
    """CE fraction the peer fed back (AccECN) over the rows: the input of alpha."""
    return sum(r["ce_segs"] for r in rows) / max(1, sum(r["delivered_segs"] for r in rows))


@contextlib.contextmanager
def prague_tuned(tunables: PragueTunables) -> Iterator[PragueHandle]:
    """Our own registration of prague with these RTT-independence tunables (DataPlanes share it)."""
    unregistered_within("prague")  # an earlier test's registration ends within its holder's poll
    h = ensure_prague(tunables=tunables)
    try:
        if h.source != "ccswitch":
            raise AssertionError(f"prague is registered by another process ({h.source}): its RTT scaling "
                                 f"is not this test's to set; rerun when it has gone")
        yield h
    finally:
        h.close()


@pytest.mark.bottleneck(rate_mbit=RATE_MBIT)
def test_prague_reduces_in_proportion_to_marks(bottleneck) -> None:
    """DCTCP law: with mark probability p, cwnd settles near 2/p.

    That is the law without RTT independence (rtt_scaling "none"; with "rate",
    the default, it holds only at RTTs of 25 ms and more), so the DCTCP part
    runs with "none".  At the end the same 5% marks with "rate": below the
    25 ms reference RTT the window is 2 (1-p) R / (p T) (prague.bpf.c header),
    under 2 segments at this sub-ms RTT plus the tbf queue, so it must sit at
    the 2-3 segment floor (measured 2.0-2.2 idle, against 24-42 without
    scaling); accepted: the median sample <= max(4, 2x the law) and < half
    the "none" window, in one of two runs.  Why median, two runs and a
    pacing cap (28 Nov): this kernel now and then enters CWR without calling
    Prague's ssthresh() (prague.bpf.c, "Reductions made without us"; 1-9
    times per 8 s run here); the stack turns the garbage ssthresh into a
    window of ~10^9 on that ACK and sends the socket's buffer at once.
    Prague repairs the window from the next ACK, but the burst fills the tbf
    queue and the flow needs seconds at 5 % marks to come back to the floor:
    the mean over the run missed the floor in ~1 run in 3.  SO_MAX_PACING_RATE
    at 2x the link bounds that burst.  Measured on 28 Nov with the repair:
    this test passed 5 of 5 at the first run (median 2.0) on a quiet machine;
    before the repair, 3 of 6 scaled runs missed (8.7, 11.2, 156).
    A sender without RTT scaling keeps ~25 in both runs.
    The numbers below were measured before the ECN reductions carried their
    fraction of a segment (prague.bpf.c); with it, on 25 Nov under load ~6:
    cwnd 26.5 at 5%, 10.9 at 20% (2.4x), 10.1 with classic feedback (2.6x
    below AccECN), against 36.0, 15.8 and 11.2 with the previous build in
    the same conditions.

    4x the marking gives ~1/4 the window (measured 4.3x for p = 5% -> 20%:
    cwnd ~42 -> ~10 on an idle machine, 2.2x-3.6x with six busy loops or the
    whole file running, where the 20% run's window stays at ~13-15); accepted
    1.6x..7x, wide because a 4 s run has only a few hundred RTTs of a
    sawtooth, sampled every 0.25 s.  A sender that ignored the marks'
    fraction would keep the same window at both probabilities (ratio ~1,
    both set by the tbf queue), so it fails every attempt.  The pair is
    measured at most twice: one CI run on a shared host saw 34.5 vs 27.2 once
    (not reproduced here under six busy loops); a second pair tells a stall of
    the host from a sender that does not react.  The same 5% marks with
    classic RFC 3168 feedback (receiver without AccECN: every mark halves)
    must leave a much smaller window than AccECN's proportional reaction
    (measured ~10 vs ~42 idle, 14 vs 26 in a loaded CI run; accepted: AccECN
    > 1.5x classic, well clear of the ~1x a sender that halved on every mark
    in AccECN mode too would give).  Also measured at most twice: a CI run on
    25 Nov saw 32 vs 25 once; a sender that halved on every mark in AccECN
    mode fails both pairs.
    """
    bn = bottleneck
    with prague_tuned(PragueTunables("none")) as h:
        tried = []
        for attempt in range(2):
            low, _ = marked_run(bn, 5431 + 5 * attempt, 0.05, "prague")
            high, _ = marked_run(bn, 5432 + 5 * attempt, 0.20, "prague")
            assert {r["ecn_mode"] for r in low + high} == {ECN_ACCECN}
            assert {r["cca"] for r in low + high} == {"prague"}
            w_low, w_high = (statistics.mean(r["cwnd_segs"] for r in rows) for rows in (low, high))
            tried.append({"w_low": w_low, "w_high": w_high,
                          "fed_back": (fed_back_fraction(low), fed_back_fraction(high)),
                          "cwnd_high": [r["cwnd_segs"] for r in high]})
            if 1.6 <= w_low / w_high <= 7.0:
                break
        else:
            raise AssertionError(f"window ratio at 5% vs 20% marks outside 1.6..7 twice: {tried}")
        tried_classic = []
        for attempt in range(2):
            classic, _ = marked_run(bn, 5433 + 5 * attempt, 0.05, None)
            assert {r["ecn_mode"] for r in classic} == {ECN_RFC3168}
            w_classic = statistics.mean(r["cwnd_segs"] for r in classic)
            tried_classic.append({"w_accecn": w_low, "w_classic": w_classic, "fed_back": fed_back_fraction(classic),
                                  "cwnd_classic": [r["cwnd_segs"] for r in classic]})
            if w_low > 1.5 * w_classic:
                break
            low, _ = marked_run(bn, 5434 + 5 * attempt, 0.05, "prague")  # a fresh AccECN side for the next pair
            w_low = statistics.mean(r["cwnd_segs"] for r in low)
        else:
            raise AssertionError(f"AccECN window not > 1.5x classic at 5% marks, twice: {tried_classic}")
        # alpha follows the marks: the flows kept most of the link (reaction, not collapse)
        assert statistics.mean(r["goodput_bps"] for r in high) >= 0.7 * RATE_MBIT * 1e6
        # RTT independence (the default): same 5% marks, the window at the floor
        h.set_tunables(PragueTunables())
        tried_scaled = []
        for attempt in range(2):
            repairs = h.repairs() or 0
            scaled, _ = marked_run(bn, 5449 + attempt, 0.05, "prague", max_pacing_bps=2 * RATE_MBIT * 1e6)
            w_scaled = statistics.median(r["cwnd_segs"] for r in scaled)
            rtt_us = statistics.median(r["rtt_us"] for r in scaled)
            p = fed_back_fraction(scaled)
            law = 2 * (1 - p) * rtt_us / (p * 25_000)
            tried_scaled.append({"w_scaled": w_scaled, "law": round(law, 2), "rtt_us": rtt_us,
                                 "kernel_reductions_repaired": (h.repairs() or 0) - repairs,
                                 "cwnd": [r["cwnd_segs"] for r in scaled]})
            print(f"5% marks: none {w_low:.1f}, rate {w_scaled:.1f} (law {law:.2f} at {rtt_us:.0f} us)")
            if w_scaled <= max(4.0, 2 * law) and w_scaled < 0.5 * w_low:
                break
        else:
            raise AssertionError(f"RTT-scaled window not at the floor twice (none: {w_low:.1f}): {tried_scaled}")


@pytest.mark.bottleneck(rate_mbit=RATE_MBIT)
def test_switch_to_prague_needs_ecn(bottleneck) -> None:
    """An AccECN flow switches prague -> cubic -> prague; a flow without ECN is refused."""
    bn = bottleneck
    with entered(bn.sender), DataPlane(pcc=False, prague=True) as dp:
        with bulk_flow(bn, 5441, "prague", "prague") as sport:
            rows = rows_for(dp, sport, 1.0)
            fid = rows[-1]["flow_id"]
            assert dp.switch(fid, "cubic").cca_after == "cubic"
            back = dp.switch(fid, "prague")
            assert back.ok and back.cca_after == "prague", back
            last = rows_for(dp, sport, 1.0)[-1]
            assert last["cca"] == "prague" and last["ecn_mode"] == ECN_ACCECN
        with bulk_flow(bn, 5442, "cubic", None) as sport:
            fid = rows_for(dp, sport, 0.6)[-1]["flow_id"]
            res = dp.switch(fid, "prague")
            assert not res.ok and "negotiated no ECN" in (res.error or ""), res
            assert rows_for(dp, sport, 0.6)[-1]["cca"] == "cubic"


def test_shared_registration_is_not_closed_by_a_second_user() -> None:
    """A second ensure_prague() shares the first registration and closing it keeps prague."""
    first = ensure_prague()
    try:
        second = ensure_prague()
        assert second.source in ("ccswitch-shared", "kernel")
        second.close()
        assert "prague" in available_ccas()
    finally:
        first.close()


def test_prague_through_dualpi2_is_l4s_and_marked(require, iperf3) -> None:
    """Prague through linkemu's DualPI2 (classifier = DSCP 40, Linux defaults otherwise),
    20 Mbit/s, 5 ms base RTT, one iperf3 flow for 6 s.

    Its packets must all use the L queue (none in C), be CE-marked by the L
    queue's 1 ms step, the monitor must see that feedback (ce_segs > 0, mean
    ce_fraction > 0.5% over the last 4 s; with a step AQM a DCTCP flow sees a
    few marks per RTT) and AccECN, and the L queue's mean sojourn must stay
    below 5 ms (step at 1 ms; up to ~1-2 ms of emulator timing error on a
    loaded 2-core VM, as in tests/test_l4s.py) while the flow gets >= 70% of
    the link (1 mark per few RTTs costs little; 70% leaves room for the start).
    """
    from ccswitch.testbed.runs.emulator import Emulator, binary_path, dualpi2, emulator_config, link
    from ccswitch.testbed.runs.topology import Topology

    require(binary_path().is_file(), f"linkemu is not built ({binary_path()}); run scripts/setup.sh")
    rate, port = 20.0, 5451
    with Topology(1) as topo, entered(topo.clients[0]), DataPlane(pcc=False, prague=True) as dp:
        for ns in (topo.clients[0], topo.server):
            make_default(ns)
        cfg = emulator_config(topo.client_ifs, topo.server_if,
                              uplink=link(rate, 2.5, qdisc=dualpi2(classifier="dscp", l_dscp=[PRAGUE_DSCP])),
                              downlink=link(rate, 2.5, limit_pkts=1000), interval_ms=1000)
        with Emulator(topo.router, cfg) as emu, start_server(topo.server, port, bind=topo.server_addr):
            flow = start_flow(topo.clients[0], topo.server_addr, port, cca=None, seconds=6)
            dp.sample()
            rows: list[dict] = []
            while flow.returncode is None:
                time.sleep(1.0)
                rows += [r for r in dp.sample().to_pylist() if r["dport"] == port and r["cca"] == "prague"]
            res = flow.wait(timeout=30)
    assert emu.summary is not None
    classes = emu.summary["uplink"]["classes"]
    lq, cq = classes["l4s"], classes["classic"]
    assert lq["packets_out"] > 1000 and lq["ecn_marks"] > 0, classes
    assert cq["packets_out"] <= 10, cq  # at most the handshake (SYN carries DSCP 0)
    data = [r for r in rows if r["delivered_segs"] > 100][-4:]
    print(f"L pkts {lq['packets_out']} marks {lq['ecn_marks']} sojourn mean {lq['sojourn_us']['mean']:.0f} us; "
          f"C pkts {cq['packets_out']}; ce_fraction {[round(r['ce_fraction'], 3) for r in data]}; "
          f"cwnd {[r['cwnd_segs'] for r in data]}; {res.receiver_mbps:.1f} Mbit/s")
    assert data and {r["ecn_mode"] for r in data} == {ECN_ACCECN}, rows
    assert sum(r["ce_segs"] for r in data) > 0
    assert statistics.mean(r["ce_fraction"] for r in data) > 0.005, [r["ce_fraction"] for r in data]
    assert lq["sojourn_us"]["mean"] < 5000, lq["sojourn_us"]
    assert res.receiver_mbps >= 0.7 * rate * 1448 / 1500, res.receiver_mbps


def test_prague_vs_cubic_through_dualpi2_shares_the_link(tmp_path, iperf3) -> None:
    """RTT independence: one Prague and one CUBIC flow at the same 5 ms base RTT through
    linkemu's DualPI2 (RFC 9332's k = 2, Linux defaults; l4s-pair-cubic-vs-prague-15s,
    50 Mbit/s) must get per-flow goodputs within 1:2 .. 1.5:1 (L:C), over seconds 5-15
    (testbed/l4s/report_phases.py's phase mean, from the iperf3 servers).

    Why it can fail: DualPI2 equalises the *windows* of a DCTCP-law and a Reno-law flow,
    so a Prague without RTT independence takes RTT_C / RTT_L / 1.22 times CUBIC's rate
    (the C flow's RTT includes the 15 ms C queue), and the Prague of before
    docs/l4s.md "Prague fidelity" also truncated its ECN reductions to nothing:
    measured 1.97:1 and 1.90:1 with it (this scenario, seeds 1 and 2, load average
    ~8), 1:1.14 and 1:1.29 with RTT independence at the 25 ms reference RTT and
    the reductions' fractions carried.  1.5:1 is well below the former; 1:2 catches
    an over-correction (Prague starving, e.g. an additive increase scaled twice;
    the law predicts 1:1.6 for a 25 ms reference against CUBIC's 20 ms).  Measured
    at most twice (a 15 s run on a loaded 2-core VM can stall a sender for a
    second); ~20 s per run.
    """
    from ccswitch.testbed.l4s.report_phases import analyse
    from ccswitch.testbed.runs.runner import run_once
    from ccswitch.testbed.scenario import load_scenario

    repo = Path(__file__).resolve().parents[1]
    sc = load_scenario(repo / "testbed" / "scenarios" / "l4s-pair-cubic-vs-prague-15s.toml")
    tried = []
    h = ensure_prague()
    try:
        if h.source == "ccswitch":
            assert h.tunables() == PragueTunables(), h.tunables()  # the default: rate, 25 ms
        for attempt in range(2):
            run_dir = tmp_path / f"run-{attempt}"
            run_once(sc, run_dir, progress=False)
            phase = analyse(run_dir).phases[0]
            tried.append({"L:C": round(phase.lc_ratio, 2), "per_flow_mbps": phase.per_flow_mbps,
                          "utilisation": phase.utilisation, "source": h.source})
            if 0.5 <= phase.lc_ratio <= 1.5:
                break
        else:
            raise AssertionError(f"L:C outside 1:2 .. 1.5:1 twice: {tried}")
    finally:
        h.close()
    print(tried)
    assert tried[-1]["utilisation"] >= 0.9, tried
