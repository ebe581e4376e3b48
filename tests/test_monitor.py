"""The monitor against independent observers: iperf3, ss(8) and tbf's counters.

Real kernel, real flows, in network namespaces (needs root: `kernel` marker).
"""

from __future__ import annotations

import os
import secrets
import statistics
import subprocess
import time

import pytest

from ccswitch.dataplane import DataPlane
from ccswitch.host import cgroup2_root
from ccswitch.testbed.runs.iperf import start_flow, start_server
from ccswitch.testbed.runs.netns import entered, nsenter_argv

from helpers import sample_for, ss_info

pytestmark = pytest.mark.kernel
PORT, CPORT = 5301, 42001


def _weighted_rate(rows: list[dict], key: str) -> float:
    return sum(r[key] * r["interval_s"] for r in rows) / sum(r["interval_s"] for r in rows)


@pytest.mark.parametrize("bitrate", [None, "20M"], ids=["bulk", "app-limited-20M"])
def test_goodput_matches_iperf3(bottleneck, iperf3, bitrate) -> None:
    """Monitor goodput over the steady part of a flow is within 5% of iperf3's.

    The app-limited case makes sure agreement does not just come from both
    seeing the bottleneck rate.  Seconds 2..7 of a 9 s flow are compared:
    the first second holds slow start, the last the teardown.
    """
    with start_server(bottleneck.receiver, PORT, bind=bottleneck.receiver_addr), \
            entered(bottleneck.sender), DataPlane(pcc=False) as dp:
        dp.sample()
        flow = start_flow(bottleneck.sender, bottleneck.receiver_addr, PORT, cca="cubic",
                          seconds=9, cport=CPORT, bitrate=bitrate)
        t0 = time.monotonic()
        time.sleep(2 - (time.monotonic() - t0))
        dp.sample()
        rows = sample_for(dp, 5, CPORT)
        result = flow.wait(timeout=30)
    ours = _weighted_rate(rows, "goodput_bps")
    theirs = statistics.mean(iv.bits_per_second for iv in result.intervals[2:7])
    assert len(rows) >= 4
    assert abs(ours - theirs) / theirs < 0.05, (ours, theirs)
    # throughput adds header overhead on top of goodput: a few percent, never less
    thr = _weighted_rate(rows, "throughput_bps")
    assert 1.0 < thr / ours < 1.06


def test_rtt_matches_ss(bottleneck, iperf3) -> None:
    """srtt and min RTT from the monitor agree with `ss -ti`.

    min RTT is a windowed minimum, stable once the flow runs: it must match ss
    to ss's 1 us print resolution on every read.  srtt moves with every ACK
    (CUBIC's sawtooth through the queue), and ss runs as a separate process
    (20-50 ms with nsenter on a loaded machine), so the monitor reads right
    before and right after ss and ss must fall within that bracket widened by
    10% or 1 ms, on at least 5 of 7 reads.  A wrong field, unit or scale fails
    every read; a burst of ACKs between the reads can only fail one.
    """
    def record(dp: DataPlane) -> dict | None:
        rec = [r for r in dp.monitor.snapshot() if r["sport"] == CPORT]
        return rec[0] if rec else None

    with start_server(bottleneck.receiver, PORT, bind=bottleneck.receiver_addr), \
            entered(bottleneck.sender), DataPlane(pcc=False) as dp:
        flow = start_flow(bottleneck.sender, bottleneck.receiver_addr, PORT, cca="cubic",
                          seconds=7, cport=CPORT)
        time.sleep(2)
        reads = []
        for _ in range(7):
            before = record(dp)
            ss = ss_info(bottleneck.sender, CPORT)
            after = record(dp)
            if before is not None and after is not None and "rtt_ms" in ss and "minrtt_ms" in ss:
                reads.append((before, ss, after))
            time.sleep(0.4)
        flow.wait(timeout=30)
    assert len(reads) >= 5
    in_bracket = 0
    for before, ss, after in reads:
        assert abs(after["min_rtt_us"] / 1e3 - ss["minrtt_ms"]) <= 0.0011, (after["min_rtt_us"], ss)
        lo, hi = sorted((before["srtt_us"] / 1e3, after["srtt_us"] / 1e3))
        tol = max(0.1 * ss["rtt_ms"], 1.0)
        in_bracket += lo - tol <= ss["rtt_ms"] <= hi + tol
    srtts = [(b["srtt_us"] / 1e3, s["rtt_ms"], a["srtt_us"] / 1e3) for b, s, a in reads]
    assert in_bracket >= len(reads) - 2, srtts


@pytest.mark.bottleneck(rate_mbit=20, limit_packets=10, router=True)
def test_loss_counter_rises_when_tbf_drops(bottleneck, iperf3) -> None:
    """A 10-packet tbf queue on a router overflows under CUBIC: the monitor sees the loss."""
    with start_server(bottleneck.receiver, PORT, bind=bottleneck.receiver_addr), \
            entered(bottleneck.sender), DataPlane(pcc=False) as dp:
        dp.sample()
        drops_before = bottleneck.drops()
        flow = start_flow(bottleneck.sender, bottleneck.receiver_addr, PORT, cca="cubic",
                          seconds=5, cport=CPORT)
        rows = sample_for(dp, 4.5, CPORT)
        flow.wait(timeout=30)
        drops = bottleneck.drops() - drops_before
    assert drops > 0
    assert sum(r["retrans_segs"] for r in rows) > 0
    assert sum(r["lost_segs"] for r in rows) > 0
    assert max(r["loss_rate"] for r in rows) > 0


def test_jitter_netns_isolation_and_preexisting_flows(bottleneck, iperf3) -> None:
    """A flow started before the monitor is sampled with jitter; other netns are ignored.

    The receiver namespace's sockets (iperf3 server side) must not appear; the
    full walk adopts the pre-existing flow into the tracked set (the socket
    storage the per-tick pass iterates), which holds only this namespace's.
    """
    with start_server(bottleneck.receiver, PORT, bind=bottleneck.receiver_addr):
        flow = start_flow(bottleneck.sender, bottleneck.receiver_addr, PORT, cca="bbr",
                          seconds=6, cport=CPORT)
        time.sleep(1.5)  # established long before the monitor attaches
        with entered(bottleneck.sender), DataPlane(pcc=False) as dp:
            dp.sample()
            time.sleep(1)
            dp.sample()
            rows = sample_for(dp, 2, CPORT)
            all_rows = dp.sample().to_pylist()
            tracked = dp.monitor.snapshot(full=False)  # the socket-storage pass alone
            ours = dp.monitor.netns_cookie
        flow.wait(timeout=30)
    assert rows, "pre-existing flow not sampled"
    assert all(r["rtt_samples"] > 0 and r["jitter_us"] == r["jitter_us"] for r in rows)
    assert all(r["netns_cookie"] == ours for r in all_rows)
    assert not [r for r in all_rows if r["sport"] == PORT]  # server side lives elsewhere
    # the full walk adopted the pre-existing flow into the tracked set; nothing of another netns is tracked
    assert {int(c) for c in tracked["cookie"]} <= {r["flow_id"] for r in all_rows}
    assert set(tracked["netns_cookie"].tolist()) == {ours}
    assert CPORT in set(tracked["sport"].tolist())


def test_cgroup_and_tuple_identify_the_owner(bottleneck, iperf3, tmp_path) -> None:
    """A flow started inside a fresh cgroup v2 group carries that group's id and its 4-tuple."""
    group = os.path.join(cgroup2_root(), f"ccs-test-{secrets.token_hex(3)}")
    os.mkdir(group)
    group_id = os.stat(group).st_ino  # cgroup v2 id = kernfs inode number
    try:
        with start_server(bottleneck.receiver, PORT, bind=bottleneck.receiver_addr), \
                entered(bottleneck.sender), DataPlane(pcc=False) as dp:
            client = subprocess.Popen(nsenter_argv(bottleneck.sender, [
                "sh", "-c", f'echo $$ > {group}/cgroup.procs && exec iperf3 -c '
                            f'{bottleneck.receiver_addr} -p {PORT} --cport {CPORT} -t 3']),
                stdout=subprocess.DEVNULL)
            dp.sample()
            rows = sample_for(dp, 2, CPORT)
            client.wait(timeout=30)
    finally:
        os.rmdir(group)
    assert rows
    r = rows[-1]
    assert r["cgroup_id"] == group_id
    assert (r["src"], r["sport"], r["dst"], r["dport"]) == (
        bottleneck.sender_addr, CPORT, bottleneck.receiver_addr, PORT)


def test_kernel_refusing_the_tracked_pass_falls_back_to_the_full_walk(bottleneck, iperf3, monkeypatch,
                                                                     caplog) -> None:
    """A kernel that refuses iter/bpf_sk_storage_map (EPERM) still gets every flow, from the full walk.

    The refusal is forced here by failing the first load with EPERM (some kernels do it for real:
    a 6.18 Firecracker build refuses every map-element iterator even to root).  One warning names
    it; snapshots of both kinds are full walks that carry the flow.
    """
    import errno
    import logging

    from ccswitch.bpf import libbpf, monitor

    real_load, calls = libbpf.BpfObject.load, []

    def refuse_first(self: libbpf.BpfObject) -> None:
        calls.append(self.path.name)
        if len(calls) == 1 and self.path == monitor.OBJ_PATH:
            err = libbpf.BpfError("load of monitor.bpf.o: Operation not permitted (errno 1)")
            err.errno = errno.EPERM
            raise err
        real_load(self)

    monkeypatch.setattr(libbpf.BpfObject, "load", refuse_first)
    with caplog.at_level(logging.WARNING, logger="ccswitch.monitor"), \
            start_server(bottleneck.receiver, PORT, bind=bottleneck.receiver_addr), \
            entered(bottleneck.sender), DataPlane(pcc=False) as dp:
        assert dp.monitor is not None and not dp.monitor.tracked
        flow = start_flow(bottleneck.sender, bottleneck.receiver_addr, PORT, cca="cubic", seconds=3, cport=CPORT)
        time.sleep(1)
        dp.sample()
        rows = sample_for(dp, 1, CPORT)
        pass_ports = set(dp.monitor.snapshot(full=False)["sport"].tolist())
        flow.wait(timeout=30)
    assert rows and rows[-1]["goodput_bps"] > 0
    assert CPORT in pass_ports
    refusals = [r for r in caplog.records if "refuses the socket-storage iterator" in r.getMessage()]
    assert len(refusals) == 1


def test_records_past_the_mapped_slots_come_through_the_iterator_output() -> None:
    """A pass with more records than the mapped array holds returns every socket once, by both walks.

    The array is cut to 3 slots so that 300 loopback sockets (both ends live in the namespace) send
    297 records through the iterator's output: 71 KB, more than two 32 KiB reads, so the kernel also
    restarts the walk and shows the records that did not fit again (counted twice in the pass's
    count, which user space must not trust past the slots).  The reference is a monitor with the
    default array, where every record fits; it maps 256 slots at first and more once a pass fills
    them (the mapping is resident memory).
    """
    import socket

    from ccswitch.bpf.monitor import Monitor
    from ccswitch.testbed.runs.netns import create_netns, delete_netns

    ns = f"ccs-{secrets.token_hex(3)}-slots"
    create_netns(ns)
    try:
        with entered(ns):
            subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
            srv = socket.create_server(("127.0.0.1", 0), backlog=300)
            clients = [socket.create_connection(srv.getsockname()) for _ in range(150)]
            accepted = [srv.accept()[0] for _ in range(150)]
            try:
                with Monitor() as ref:
                    mapped_at_start = len(ref._slots)
                    ref_cookies = set(ref.snapshot(full=True)["cookie"].tolist())
                    mapped_after = len(ref._slots)
                with Monitor(record_slots=3) as mon:
                    full = mon.snapshot(full=True)
                    tracked = mon.snapshot(full=False)
                    stamps = tracked["ts_ns"].copy()
                    time.sleep(0.01)
                    mon.snapshot(full=False)  # rewrites the slots with later stamps
            finally:
                for s in clients + accepted + [srv]:
                    s.close()
    finally:
        delete_netns(ns)
    assert len(ref_cookies) == 300 and (mapped_at_start, mapped_after) == (256, 512)
    for records in (full, tracked):
        cookies = records["cookie"].tolist()
        assert len(cookies) == 300 and set(cookies) == ref_cookies  # each socket once, none lost
    assert (tracked["ts_ns"] == stamps).all()  # the caller's copy, not a view of the live slots


def test_a_pass_over_one_socket_and_over_none(bottleneck) -> None:
    """One socket in the namespace gives one record, none gives none, by both walks.

    The two look alike to the iterator program (its last call comes with seq_num 0 in both), so
    the pass's record count must not be reset by the program from seq_num: it was, once, and a
    lone flow was never sampled.  Also checks that a later empty pass does not repeat the last
    pass's records from the mapped array.
    """
    import socket

    from ccswitch.bpf.monitor import Monitor

    with entered(bottleneck.receiver):
        ls = socket.create_server((bottleneck.receiver_addr, PORT))
    try:
        with entered(bottleneck.sender), Monitor() as mon:
            assert len(mon.snapshot(full=True)) == 0 and len(mon.snapshot(full=False)) == 0
            with socket.create_connection((bottleneck.receiver_addr, PORT)) as s:
                port = s.getsockname()[1]
                one_full, one_tracked = mon.snapshot(full=True), mon.snapshot(full=False)
            s.close()
            time.sleep(0.2)  # FIN_WAIT/TIME_WAIT: not a full socket any more, or gone
            after = [r for r in mon.snapshot(full=True) if r["state"] == 1]  # ESTABLISHED left over?
    finally:
        ls.close()
    assert one_full["sport"].tolist() == [port] and one_tracked["sport"].tolist() == [port]
    assert not after
