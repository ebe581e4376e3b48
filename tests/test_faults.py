"""Injected faults against a running ccswitchd with a live managed flow (issue 12).

Each: the daemon keeps running, the flow keeps sending on a working CCA, one
log line names the fault, and the daemon recovers when the fault is gone.

* the monitor's sockops link detached from outside (bpftool link detach);
* PCC unregistered mid-flow (its struct_ops link detached from outside);
* the policy file replaced with garbage, then SIGHUP;
* the control socket flooded by 1,000 clients at once;
* the recorder's disk full (a 1 MB tmpfs filled up under --record/--decisions).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
from test_daemon import STATIC, Daemon, data_flows, iperf, server, wait_for  # noqa: F401  (server: fixture)

from ccswitch.bpf.libbpf import held_ids
from ccswitch.daemon.protocol import request
from ccswitch.models.policy import DEFAULT_POLICY

pytestmark = pytest.mark.kernel


def _links_of(pid: int) -> list[dict]:
    """The BPF links the process holds (bpftool's view)."""
    out = []
    for lid in held_ids(pid, "link"):
        show = subprocess.run(["bpftool", "-j", "link", "show", "id", str(lid)], capture_output=True, text=True)
        if show.returncode == 0:
            out.append(json.loads(show.stdout))
    return out


def _still_sending(d: Daemon, port: int) -> list[dict]:
    return wait_for(lambda: data_flows(d, port), 10, "the flow sending", d)


def test_sockops_link_detached_from_outside_is_reattached(bottleneck, server, tmp_path: Path) -> None:  # noqa: F811
    d = Daemon(bottleneck.sender, tmp_path, STATIC)
    client = iperf(bottleneck, server, 14, "bbr")
    try:
        wait_for(lambda: [r for r in data_flows(d, server) if r["cca"] == "cubic"], 12, "the flow on cubic", d)
        (sockops,) = [ln for ln in _links_of(d.proc.pid) if ln.get("type") == "cgroup"]
        subprocess.run(["bpftool", "link", "detach", "id", str(sockops["id"])], check=True)
        wait_for(lambda: "sockops link was detached from outside" in d.log(), 10, "the warning", d)
        again = [ln for ln in _links_of(d.proc.pid) if ln.get("type") == "cgroup" and ln.get("cgroup_id")]
        assert len(again) == 1 and again[0]["id"] != sockops["id"], again
        assert d.log().count("sockops link was detached from outside") == 1
        rows = _still_sending(d, server)
        assert rows[0]["cca"] == "cubic" and rows[0]["throughput_bps"] > 1e6
        assert request(d.sock, "status")["flows"] >= 1
    finally:
        client.wait(30)
        assert d.stop() == 0, d.log()


def test_pcc_unregistered_mid_flow_is_registered_again(bottleneck, server, tmp_path: Path) -> None:  # noqa: F811
    """The daemon registered PCC and a flow runs it; someone detaches PCC's struct_ops link.  The kernel
    keeps the flow's reference (it keeps sending), the daemon registers PCC again before its next decision
    (one warning), and a switch to pcc works again."""
    from ccswitch.bpf.pcc import OWN
    from ccswitch.host import available_ccas

    deadline = time.monotonic() + 10  # a registrar from an earlier test may still be exiting
    while "pcc" in available_ccas() and time.monotonic() < deadline:
        time.sleep(0.2)
    if "pcc" in available_ccas():
        pytest.fail("pcc is already registered by another process (a running ccswitchd or testbed run?): "
                    "this test needs the daemon under test to own the registration; stop the other one")
    d = Daemon(bottleneck.sender, tmp_path, STATIC.replace('static_cca = "cubic"', 'static_cca = "pcc"'))
    client = iperf(bottleneck, server, 16, "cubic")
    try:
        wait_for(lambda: [r for r in data_flows(d, server) if r["cca"] == "pcc"], 12, "the flow on pcc", d)
        assert request(d.sock, "status")["pcc"] == OWN
        (ops,) = [ln for ln in _links_of(d.proc.pid) if ln.get("type") == "struct_ops"]
        subprocess.run(["bpftool", "link", "detach", "id", str(ops["id"])], check=True)
        wait_for(lambda: "pcc re-registered" in d.log(), 10, "the re-registration", d)
        assert d.log().count("pcc re-registered") == 1 and "pcc" in available_ccas()
        again = [ln for ln in _links_of(d.proc.pid) if ln.get("type") == "struct_ops"]
        assert any(ln["id"] != ops["id"] for ln in again), again
        rows = _still_sending(d, server)
        assert rows[0]["throughput_bps"] > 1e6 and rows[0]["cca"] == "pcc"
        off = request(d.sock, "switch", flow=rows[0]["flow_id"], cca="cubic")  # off and back on the new pcc
        back = request(d.sock, "switch", flow=rows[0]["flow_id"], cca="pcc")
        assert off["ok"] and off["cca_after"] == "cubic" and back["ok"] and back["cca_after"] == "pcc", (off, back)
        assert d.proc.poll() is None
    finally:
        client.wait(30)
        assert d.stop() == 0, d.log()


def test_garbage_policy_then_sighup_keeps_the_running_policy(bottleneck, server, tmp_path: Path) -> None:  # noqa: F811
    policy = tmp_path / "policy.json"
    shutil.copy(DEFAULT_POLICY, policy)
    cfg = STATIC.replace('kind = "static"', f'kind = "dqn"\nfile = "{policy}"').replace('static_cca = "cubic"\n', "")
    d = Daemon(bottleneck.sender, tmp_path, cfg)
    client = iperf(bottleneck, server, 12, "bbr")
    try:
        wait_for(lambda: data_flows(d, server), 10, "the flow", d)
        before = request(d.sock, "status")["policy"]
        policy.write_text("{garbage")
        d.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "reload failed, keeping the running config" in d.log(), 10, "the reload error", d)
        assert d.proc.poll() is None
        assert request(d.sock, "status")["policy"] == before
        assert _still_sending(d, server)[0]["throughput_bps"] > 1e6
        assert d.log().count("reload failed") == 1
        shutil.copy(DEFAULT_POLICY, policy)  # the fault is gone
        d.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "msg=reloaded" in d.log(), 10, "the reload", d)
        assert request(d.sock, "status")["policy"]["kind"] == "dqn"
    finally:
        client.wait(30)
        assert d.stop() == 0, d.log()


TICK_S = 0.2  # daemon.tick_s of tests/fixtures/daemon-static-fast.toml (STATIC)


def test_control_socket_flood_of_1000_clients(bottleneck, server, tmp_path: Path) -> None:  # noqa: F811
    """1,000 connections at once, half silent, half sending a request: the daemon keeps ticking
    through it (requests are read without blocking, silent connections dropped after 2 s, more
    than 64 waiting get a one-line "busy"), logs the flood once, answers normally once it is
    over, and holds no more file descriptors than before."""
    d = Daemon(bottleneck.sender, tmp_path, STATIC)
    client = iperf(bottleneck, server, 14, "bbr")
    socks: list[socket.socket] = []
    lock = threading.Lock()
    try:
        wait_for(lambda: [r for r in data_flows(d, server) if r["cca"] == "cubic"], 12, "the flow on cubic", d)
        fds0 = len(os.listdir(f"/proc/{d.proc.pid}/fd"))
        ticks0, t0 = request(d.sock, "status")["ticks"], time.monotonic()

        def connect(i: int) -> None:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(5)
            try:
                s.connect(d.sock)
                if i % 2:
                    s.sendall(b'{"op": "status", "args": {}}\n')
            except OSError:
                s.close()
                return
            with lock:
                socks.append(s)

        threads = [threading.Thread(target=connect, args=(i,)) for i in range(1000)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for s in socks:
            s.close()
        socks.clear()
        st = wait_for(lambda: _status_or_none(d), 15, "an answer after the flood", d)
        elapsed = time.monotonic() - t0
        # The loop kept its 0.2 s tick through the flood: at least half the ticks a steady loop makes
        # (margin for a loaded machine; measured 0.8-1.1 x window / tick beside two busy loops on 2
        # cores).  A steady loop makes at least floor(window / tick) ticks in any window, so the bound
        # is half of that, not half of window / tick: on an idle host the flood is over in 0.12-0.2 s,
        # often with no tick in it, which is no sign of starvation (the old bound failed there).  A
        # 1.5 s stall of the loop in the flood still fails this (measured: 1 tick in 1.55 s).
        assert st["ticks"] - ticks0 >= int(elapsed / TICK_S) // 2, (st["ticks"] - ticks0, elapsed)
        assert d.log().count("control socket flooded") == 1  # the fault, named once
        assert _still_sending(d, server)[0]["cca"] == "cubic"
        ticks1, t1 = request(d.sock, "status")["ticks"], time.monotonic()
        time.sleep(2.5)  # waiting connections time out
        fds1 = len(os.listdir(f"/proc/{d.proc.pid}/fd"))
        # ...and keeps it after the flood: this window is long enough (>= 12 ticks) to measure a rate
        after, elapsed = request(d.sock, "status")["ticks"] - ticks1, time.monotonic() - t1
        assert after >= int(elapsed / TICK_S) // 2, (after, elapsed)
        assert fds1 <= fds0 + 2, (fds0, fds1)
        assert d.proc.poll() is None
    finally:
        for s in socks:
            s.close()
        client.wait(30)
        assert d.stop() == 0, d.log()


def _status_or_none(d: Daemon) -> dict | None:
    try:
        return request(d.sock, "status", timeout=5)
    except Exception:
        return None


def test_recorder_disk_full_pauses_recording_and_resumes(bottleneck, server, tmp_path: Path) -> None:  # noqa: F811
    out = tmp_path / "small"
    out.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "ccs-test-full", str(out)], check=True)
    try:
        d = Daemon(bottleneck.sender, tmp_path, STATIC, out=out)
        client = iperf(bottleneck, server, 16, "bbr")
        try:
            wait_for(lambda: [r for r in data_flows(d, server) if r["cca"] == "cubic"], 12, "the flow on cubic", d)
            filler = out / "filler"
            subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=64k", "count=64"], capture_output=True)
            wait_for(lambda: "recorder: cannot write record file" in d.log(), 10, "the disk-full warning", d)
            assert d.proc.poll() is None and d.log().count("recorder: cannot write record file") == 1
            assert _still_sending(d, server)[0]["cca"] == "cubic"
            assert request(d.sock, "status")["ticks"] > 0
            filler.unlink()  # the fault is gone
            wait_for(lambda: "recorder: writing the record file again" in d.log(), 12, "recording resumed", d)
            part = out / "r1.part1.parquet"
            assert part.exists()
        finally:
            client.wait(30)
            assert d.stop() == 0, d.log()
        import pyarrow.parquet as pq

        assert pq.read_table(part).num_rows > 0  # the continuation is a complete file
    finally:
        subprocess.run(["umount", str(out)], check=False)
