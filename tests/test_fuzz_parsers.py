"""Property-based tests (Hypothesis) of every parser of user input.

For each: random and mutated inputs either parse or raise that parser's own
error with a message naming the problem; never another exception (a
traceback for the user), and for the control socket never a call into the
daemon with a malformed request, and a server that still answers after.

Inputs are mutations of the real files the project ships (scenario files,
the shipped policy, a capture's manifest, the default daemon config), so the
search starts from valid documents and breaks them one way at a time.
`derandomize=True`: CI runs the same examples every time (a failure is
reproducible); the number of examples is bounded to keep the file at a few
seconds.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import socket
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ccswitch.daemon.config import KEYS, Config, ConfigError, load_config, parse_config, render_default
from ccswitch.daemon.explain import STATE_KEYS, explain_state
from ccswitch.daemon.protocol import encode
from ccswitch.daemon.server import ControlServer
from ccswitch.datasets.trace import TraceError, read_manifest
from ccswitch.models.policy import DEFAULT_POLICY, PolicyError, document_checksum, load_policy
from ccswitch.testbed.scenario.model import ScenarioError
from ccswitch.testbed.scenario.parse import parse_scenario

_SHIPPED = load_policy(DEFAULT_POLICY)

REPO = Path(__file__).resolve().parent.parent
SCENARIOS = sorted((REPO / "testbed" / "scenarios").glob("*.toml"))
MANIFEST = next(iter(sorted((REPO / "datasets" / "sample").glob("*/*/manifest.json"))))
CCAS = ("reno", "cubic", "bbr", "pcc", "prague")
FUZZ = settings(max_examples=150, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow])

scalars = st.one_of(st.booleans(), st.integers(-10**12, 10**12), st.floats(allow_nan=True),
                    st.text(max_size=12))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                      max_leaves=6)


def _text_mutation(text: str, data: st.DataObject) -> str:
    """One line of *text* deleted, duplicated, cut, or its value replaced by another TOML value."""
    lines = text.splitlines()
    i = data.draw(st.integers(0, max(0, len(lines) - 1)))
    kind = data.draw(st.sampled_from(["delete", "duplicate", "cut", "value", "garbage"]))
    if not lines:
        return data.draw(st.text(max_size=40))
    line = lines[i]
    if kind == "delete":
        del lines[i]
    elif kind == "duplicate":
        lines.insert(i, line)
    elif kind == "cut":
        lines[i] = line[: data.draw(st.integers(0, len(line)))]
    elif kind == "value" and "=" in line:
        new = data.draw(st.sampled_from(['-1', '0', '1e309', '"x"', 'true', '[]', '{}', '"cubic"', '99999999',
                                         '0.0', '"-5"', '[1, "a"]', 'nan', 'inf']))
        lines[i] = line.split("=", 1)[0] + "= " + new
    else:
        lines[i] = data.draw(st.text(max_size=30))
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ daemon config
config_sections = [*sorted({k.section for k in KEYS}), "bogus"]
config_keys = [*sorted({k.name for k in KEYS}), "bogus_key"]
config_docs = st.dictionaries(
    st.sampled_from(config_sections),
    st.one_of(st.dictionaries(st.sampled_from(config_keys), values, max_size=4), scalars), max_size=4)


@FUZZ
@given(config_docs)
def test_daemon_config_documents(doc: dict[str, Any]) -> None:
    try:
        cfg = parse_config(doc)
    except ConfigError as e:
        assert e.problems and all("\n" not in p and p.split(":")[0] for p in e.problems), e.problems
        known = {k.section for k in KEYS} | {k.dotted for k in KEYS} | {f"{s}.{n}" for s in doc for n in
                                                                           (doc[s] if isinstance(doc[s], dict)
                                                                            else {})}
        for p in e.problems:  # each problem names the section or key it is about
            assert p.split(":")[0] in known or p.split(":")[0] == "bogus", p
        return
    assert isinstance(cfg, Config)


@FUZZ
@given(st.data())
def test_daemon_config_files(data: st.DataObject) -> None:
    text = _text_mutation(render_default(), data)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ccswitch.toml"
        path.write_text(text)
        try:
            load_config(path)
        except ConfigError as e:
            assert str(e).startswith(str(path)), e


# ------------------------------------------------------------------ scenario files
@FUZZ
@given(st.data())
def test_scenario_files(data: st.DataObject) -> None:
    src = data.draw(st.sampled_from(SCENARIOS))
    text = _text_mutation(src.read_text(), data)
    try:
        parse_scenario(text, "fuzz.toml", base_dir=src.parent, ccas=CCAS)
    except ScenarioError as e:
        lines = str(e).splitlines()
        assert lines and all(line.startswith("fuzz.toml") for line in lines), str(e)


# ------------------------------------------------------------------ policy files
_policy_doc = json.loads(DEFAULT_POLICY.read_text())


def _paths(doc: Any, prefix: tuple = (), depth: int = 3) -> list[tuple]:
    out = [prefix]
    if depth and isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k), depth - 1)
    return out


POLICY_PATHS = [p for p in _paths(_policy_doc) if p and p[0] not in ("checksum",)]


@settings(max_examples=80, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(POLICY_PATHS), st.one_of(st.just("delete"), values), st.booleans())
def test_policy_files(path: tuple, new: Any, resign: bool) -> None:
    """One entry of the shipped policy replaced (or deleted); re-signed so deeper checks run, or not."""
    doc = json.loads(json.dumps(_policy_doc))
    parent = doc
    for k in path[:-1]:
        parent = parent[k]
    if new == "delete":
        del parent[path[-1]]
    else:
        parent[path[-1]] = new
    if resign:
        with contextlib.suppress(ValueError):  # NaN/Infinity have no canonical JSON: the file stays unsigned
            doc["checksum"] = document_checksum(doc)
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "policy.json"
        f.write_text(json.dumps(doc))
        try:
            load_policy(f)
        except PolicyError as e:
            assert str(e).startswith(str(f)) and "\n" not in str(e), e


# ------------------------------------------------------------------ dataset manifests
_manifest = json.loads(MANIFEST.read_text())


@FUZZ
@given(st.sampled_from(sorted(_manifest)), st.one_of(st.just("delete"), values))
def test_dataset_manifests(key: str, new: Any) -> None:
    doc = dict(_manifest)
    if new == "delete":
        del doc[key]
    else:
        doc[key] = new
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "manifest.json"
        f.write_text(json.dumps(doc))
        try:
            read_manifest(f)
        except TraceError as e:
            assert str(e).startswith(str(f)) and "\n" not in str(e), e


@FUZZ
@given(st.binary(max_size=200))
def test_dataset_manifest_bytes(raw: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "manifest.json"
        f.write_bytes(raw)
        with contextlib.suppress(TraceError):
            read_manifest(f)


# ------------------------------------------------------------------ the control socket
class _Recorder:
    """The handler behind the real ControlServer: records what reached it (the daemon's state)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []

    def __call__(self, op: str, args: dict[str, Any]) -> Any:
        self.calls.append((op, args))
        if op != "status":
            raise ValueError(f"unknown operation {op!r}")
        return {"ok": 1}


def _exchange(server: ControlServer, payload: bytes) -> dict[str, Any]:
    """The server's own path: accept (peer check, queue), then serve the pending until answered."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with a:
        a.sendall(payload)
        a.shutdown(socket.SHUT_WR)
        server.accept_connection(b)
        for _ in range(100):
            server.serve_pending()
            if b.fileno() == -1:  # answered and closed by the server
                break
        a.settimeout(2)
        raw = a.recv(1 << 20)
    return json.loads(raw)


requests = st.one_of(
    st.binary(max_size=120).map(lambda b: b + b"\n"),
    values.map(lambda v: json.dumps(v).encode() + b"\n"),
    st.fixed_dictionaries({"op": values, "args": values}).map(lambda d: json.dumps(d).encode() + b"\n"),
)


@FUZZ
@given(requests)
def test_control_socket_requests(payload: bytes) -> None:
    """Anything on the socket: one JSON answer with a one-line error, or the op reached the handler
    as a string with an object of arguments; and the server answers a good request afterwards."""
    rec = _Recorder()
    server = ControlServer("/nonexistent/ccswitchd.sock", rec, allowed_uid=os.getuid())
    resp = _exchange(server, payload)
    assert resp["v"] and isinstance(resp["ok"], bool)
    if not resp["ok"]:
        assert isinstance(resp["error"], str) and "\n" not in resp["error"] and resp["error"]
    for op, args in rec.calls:
        assert isinstance(op, str) and isinstance(args, dict)
    try:
        doc = json.loads(payload)
    except ValueError:
        doc = None
    if not (isinstance(doc, dict) and isinstance(doc.get("op"), str) and isinstance(doc.get("args") or {}, dict)):
        assert rec.calls == [], (payload, rec.calls)  # nothing malformed reached the daemon
        assert resp["ok"] is False and resp["error"].startswith("bad request:"), resp
    good = _exchange(server, encode({"op": "status", "args": {}}))
    assert good["ok"] is True and good["result"] == {"ok": 1}



# ------------------------------------------------------------------ explain --state
state_values = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-10, 10**7), st.booleans(),
                         st.sampled_from(["0", "-1", "nan", "x", "bbr", "cubic"]), st.none(), st.lists(st.integers(),
                                                                                                       max_size=2))


@FUZZ
@given(st.dictionaries(st.sampled_from([*STATE_KEYS, "bogus"]), state_values, max_size=5))
def test_explain_states(state: dict[str, Any]) -> None:
    """A hypothetical state (CLI --state, socket explain {state}): a one-line ValueError naming the key,
    or finite Q-values and features (a zero RTT once divided by zero here: tests/fuzz_regressions)."""
    try:
        out = explain_state(_SHIPPED, state)
    except ValueError as e:
        assert "\n" not in str(e) and str(e).startswith("state: "), e
        return
    assert all(math.isfinite(v) for v in out["q"].values()), out
    assert all(math.isfinite(v) for v in out["features"].values()), out


def test_explain_rejects_zero_rtt() -> None:
    with pytest.raises(ValueError, match="rtt_ms = 0 is out of range"):
        explain_state(_SHIPPED, {"throughput_mbps": 40, "rtt_ms": 0})
    assert explain_state(_SHIPPED, {"throughput_mbps": 40, "rtt_ms": 0.5})["best"] in _SHIPPED.actions
