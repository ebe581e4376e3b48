"""ccswitchd with exactly the capabilities its systemd unit grants, and with one fewer.

systemd runs daemon/ccswitchd.service as root with CapabilityBoundingSet= as the bounding set,
AmbientCapabilities= as the ambient (and inheritable) set and NoNewPrivileges=yes; for uid 0 the
permitted and effective sets after execve are then the bounding set.  util-linux `setpriv`
builds the same process (--bounding-set, --inh-caps, --ambient-caps, --no-new-privs), which the
first test checks in /proc/PID/status.  The capability list is read from the unit file, so the
unit stays the one definition: a capability added to or removed from it changes what is tested.

* With the unit's set the daemon starts (READY: the control socket answers), monitors a real
  iperf3 flow in a sender namespace, switches it (static policy: bbr -> cubic through the
  guard; then a manual switch to pcc, the struct_ops algorithm) and stops on SIGTERM with exit 0.
* Without any one of the unit's capabilities (one parametrised case each) it refuses to start:
  exit 1, one line on stderr naming the missing capability (`missing CAP_X in this process'
  effective capabilities`, not the generic "run as root" list), no traceback, no control socket.

Both check that nothing is left behind (`leftovers`): no BPF link created while the daemon ran
that no live process holds, no congestion control registered by a struct_ops map of that time
without a link, no new pin in /sys/fs/bpf, and (first test) none of the links the daemon held
while running (monitor, iterators, PCC's struct_ops link).  Other tests and daemons run
concurrently on this machine, so objects are attributed by id range (ids only grow) and by their
holders in /proc/*/fdinfo.  The kernel frees a closed link after an RCU grace period, so the
check polls for up to 5 s (it normally passes at once).

Timing tolerances: the daemon decides every 0.2 s tick (static policy, 2 consecutive decisions,
1 s dwell), so the switch to cubic is due ~1.5 s after the flow is 0.5 s old; the 20 s wait
leaves a 10x margin for a loaded 2-core machine (ticks of 100+ ms), and every wait is a poll
with a deadline (tests/test_daemon.py's wait_for).  Runtime: ~15 s for the first test, ~2-4 s
(one Python start-up) per capability in the second.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import test_daemon
from test_daemon import STATIC, Daemon, bpf_programs_of, data_flows, iperf, wait_for
from test_daemon import server as server  # the fixture, reused

from ccswitch.testbed.runs.netns import nsenter_argv

from helpers import ss_info

pytestmark = pytest.mark.kernel
REPO = Path(__file__).resolve().parents[1]
UNIT = REPO / "daemon" / "ccswitchd.service"
BPFFS = Path("/sys/fs/bpf")
LEAK_POLL_S = 5.0
START_TIMEOUT_S = 20.0  # a refused start takes 1-4 s (Python start-up, BPF loads) on this loaded machine


def _unit_values(key: str) -> list[str]:
    lines = [ln.split("=", 1)[1].split() for ln in UNIT.read_text().splitlines() if ln.startswith(f"{key}=")]
    assert len(lines) == 1, f"{UNIT.name}: expected one {key}= line, found {len(lines)}"
    return lines[0]


def unit_caps() -> list[str]:
    """The unit's capabilities in setpriv's spelling ("CAP_BPF" -> "bpf"); bounding == ambient."""
    bounding, ambient = _unit_values("CapabilityBoundingSet"), _unit_values("AmbientCapabilities")
    assert sorted(bounding) == sorted(ambient), "the unit should grant as ambient exactly what it bounds"
    return [c.removeprefix("CAP_").lower() for c in bounding]


def setpriv_argv(caps: list[str]) -> list[str]:
    """A root process holding exactly *caps*, as systemd starts the unit."""
    spec = ",".join(["-all", *(f"+{c}" for c in caps)])
    nnp = ["--no-new-privs"] if _unit_values("NoNewPrivileges") == ["yes"] else []
    return ["setpriv", f"--bounding-set={spec}", f"--inh-caps={spec}", f"--ambient-caps={spec}", *nnp, "--"]


def cap_bits() -> dict[str, int]:
    """Capability name -> number (`setpriv --list-caps` lists them in numeric order)."""
    out = subprocess.run(["setpriv", "--list-caps"], capture_output=True, text=True, check=True).stdout
    return {name: i for i, name in enumerate(out.split())}


def proc_caps(pid: int) -> dict[str, int]:
    text = Path(f"/proc/{pid}/status").read_text()
    return {k: int(v, 16) if k.startswith("Cap") else int(v)
            for k, v in re.findall(r"^(Cap\w+|NoNewPrivs):\s+(\S+)$", text, re.M)}


def bpftool_runs() -> bool:
    """bpftool on PATH and working (Ubuntu's /usr/sbin/bpftool wrapper fails without linux-tools-$(uname -r))."""
    return shutil.which("bpftool") is not None and subprocess.run(
        ["bpftool", "version"], capture_output=True, check=False).returncode == 0


@pytest.fixture
def caps(require: Callable[[bool, str], None]) -> list[str]:
    """The unit's capabilities, after checking that this machine can build such a process."""
    require(shutil.which("setpriv") is not None, "setpriv (util-linux) is not installed (run scripts/setup.sh)")
    helptext = subprocess.run(["setpriv", "--help"], capture_output=True, text=True, check=False).stdout
    require("--ambient-caps" in helptext, "setpriv has no --ambient-caps (needs util-linux >= 2.31)")
    require(bpftool_runs(), "bpftool is not installed or does not run (run scripts/setup.sh)")
    wanted = unit_caps()
    bits = cap_bits()
    unknown = [c for c in wanted if c not in bits]
    require(not unknown, f"setpriv does not know {unknown} (needs util-linux >= 2.36 for bpf/perfmon)")
    mine = proc_caps(os.getpid())["CapBnd"]
    lacking = [c for c in wanted if not mine >> bits[c] & 1]
    require(not lacking, f"this test process lacks {lacking} in its bounding set, so it cannot grant the unit's set")
    return wanted


# ------------------------------------------------------------------ leak check
def _bpftool_json(*args: str, check: bool = True) -> list[dict]:
    """bpftool -j output as a list (bpftool 7.1 prints `struct_ops dump` as objects without brackets)."""
    cp = subprocess.run(["bpftool", "-j", *args], capture_output=True, text=True, check=check)
    out = cp.stdout.strip()
    if cp.returncode != 0 or not out:
        return []
    got = json.loads(out if out.startswith("[") else f"[{out}]")
    return got if isinstance(got, list) else [got]


def _fd_holders() -> tuple[set[tuple[str, int]], set[int]]:
    """(kind, id) of every BPF link/map/program a live process holds an fd of, and the maps that
    live struct_ops links register (their fdinfo names the map)."""
    held: set[tuple[str, int]] = set()
    linked: set[int] = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if not os.readlink(f"/proc/{pid}/fd/{fd}").startswith("anon_inode:bpf"):
                    continue
                info = Path(f"/proc/{pid}/fdinfo/{fd}").read_text()
            except OSError:
                continue
            ids = dict(re.findall(r"^(link_id|map_id|prog_id):\s+(\d+)$", info, re.M))
            if "link_id" in ids:
                held.add(("link", int(ids["link_id"])))
                if "map_id" in ids:  # a struct_ops link
                    linked.add(int(ids["map_id"]))
            elif "map_id" in ids:
                held.add(("map", int(ids["map_id"])))
            elif "prog_id" in ids:
                held.add(("prog", int(ids["prog_id"])))
    return held, linked


def _pins() -> set[str]:
    return {str(Path(d, f)) for d, dirs, files in os.walk(BPFFS) for f in [*dirs, *files]}


def _ops_name(map_id: int) -> str | None:
    """The congestion control name a struct_ops map carries ("pcc" for ccs_pcc)."""
    for obj in _bpftool_json("struct_ops", "dump", "id", str(map_id), check=False):  # it may be gone by now
        for key, val in obj.items():
            if key.startswith("bpf_struct_ops_") and isinstance(val, dict):
                return val.get("data", {}).get("name")
    return None


def bpf_baseline() -> dict[str, Any]:
    """Highest link and map ids now (ids only grow), and the pins in bpffs."""
    return {"link": max((o["id"] for o in _bpftool_json("link", "list")), default=0),
            "map": max((o["id"] for o in _bpftool_json("map", "list")), default=0), "pins": _pins()}


def leftovers(base: dict[str, Any], owned: set[tuple[str, int]] = frozenset()) -> list[str]:  # type: ignore[assignment]
    """What a daemon that ran between *base* and now left behind:

    * a BPF link created meanwhile that no live process holds (a link outlives its fds only
      when pinned);
    * a congestion control registered without a link by a struct_ops map created meanwhile
      (a registration that would outlive every process).  A struct_ops map that is neither
      held nor linked but whose algorithm is not registered is an unregistered copy kept by
      sockets still running it (README, "Restart and crash behaviour"): not a leak;
    * a new pin in /sys/fs/bpf;
    * any of *owned* (links the daemon held while it ran) still existing.

    The struct_ops map of a PCC the daemon registered is not required to be gone: once its link
    is closed the algorithm is unregistered, but the map was seen to stay for up to ~20 s after
    the last socket that ran it had closed (the kernel frees it later); a leak would be a
    registration without a link, which the second rule catches.
    """
    end = bpf_baseline()
    deadline = time.monotonic() + LEAK_POLL_S
    while True:
        links = [o for o in _bpftool_json("link", "list") if base["link"] < o["id"] <= end["link"]]
        maps = _bpftool_json("map", "list")
        held, linked = _fd_holders()
        registered = set(Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split())
        left = [f"link {o['id']} ({o.get('type')}), held by no process" for o in links if ("link", o["id"]) not in held]
        linked_names = {_ops_name(i) for i in linked}
        for o in maps:
            if (o.get("type") == "struct_ops" and base["map"] < o["id"] <= end["map"] and ("map", o["id"]) not in held
                    and o["id"] not in linked):
                name = _ops_name(o["id"])
                if name in registered and name not in linked_names:
                    left.append(f"struct_ops map {o['id']} ({o.get('name')}) registers {name} without a link")
        live = {("link", o["id"]) for o in _bpftool_json("link", "list")} | {("map", o["id"]) for o in maps}
        left += [f"{kind} {num} of the daemon still exists" for kind, num in sorted(owned & live)]
        left += [f"pin {p}" for p in sorted(_pins() - base["pins"])]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def owned_by(pid: int) -> set[tuple[str, int]]:
    """The BPF links process *pid* holds fds of (monitor, iterators, PCC's struct_ops link)."""
    out = set()
    for fd in os.listdir(f"/proc/{pid}/fdinfo"):
        try:
            info = Path(f"/proc/{pid}/fdinfo/{fd}").read_text()
        except OSError:
            continue
        m = re.search(r"^link_id:\s+(\d+)$", info, re.M)
        if m:
            out.add(("link", int(m.group(1))))
    return out


# ----------------------------------------------------------------------- tests
def test_daemon_runs_with_exactly_the_units_capabilities(bottleneck, server, tmp_path: Path, caps: list[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Ready, monitoring, switching (guard and manual, into PCC) and a clean stop with only the
    unit's capabilities; the process really holds exactly them (checked in /proc/PID/status)."""
    # test_daemon.Daemon starts `nsenter ... python -m ccswitch.daemon.main ...`: put setpriv in between
    monkeypatch.setattr(test_daemon, "nsenter_argv", lambda ns, argv: nsenter_argv(ns, [*setpriv_argv(caps), *argv]))
    base = bpf_baseline()
    d = Daemon(bottleneck.sender, tmp_path, STATIC)
    pid = d.proc.pid
    bits = cap_bits()
    mask = sum(1 << bits[c] for c in caps)
    got = proc_caps(pid)
    assert {k: got[k] for k in ("CapEff", "CapPrm", "CapBnd", "CapAmb", "CapInh")} == dict.fromkeys(
        ("CapEff", "CapPrm", "CapBnd", "CapAmb", "CapInh"), mask), got
    assert got["NoNewPrivs"] == 1
    client = iperf(bottleneck, server, 10, "bbr")
    try:
        rows = wait_for(lambda: [r for r in data_flows(d, server) if r["cca"] == "cubic"], 20,
                        "the daemon to switch the bbr flow to cubic", d)
        flow, sport = rows[0]["flow_id"], rows[0]["sport"]
        st = d.ask("status")
        assert st["switches"] >= 1 and st["failed"] == 0, st
        cp = d.cli("switch", str(flow), "pcc")
        assert cp.returncode == 0 and "pinned" in cp.stdout, cp.stderr
        wait_for(lambda: ss_info(bottleneck.sender, sport).get("cca") == "pcc", 10, "the kernel to show pcc", d)
        assert bpf_programs_of(pid) > 0
    finally:
        client.wait(30)
    owned = owned_by(pid)
    assert any(kind == "link" for kind, _ in owned), owned
    assert d.stop() == 0, d.log()
    log = d.log()
    assert "msg=stopped" in log and "Traceback" not in log
    assert leftovers(base, owned) == []


@pytest.mark.parametrize("dropped", unit_caps())
def test_without_one_of_the_units_capabilities_the_start_fails_cleanly(bottleneck, tmp_path: Path,
                                                                        caps: list[str], dropped: str) -> None:
    """Every capability the unit grants is needed: without it, one line naming it, exit 1, nothing left."""
    cfg = tmp_path / "c.toml"
    cfg.write_text(STATIC)
    sock = tmp_path / "s.sock"
    base = bpf_baseline()
    argv = [*setpriv_argv([c for c in caps if c != dropped]), sys.executable, "-m", "ccswitch.daemon.main",
            "--config", str(cfg), "--socket", str(sock)]
    proc = subprocess.Popen(nsenter_argv(bottleneck.sender, argv), stderr=subprocess.PIPE, text=True)
    try:
        _, err = proc.communicate(timeout=START_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
        pytest.fail(f"ccswitchd ran for {START_TIMEOUT_S} s without CAP_{dropped.upper()}: the unit grants a "
                    f"capability the daemon does not need (log: {err[-500:]})")
    assert proc.returncode == 1, (proc.returncode, err[-2000:])
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ccswitchd: error: "), err[-2000:]
    assert "Operation not permitted" in lines[0] and f"CAP_{dropped.upper()}" in lines[0], lines[0]
    # the hint names exactly the capability the process lacks (CapEff), not the whole list
    assert f"missing CAP_{dropped.upper()} in this process' effective capabilities" in lines[0], lines[0]
    assert "run as root" not in lines[0], lines[0]
    assert not sock.exists() and not sock.with_name("s.sock.state").exists()
    assert leftovers(base) == []


def _datagrams(sock: socket.socket, seconds: float) -> list[str]:
    """Every sd_notify datagram received within *seconds*."""
    out = []
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            out.append(sock.recv(4096).decode())
        except TimeoutError:
            break
    return out


def test_sd_notify_protocol_with_the_units_capabilities(bottleneck, tmp_path: Path, caps: list[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """What systemd's Type=notify + WatchdogSec sees, without systemd: $NOTIFY_SOCKET is a datagram
    socket of this test, $WATCHDOG_USEC 1 s (pings due every 0.25 s, sent at 0.2 s ticks).
    READY=1 with MAINPID and STATUS; WATCHDOG=1 keeps coming (>= 2 in 3 s: 7 expected, the
    margin is for a loaded machine); SIGHUP -> RELOADING=1 with MONOTONIC_USEC, then READY=1;
    daemon.watchdog = false (reloaded) -> no WATCHDOG=1 for 1.5 s; SIGTERM -> STOPPING=1, exit 0.
    scripts/systemd-check.sh checks the same against a real systemd."""
    path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    monkeypatch.setenv("NOTIFY_SOCKET", str(path))
    monkeypatch.setenv("WATCHDOG_USEC", "1000000")
    monkeypatch.setattr(test_daemon, "nsenter_argv", lambda ns, argv: nsenter_argv(ns, [*setpriv_argv(caps), *argv]))
    try:
        d = Daemon(bottleneck.sender, tmp_path, STATIC)
        first = _datagrams(sock, 3.0)
        ready = [m for m in first if "READY=1" in m]
        assert ready and f"MAINPID={d.proc.pid}" in ready[0] and "STATUS=policy static" in ready[0], first
        assert sum(m == "WATCHDOG=1" for m in first) >= 2, first
        d.cfg.write_text(STATIC.replace("tick_s = 0.2", "tick_s = 0.2\nwatchdog = false"))
        d.proc.send_signal(signal.SIGHUP)
        reload = _datagrams(sock, 1.0)
        i = next((k for k, m in enumerate(reload) if m.startswith("RELOADING=1")), None)
        assert i is not None and "MONOTONIC_USEC=" in reload[i], reload
        assert any("READY=1" in m for m in reload[i + 1:]), reload
        quiet = _datagrams(sock, 1.5)
        assert "WATCHDOG=1" not in quiet, quiet
        assert d.stop() == 0, d.log()
        assert "STOPPING=1" in _datagrams(sock, 1.0)
    finally:
        sock.close()
