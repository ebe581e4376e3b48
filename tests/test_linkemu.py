"""linkemu, the userspace link emulator (testbed/linkemu): its Rust unit tests, the CLI
contract, and traffic through the real emulator between namespaces.

The kernel tests build a client/router/server topology (ccswitch.testbed.runs.topology),
run the release binary in the router with :class:`ccswitch.testbed.runs.emulator.Emulator`
and check what the endpoints see: ping RTT equals the configured delay within 1 ms, an
iperf3 UDP flow at twice the configured rate is delivered at the rate within 3 %, and
nothing (process, namespace) is left behind.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ccswitch.testbed.runs.emulator import CRATE_DIR, Emulator, EmulatorError, binary_path, emulator_config, link
from ccswitch.testbed.runs.iperf import start_flow, start_server
from ccswitch.testbed.runs.netns import entered, run_in
from ccswitch.testbed.runs.topology import Topology

PAYLOAD = 1400
IP_UDP = 28  # the emulator charges IP bytes: payload + IPv4 + UDP headers


@pytest.fixture
def linkemu(require: Callable[[bool, str], None]) -> Path:
    path = binary_path()
    require(path.is_file(), f"linkemu is not built ({path}); run scripts/setup.sh")
    return path


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


# ------------------------------------------------------------- no kernel ---


@pytest.mark.slow
def test_cargo_unit_tests(require: Callable[[bool, str], None]) -> None:
    """The Rust unit tests (virtual time: pfifo limit, rate/delay arithmetic, trace
    replay, aggregation bursts, CoDel, loss models, config errors)."""
    cargo = shutil.which("cargo")
    require(cargo is not None, "cargo is not installed")
    assert cargo is not None
    cp = subprocess.run([cargo, "test", "--quiet", "--manifest-path", str(CRATE_DIR / "Cargo.toml")],
                        capture_output=True, text=True, timeout=900, check=False)
    assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-3000:]
    assert "test result: ok" in cp.stdout


BASE_CONFIG = {
    "client_ifs": ["c1"],
    "server_if": "srv",
    "uplink": {"rate_mbit": 100.0, "delay_ms": 5, "qdisc": {"kind": "pfifo", "limit_pkts": 50}},
    "downlink": {"rate_mbit": 100.0, "delay_ms": 5, "qdisc": {"kind": "pfifo", "limit_pkts": 50}},
}


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"uplink": {**BASE_CONFIG["uplink"], "rate_mbit": -1}}, "uplink.rate_mbit"),
        ({"downlink": {**BASE_CONFIG["downlink"], "qdisc": {"kind": "pfifo", "limit_pkts": "x"}}},
         "downlink.qdisc.limit_pkts"),
        ({"downlink": {**BASE_CONFIG["downlink"], "qdisc": {"kind": "red"}}}, "downlink.qdisc.kind"),
        ({"uplink": {**BASE_CONFIG["uplink"], "loss": {"model": "gilbert", "p_gb": 2, "p_bg": 0.1}}},
         "uplink.loss.p_gb"),
        ({"wifi": {"clients": []}}, "wifi.clients"),
        ({"server_if": None}, "server_if"),
        ({"stats": {"dir": "/tmp/x", "intervall_ms": 5}}, "stats.intervall_ms"),
        ({"uplink": {**BASE_CONFIG["uplink"], "trace": "/nonexistent.trace", "rate_mbit": None}}, "uplink.trace"),
    ],
)
def test_bad_config_exits_2_naming_the_field(linkemu: Path, tmp_path: Path, patch: dict, field: str) -> None:
    cfg = {**BASE_CONFIG, **patch}
    cfg = {k: v for k, v in cfg.items() if v is not None}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    cp = subprocess.run([str(linkemu), "--config", str(path)], capture_output=True, text=True, timeout=10, check=False)
    assert cp.returncode == 2, cp.stderr
    assert cp.stdout == ""
    lines = cp.stderr.strip().splitlines()
    assert len(lines) == 1, cp.stderr
    assert re.match(rf"linkemu: config error: {re.escape(field)}: \S", lines[0]), lines[0]


def test_check_accepts_a_good_config(linkemu: Path, tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    trace = tmp_path / "link.trace"
    trace.write_text("".join(f"{ms}\n" for ms in range(1, 101)))
    cfg = {**BASE_CONFIG, "downlink": {"trace": str(trace), "delay_ms": 5}}
    path.write_text(json.dumps(cfg))
    cp = subprocess.run([str(linkemu), "--config", str(path), "--check"], capture_output=True, text=True,
                        timeout=10, check=False)
    assert cp.returncode == 0, cp.stderr


# ------------------------------------------------------------------ kernel ---


def _ping_rtts(ns: str, addr: str, count: int = 20) -> list[float]:
    """RTTs (ms) of *count* pings, after one warm-up ping that resolves ARP."""
    run_in(ns, ["ping", "-n", "-c", "1", "-W", "2", addr], capture_output=True, check=False)
    cp = run_in(ns, ["ping", "-n", "-c", str(count), "-i", "0.05", "-W", "2", addr],
                capture_output=True, text=True, check=False)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    return [float(m) for m in re.findall(r"time=([\d.]+) ms", cp.stdout)]


@pytest.mark.kernel
def test_missing_interface_is_a_config_error(linkemu: Path) -> None:
    with Topology(1) as topo:
        cfg = emulator_config([*topo.client_ifs, "nope0"], topo.server_if)
        with pytest.raises(EmulatorError, match=r"refused its config: .*client_ifs\[1\]: no interface \"nope0\""):
            Emulator(topo.router, cfg).start()


@pytest.mark.kernel
def test_ping_rtt_equals_configured_delay(linkemu: Path, require: Callable[[bool, str], None]) -> None:
    require(shutil.which("ping") is not None, "ping (iputils-ping) is not installed")
    up_ms, down_ms = 3.0, 7.0
    with Topology(2) as topo:
        cfg = emulator_config(topo.client_ifs, topo.server_if, uplink=link(100, up_ms, limit_pkts=50),
                              downlink=link(100, down_ms, limit_pkts=50), per_packet=True)
        with Emulator(topo.router, cfg) as emu:
            pid = emu.pid
            rtts = {c: _ping_rtts(ns, topo.server_addr) for c, ns in enumerate(topo.clients)}
        assert pid is not None and not _pid_alive(pid)
    assert emu.returncode == 0
    want = up_ms + down_ms
    for c, r in rtts.items():
        assert len(r) == 20, r
        # Never early (a packet cannot leave linkemu before its delay; 0.3 ms allows ping's own timestamping), 16 of
        # 20 within 1 ms and the median within 0.5 ms.  No upper bound per ping: a few pings delayed by the
        # scheduler on a shared 2-core VM are noise, not linkemu's delay (seen: 11.9 ms among nineteen 10.1 ms
        # under load; 12.2, 12.7, and 16.1 ms among 10.1-10.8 ms in CI runs of 26-27 Nov).  A wrong delay moves
        # the median, and linkemu's own p50 below is held to 50 us
        assert min(r) > want - 0.3, f"client {c}: RTTs {r} ms, configured {want} ms (a ping came back early)"
        assert sum(abs(x - want) < 1.0 for x in r) >= 16, f"client {c}: RTTs {r} ms, configured {want} ms"
        assert abs(sorted(r)[len(r) // 2] - want) < 0.5, f"client {c}: RTTs {r} ms, configured {want} ms"
    s = emu.summary
    assert s is not None
    assert s["uplink"]["packets_out"] == 42  # with the warm-up pings
    assert [c["packets_out"] for c in s["downlink"]["clients"]] == [21, 21]
    assert abs(s["uplink"]["delay_us"]["p50"] - up_ms * 1000) < 50
    assert s["passthrough"]["frames"] >= 2  # ARP
    rows = emu.packets()
    assert {r["direction"] for r in rows} == {"uplink", "downlink"}
    assert all(r["verdict"] == "forward" for r in rows)


@pytest.mark.kernel
@pytest.mark.parametrize("direction", ["uplink", "downlink"])
def test_udp_at_twice_the_rate_is_delivered_at_the_rate(linkemu: Path, iperf3: str, direction: str) -> None:
    rate = 20.0
    with Topology(1) as topo:
        cfg = emulator_config(topo.client_ifs, topo.server_if, uplink=link(rate, 2, limit_pkts=100),
                              downlink=link(rate, 2, limit_pkts=100))
        with Emulator(topo.router, cfg) as emu, start_server(topo.server, 5201, bind=topo.server_addr):
            extra = ["-l", str(PAYLOAD), "-w", "4M"] + (["-R"] if direction == "downlink" else [])
            res = start_flow(topo.clients[0], topo.server_addr, 5201, udp=True, bitrate=2 * rate * 1e6,
                             seconds=5, extra_args=extra).wait()
    delivered = res.receiver_mbps * (PAYLOAD + IP_UDP) / PAYLOAD
    assert res.sender_mbps > 1.8 * rate, f"iperf3 only sent {res.sender_mbps:.1f} Mbit/s"
    assert abs(delivered / rate - 1) < 0.03, f"delivered {delivered:.2f} Mbit/s at {rate} configured"
    assert emu.summary is not None
    d = emu.summary[direction]
    assert d["drops"]["queue"] > 1000  # half of what was offered
    rows = [r for r in emu.intervals() if r["direction"] == direction and r["client"] == "-1"]
    steady = [float(r["rate_mbit"]) for r in rows[1:-1] if float(r["rate_mbit"]) > 0]
    assert steady and all(abs(x / rate - 1) < 0.01 for x in steady[1:-1] or steady), steady


@pytest.mark.kernel
def test_sigterm_writes_outputs_and_counts_oversize(linkemu: Path, tmp_path: Path) -> None:
    with Topology(1) as topo:
        # Segmentation offload on at the client: its TCP segments reach the
        # router as GSO super-packets, which the emulator must drop and count.
        run_in(topo.clients[0], ["ethtool", "-K", topo.client_dev, "tso", "on", "gso", "on"],
               capture_output=True, check=False)
        cfg = emulator_config(topo.client_ifs, topo.server_if, uplink=link(None, 1), downlink=link(None, 1),
                              interval_ms=100)
        emu = Emulator(topo.router, cfg, stats_dir=tmp_path / "stats")
        with emu:
            assert emu.running
            with entered(topo.server):
                srv = socket.create_server((topo.server_addr, 7000))
            with entered(topo.clients[0]):
                cli = socket.socket()
            cli.settimeout(3)
            try:
                cli.connect((topo.server_addr, 7000))
                cli.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
                cli.sendall(b"x" * 200_000)
            except OSError:
                pass  # the big segments never arrive: the transfer may stall
            finally:
                cli.close()
                srv.close()
            time.sleep(0.35)  # a few 100-ms intervals
        assert emu.returncode == 0
        assert not _pid_alive(emu.pid or 0)
    s = json.loads((tmp_path / "stats" / "summary.json").read_text())
    assert s["uplink"]["drops"]["oversize"] > 0, s["uplink"]["drops"]
    assert s["run"]["duration_s"] > 0
    header = (tmp_path / "stats" / "intervals.csv").read_text().splitlines()[0]
    assert header.startswith("t_s,direction,client,")
    assert len(emu.intervals()) >= 6


@pytest.mark.kernel
def test_wifi_medium_through_the_real_emulator(linkemu: Path, require: Callable[[bool, str], None]) -> None:
    require(shutil.which("ping") is not None, "ping (iputils-ping) is not installed")
    with Topology(2) as topo:
        wifi = {"clients": [{"phy_rate_mbit": 300.0}, {"phy_rate_mbit": 50.0}],
                "aggregation": {"max_frames": 32, "max_bytes": 65535, "max_wait_us": 0}}
        cfg = emulator_config(topo.client_ifs, topo.server_if, uplink=link(100, 5), downlink=link(100, 5), wifi=wifi)
        with Emulator(topo.router, cfg) as emu:
            rtts = [_ping_rtts(ns, topo.server_addr, 10) for ns in topo.clients]
    # 10 ms of wire delay plus two WiFi exchanges (access + airtime), each well under 1 ms idle: no ping
    # below the wire delay, the median of each client within 10-12 ms, and 8 of its 10 pings too (a CI run
    # of 26 Nov had one ping of 20 above 12 ms among 10.4-11.0: the scheduler of a shared 2-core VM, as in
    # test_ping_rtt_equals_configured_delay above; a missing WiFi exchange or a wrong delay moves the median)
    for r in rtts:
        assert len(r) == 10 and min(r) > 10.0, rtts
        assert 10.0 < statistics.median(r) < 12.0 and sum(x < 12.0 for x in r) >= 8, rtts
    assert emu.summary is not None
    w = emu.summary["wifi"]
    assert w["airtime_utilisation"] > 0
    assert all(c["aggregates"]["uplink"] >= 10 and c["aggregates"]["downlink"] >= 10 for c in w["clients"])
