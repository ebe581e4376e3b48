"""linkemu's control socket from Python (ccswitch.testbed.runs.linkemu_control) and the lfq qdisc.

* The client against a tiny in-test server: framing, ids, errors, timeouts (no kernel).
* The real binary without namespaces: configs with ``lfq`` and ``control`` pass ``--check``;
  a bad ``control.socket`` exits 2 naming the field.
* The real binary between namespaces (kernel): a UDP flow through an lfq uplink, its state and
  features read over the socket, its limit lowered to 10 packets (its queue then holds at most
  10), DualPI2's p' fixed and given back on the downlink, the counters in summary.json.

The Rust side (protocol parser, lfq, the socket in process) is tested by ``cargo test``
(``testbed/linkemu/src/control/tests.rs``, ``src/qdisc/lfq_tests.rs``).
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ccswitch.testbed.runs.emulator import Emulator, binary_path, dualpi2, emulator_config, link
from ccswitch.testbed.runs.iperf import start_flow, start_server
from ccswitch.testbed.runs.linkemu_control import LinkemuControl, LinkemuControlError
from ccswitch.testbed.runs.topology import Topology

# ------------------------------------------------------------ fake server ---

Handler = Callable[[dict], "dict | None"]


class FakeLinkemu:
    """A UNIX socket server answering each request line with ``handler(request)`` (None: silence)."""

    def __init__(self, path: Path, handler: Handler) -> None:
        self.path, self.handler = path, handler
        self.requests: list[dict] = []
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.srv.bind(str(path))
        self.srv.listen(4)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.srv.accept()
            except OSError:
                return
            # A client that closes with answers in flight ends its connection only, not the server.
            with contextlib.suppress(OSError), conn, conn.makefile("rwb") as f:
                for line in f:
                    req = json.loads(line)
                    self.requests.append(req)
                    resp = self.handler(req)
                    if resp is not None:
                        f.write(json.dumps(resp).encode() + b"\n")
                        f.flush()

    def close(self) -> None:
        self.srv.close()


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="lec-") as d:  # short: sun_path holds 107 bytes
        yield Path(d)


def test_client_frames_requests_and_checks_ids(sock_dir: Path) -> None:
    def handler(req: dict) -> dict:
        if req["op"] == "state":
            return {"ok": True, "id": req["id"], "t_s": 1.5, "uplink": {"kind": "lfq", "flows": []}}
        if "k" in req:
            return {"ok": False, "id": req["id"],
                    "error": "k: not settable on lfq (settable: default_limit_pkts, flows)"}
        return {"ok": True, "id": req["id"], "t_s": 1.6, "dir": req["dir"], "applied": {"default_limit_pkts": 50}}

    fake = FakeLinkemu(sock_dir / "ctl.sock", handler)
    try:
        with LinkemuControl(sock_dir / "ctl.sock", timeout=2) as ctl:
            assert ctl.state("uplink", max_flows=5)["uplink"]["kind"] == "lfq"
            key = {"src": "10.99.0.11", "dst": "10.99.0.1", "proto": 17, "sport": 4000, "dport": 5201}
            assert ctl.set("uplink", default_limit_pkts=50, flows=[{"key": key, "limit_pkts": 10}]) == {
                "default_limit_pkts": 50}
            with pytest.raises(LinkemuControlError, match=r"^k: not settable on lfq"):
                ctl.set("uplink", k=2)
            assert ctl.state()["t_s"] == 1.5  # the connection survives a refused request
            with pytest.raises(ValueError, match="direction must be"):
                ctl.state("up")
    finally:
        fake.close()
    assert fake.requests == [
        {"op": "state", "dir": "uplink", "max_flows": 5, "id": 1},
        {"op": "set", "dir": "uplink", "default_limit_pkts": 50,
         "flows": [{"key": {"src": "10.99.0.11", "dst": "10.99.0.1", "proto": 17, "sport": 4000, "dport": 5201},
                    "limit_pkts": 10}], "id": 2},
        {"op": "set", "dir": "uplink", "k": 2, "id": 3},
        {"op": "state", "id": 4},
    ]


def test_request_lines_are_what_json_dumps_writes() -> None:
    """The requests an agent sends every interval (state, post_set) are formatted from templates and
    plain ones directly (issue 14): the bytes on the wire are json.dumps({**req, "id": N}, separators=(",",
    ":")) all the same, answers to posted sets are checked without decoding them, ids stay in order."""
    from ccswitch.testbed.runs.linkemu_control import _encode

    def dumps(req: dict, rid: int) -> bytes:
        return json.dumps({**req, "id": rid}, separators=(",", ":")).encode() + b"\n"

    odd: list[dict] = [{"op": "set", "dir": "uplink", "base_prob": float("inf")}, {"op": "set", "base_prob": True},
                       {"op": "set", "flows": [{"queue": 1, "limit_pkts": 5}]}, {"op": 'a"b'}, {"op": "sét"},
                       {"id": 3, "op": "state"}, {"op": "state", "id": 3}, {1: 2}, {"op": "st ate"}, {},
                       {"op": "set", "k": 10**30, "hold_ms": -0.0, "base_prob": 5e-324}, {"op": "id"}, {"x": None}]
    for req in odd:
        assert _encode(req, 7) == dumps(req, 7), req
    a, b = socket.socketpair()
    b.settimeout(2.0)
    ctl = LinkemuControl("/unused", timeout=2)
    ctl._sock = a
    rid, posted = 0, []
    sets = [{"base_prob": 0.0123456789, "hold_ms": 30.0}, {"base_prob": 1e-300, "k": 2}, {"base_prob": "auto"},
            {"base_prob": None, "k": 3}, {"base_prob": float("nan")}, {"hold_ms": True, "base_prob": 0.1}, {},
            {"base_prob": 0.5, "hold_ms": 30.0}]
    states = [{}, {"direction": "uplink"}, {"direction": "downlink", "max_flows": 3},
              {"direction": "uplink", "fields": ("base_prob", "b%c")}, {"direction": "uplink", "fields": ["x"]}]
    for _ in range(2):  # the second time from the templates
        for params in sets:
            for d in ("uplink", "downlink"):
                ctl.post_set(d, **params)
                rid += 1
                posted.append(rid)
                want = {"op": "set", "dir": d, **{k: v for k, v in params.items() if v is not None}}
                assert b.recv(65536) == dumps(want, rid), (d, params)
        for kw in states:
            answers = [{"applied": {}, "dir": "uplink", "id": i, "ok": True, "t_s": 1.0} for i in posted]
            rid += 1
            answers.append({"id": rid, "ok": True, "t_s": 2.0, "uplink": {"n": rid}})
            b.sendall(b"".join(json.dumps(x, separators=(",", ":"), sort_keys=True).encode() + b"\n"
                               for x in answers))
            assert ctl.state(kw.get("direction"), max_flows=kw.get("max_flows"), fields=kw.get("fields"))[
                "uplink"] == {"n": rid}
            posted = []
            want = {"op": "state", **({"dir": kw["direction"]} if "direction" in kw else {}),
                    **({"max_flows": kw["max_flows"]} if "max_flows" in kw else {}),
                    **({"fields": list(kw["fields"])} if "fields" in kw else {})}
            assert b.recv(65536) == dumps(want, rid), kw
    # A refused posted set raises with the next request, as before.
    ctl.post_set("uplink", base_prob=0.2, hold_ms=30.0)
    b.recv(65536)
    b.sendall(b'{"error":"base_prob: no","id":%d,"ok":false}\n{"id":%d,"ok":true,"t_s":1}\n' % (rid + 1, rid + 2))
    with pytest.raises(LinkemuControlError, match=r"^base_prob: no$"):
        ctl.state()
    a.close()
    b.close()


def test_client_errors_are_clear(sock_dir: Path) -> None:
    path = sock_dir / "ctl.sock"
    with pytest.raises(LinkemuControlError, match=r"cannot connect to linkemu's control socket .*ctl\.sock"):
        LinkemuControl(path).connect()
    # Silence: an error naming the timeout, and the connection is dropped (a late answer
    # would otherwise be read as the next one's).
    fake = FakeLinkemu(path, lambda req: None)
    try:
        ctl = LinkemuControl(path, timeout=0.2)
        t = time.monotonic()
        with pytest.raises(LinkemuControlError, match=r"no answer from linkemu within 0\.2 s to state"):
            ctl.state()
        assert time.monotonic() - t < 2
        assert "connected=False" in repr(ctl)
    finally:
        fake.close()
    path.unlink()
    # An answer to another request id.
    fake = FakeLinkemu(path, lambda req: {"ok": True, "id": 99})
    try:
        with pytest.raises(LinkemuControlError, match=r"unexpected answer \(request id 1\)"):
            LinkemuControl(path, timeout=1).state()
    finally:
        fake.close()


def test_client_waits_for_the_socket_to_appear(sock_dir: Path) -> None:
    path = sock_dir / "ctl.sock"
    later: list[FakeLinkemu] = []
    timer = threading.Timer(0.3, lambda: later.append(FakeLinkemu(path, lambda r: {"ok": True, "id": r["id"]})))
    timer.start()
    try:
        with LinkemuControl(path, timeout=1, connect_timeout=5) as ctl:
            assert ctl.state()["ok"] is True
    finally:
        timer.join()
        for f in later:
            f.close()


# ------------------------------------------------- real binary, no kernel ---


@pytest.fixture
def linkemu(require: Callable[[bool, str], None]) -> Path:
    path = binary_path()
    require(path.is_file(), f"linkemu is not built ({path}); run scripts/setup.sh or set $LINKEMU")
    return path


def _config(sock: Path, uplink_qdisc: dict) -> dict:
    return {"client_ifs": ["c1"], "server_if": "srv", "control": {"socket": str(sock)},
            "uplink": {"rate_mbit": 10.0, "qdisc": uplink_qdisc},
            "downlink": {"rate_mbit": 10.0, "qdisc": {"kind": "dualpi2"}}}


def _check(linkemu: Path, tmp_path: Path, cfg: dict) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return subprocess.run([str(linkemu), "--config", str(path), "--check"], capture_output=True, text=True,
                          timeout=10, check=False)


def test_check_accepts_lfq_and_a_control_socket(linkemu: Path, tmp_path: Path, sock_dir: Path) -> None:
    cp = _check(linkemu, tmp_path, _config(sock_dir / "ctl.sock", {"kind": "lfq", "default_limit_pkts": 50}))
    assert cp.returncode == 0, cp.stderr


@pytest.mark.parametrize(("sock", "qdisc", "field", "words"), [
    ("/nonexistent/ctl.sock", {"kind": "lfq"}, "control.socket", "does not exist"),
    ("/tmp/" + "x" * 120, {"kind": "lfq"}, "control.socket", "at most 107"),
    ("/tmp/ok.sock", {"kind": "lfq", "default_limit_pkts": 0}, "uplink.qdisc.default_limit_pkts", "must be 1..limit"),
    ("/tmp/ok.sock", {"kind": "lfq", "flow_limit_pkts": 5}, "uplink.qdisc.flow_limit_pkts", "unknown field"),
])
def test_bad_lfq_or_control_config_exits_2(linkemu: Path, tmp_path: Path, sock: str, qdisc: dict, field: str,
                                           words: str) -> None:
    cp = _check(linkemu, tmp_path, _config(Path(sock), qdisc))
    assert cp.returncode == 2, cp.stderr
    assert cp.stderr.startswith(f"linkemu: config error: {field}: "), cp.stderr
    assert words in cp.stderr


# ------------------------------------------------------------------ kernel ---

PAYLOAD = 1400
IP_LEN = PAYLOAD + 28


@pytest.mark.kernel
def test_lfq_and_dualpi2_through_the_real_socket(linkemu: Path, iperf3: str, sock_dir: Path) -> None:
    """A UDP flow at 2x a 10 Mbit/s lfq uplink: state, features, a per-flow limit of 10; DualPI2 p' down."""
    sock = sock_dir / "ctl.sock"
    rate, offered = 10.0, 20.0
    with Topology(1) as topo:
        cfg = emulator_config(
            topo.client_ifs, topo.server_if,
            uplink=link(rate, 2, qdisc={"kind": "lfq", "default_limit_pkts": 100}),
            downlink=link(rate, 2, qdisc=dualpi2()),
            control={"socket": str(sock)},
            # A functional test on a shared machine: no SCHED_FIFO, no spinning.
            timing={"sched_fifo_priority": 0, "spin_us": 0},
        )
        with Emulator(topo.router, cfg) as emu, start_server(topo.server, 5201, bind=topo.server_addr), \
                LinkemuControl(sock, timeout=2) as ctl:
            flow = start_flow(topo.clients[0], topo.server_addr, 5201, udp=True, bitrate=offered * 1e6, seconds=4,
                              extra_args=["-l", str(PAYLOAD)])
            time.sleep(2.0)
            up = ctl.state("uplink")["uplink"]
            assert up["kind"] == "lfq" and up["default_limit_pkts"] == 100
            udp = [f for f in up["flows"] if f["key"] and f["key"]["proto"] == 17]
            assert len(udp) == 1, up["flows"]
            f = udp[0]
            assert f["key"]["dst"] == topo.server_addr and f["key"]["dport"] == 5201
            assert f["limit_pkts"] == 100 and f["backlog_pkts"] >= 80, f
            x = f["features"]
            # ~1750 pps offered, 875 pps out (10 Mbit/s of 1428-byte packets); the fast averages
            # (about the last 32 packets) within 30 % (iperf3 sends in bursts) and 10 %.
            assert abs(x["in_rate_pps"][0] / (offered * 1e6 / 8 / IP_LEN) - 1) < 0.3, x["in_rate_pps"]
            assert abs(x["out_rate_pps"][0] / (rate * 1e6 / 8 / IP_LEN) - 1) < 0.1, x["out_rate_pps"]
            assert x["limit_pkts"][0] == 100 and x["since_loss_s"][0] < 0.1
            drops_before = f["drops"]
            # The agent's move: this flow gets 10 packets.
            applied = ctl.set("uplink", flows=[{"key": f["key"], "limit_pkts": 10}])
            assert applied["flows"] == [{"queue": f["queue"], "key": f["key"], "limit_pkts": 10, "was": 100}]
            time.sleep(0.5)
            backlog = []
            for _ in range(20):
                g = next(g for g in ctl.state("uplink")["uplink"]["flows"] if g["queue"] == f["queue"])
                backlog.append(g["backlog_pkts"])
                time.sleep(0.02)
            assert g["limit_pkts"] == 10 and max(backlog) <= 10 and min(backlog) >= 5, backlog
            assert g["drops"] > drops_before
            # DualPI2 on the downlink: p' fixed, then the PI controller's again.
            assert ctl.set("downlink", base_prob=0.2)["pi"] == "manual"
            down = ctl.state("downlink")["downlink"]
            assert (down["kind"], down["base_prob"], down["pi"]) == ("dualpi2", 0.2, "manual")
            assert ctl.set("downlink", base_prob="auto")["pi"] == "auto"
            with pytest.raises(LinkemuControlError, match=r"^k: not settable on lfq"):
                ctl.set("uplink", k=2)
            res = flow.wait()
    assert res.sender_mbps > 1.8 * rate
    s = emu.summary
    assert s is not None
    q = s["uplink"]["qdisc_stats"]
    assert q["kind"] == "lfq" and q["limit_sets"] == 1 and q["drops"]["flow_limit"] > 1000
    assert s["io"]["control"]["requests"] >= 25
    assert not sock.exists(), "linkemu removes its socket at exit"
