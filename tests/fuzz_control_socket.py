"""Coverage-guided fuzzing (Atheris, libFuzzer) of the control socket's request path.

    .venv/bin/python tests/fuzz_control_socket.py -max_total_time=60 [CORPUS_DIR]

Each input is the bytes a client sends.  They go through the real ControlServer's
request handling (`_respond`: decode, validate, permission check) into the real
`Daemon.handle` (argument parsing, explain with the shipped DQN, history,
switch, status), backed by a real Controller on a small in-memory data plane (two
flows; the real counterpart is tests/test_daemon.py's daemon on kernel sockets).
The first input byte picks root or a read_group member, the rest is the request.

A finding is any of:
* an exception out of `_respond` (the daemon would lose the connection, or worse);
* an answer that is not {"v", "ok": bool, ...}, or whose error is empty, multi-line,
  or an "internal error" (a handler bug caught only by the server's last resort);
* an answer the server cannot encode (protocol.encode: NaN, non-JSON types);
* a refused request that changed the daemon's state (a pin, a switch).

tests/test_fuzz_coverage.py runs this for a bounded time in CI and replays
tests/fuzz_regressions/ (every input a run found, once fixed: give files instead
of a directory and libFuzzer runs just those).  Decision: the
request grammar is seeded with one valid request per operation (SEEDS), so the
fuzzer mutates from the daemon's real vocabulary instead of discovering JSON.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import atheris

with atheris.instrument_imports(include=["ccswitch"]):
    from ccswitch.daemon.config import parse_config
    from ccswitch.daemon.controller import Controller
    from ccswitch.daemon.main import Daemon
    from ccswitch.daemon.policies import build_decider
    from ccswitch.daemon.protocol import encode
    from ccswitch.daemon.server import ControlServer
    from ccswitch.schema import FLOW_SAMPLE_SCHEMA

import pyarrow as pa

SEEDS = [
    {"op": "status", "args": {}},
    {"op": "flows", "args": {}},
    {"op": "policy_show", "args": {}},
    {"op": "history", "args": {"limit": 5}},
    {"op": "explain", "args": {"flow": 1}},
    {"op": "explain", "args": {"state": {"throughput_mbps": 40, "rtt_ms": 20, "loss": 0.01}}},
    {"op": "switch", "args": {"flow": 2, "cca": "bbr", "inherit": "limited"}},
    {"op": "switch", "args": {"flow": 2, "cca": "auto"}},
]


class MemoryPlane:
    """Two flows on a fixed link; switch requests always succeed (the kernel side is not under test here)."""

    def __init__(self) -> None:
        self.cca = {1: "cubic", 2: "bbr"}
        self.switches: list[tuple[int, str]] = []

    def sample(self) -> pa.Table:
        base = {f.name: (0.0 if pa.types.is_floating(f.type) else ("" if pa.types.is_string(f.type) else 0))
                for f in FLOW_SAMPLE_SCHEMA}
        rows = [{**base, "flow_id": f, "dst": "10.0.0.2", "cca": c, "state": 1, "interval_s": 1.0,
                 "throughput_bps": 40e6 if c == "bbr" else 10e6, "rtt_us": 20e3, "sndq_bytes": 1000,
                 "sent_segs": 100, "rtt_ratio": 1.0} for f, c in self.cca.items()]
        return pa.Table.from_pylist(rows, schema=FLOW_SAMPLE_SCHEMA)

    def switch_many(self, requests: list[tuple[int, str, str]]) -> list[Any]:
        from ccswitch.bpf.switcher import SwitchResult

        out = []
        for f, c, inh in requests:
            if f not in self.cca:
                out.append(SwitchResult(f, c, inh, ok=False, error="no such flow"))
                continue
            out.append(SwitchResult(f, c, inh, ok=True, cca_before=self.cca[f], cca_after=c))
            self.switches.append((f, c))
            self.cca[f] = c
        return out


def build_daemon() -> tuple[ControlServer, SimpleNamespace]:
    """A real ControlServer and Daemon.handle over a real Controller on the in-memory plane."""
    cfg = parse_config({"daemon": {"tick_s": 1.0}, "policy": {"decision_interval_s": 1.0},
                        "flows": {"min_age_s": 0.0}})
    decider, _ = build_decider(dict(cfg.policy))
    plane = MemoryPlane()
    clock = SimpleNamespace(t=1000.0)
    ctl = Controller(cfg, decider, plane, clock=lambda: clock.t,
                     available=lambda: ["cubic", "bbr", "pcc", "reno"])
    for _ in range(3):  # a few ticks so flows, Q-values and history exist
        ctl.tick()
        clock.t += 1.0
    me = SimpleNamespace(ctl=ctl, decider=decider, cfg=cfg, socket_path=Path("/nonexistent/ccswitchd.sock"),
                         args=SimpleNamespace(record=None, decisions=None), state_path=Path("/nonexistent/state"),
                         plane=plane)
    me._pcc_status = lambda: {"pcc": "none", "pcc_detail": "", "pcc_seedable": False}
    server = ControlServer(me.socket_path, lambda op, args: Daemon.handle(me, op, args), allowed_uid=0)
    return server, me


logging.disable(logging.WARNING)  # refused requests are logged once each: millions of lines otherwise
SERVER, DAEMON = build_daemon()


def _state(d: SimpleNamespace) -> tuple[Any, ...]:
    return (tuple(d.plane.switches), tuple(sorted((f, g.pin) for f, g in d.ctl.guard.flows.items())))


def check_one(data: bytes) -> dict[str, Any]:
    """One request through the server; raises AssertionError on a finding. Returns the answer."""
    reader = bool(data[:1]) and data[0] & 1 == 1
    body = data[1:]
    before = _state(DAEMON)
    pending = SimpleNamespace(buf=bytearray(body), reader=reader, uid=0 if not reader else 1000)
    resp = SERVER._respond(pending)
    encode(resp)  # what the server sends back must encode (raises on NaN, numpy leftovers...)
    assert set(resp) >= {"v", "ok"} and isinstance(resp["ok"], bool), resp
    if not resp["ok"]:
        err = resp.get("error")
        assert isinstance(err, str) and err and "\n" not in err, resp
        assert not err.startswith("internal error"), resp
        assert _state(DAEMON) == before, (resp, before, _state(DAEMON))
    return resp


def test_one_input(data: bytes) -> None:
    check_one(data)
    if DAEMON.ctl.guard.flows and any(g.pin for g in DAEMON.ctl.guard.flows.values()):
        for f in list(DAEMON.ctl.guard.flows):  # keep runs independent: release pins a switch left
            DAEMON.ctl.guard.unpin(f)


def write_seeds(corpus: Path) -> None:
    corpus.mkdir(parents=True, exist_ok=True)
    for i, s in enumerate(SEEDS):
        (corpus / f"seed-{i}").write_bytes(b"\x00" + json.dumps(s).encode() + b"\n")


def main() -> None:
    paths = [Path(a) for a in sys.argv[1:] if not a.startswith("-")]
    if paths and not paths[0].is_file():  # a corpus directory (new or not): seed it; files are replayed as given
        write_seeds(paths[0])
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
