"""The control protocol between `ccswitch` and ccswitchd: one JSON request, one JSON response.

Transport: a UNIX stream socket (daemon.socket, default
/run/ccswitch/ccswitchd.sock; `ccswitch --socket PATH` or $CCSWITCH_SOCKET
on the CLI side).  The socket file is mode 0600 in a 0700 directory owned by
root, and the daemon also checks the peer's uid with SO_PEERCRED: only root
may talk to it.  One request per connection; each message is one line of
UTF-8 JSON ending in "\\n":

    request   {"v": 1, "op": OP, "args": {...}}
    response  {"v": 1, "ok": true, "result": ...}
              {"v": 1, "ok": false, "error": "one line, naming the problem and the fix"}

Operations (args -> result):

    status                          -> daemon, policy, tick timing, counts, unfairness per path
    flows                           -> [FlowSample row + q, thratio, managed, pinned, last_action, last_reason]
    policy_show                     -> the decider's description (model card for the DQN)
    explain {flow}                  -> {cca, q, features, guard, last_decision}
    explain {state: {k: v}}         -> {q, features, guard} for a hypothetical steady state
    history {limit}                 -> [{ts, flow, from, to, kind, reason, verdict}]
    switch {flow, cca, inherit}     -> SwitchResult + pinned (cca "auto" releases the pin)
"""

from __future__ import annotations

import errno
import json
import os
import socket
from pathlib import Path
from typing import Any

VERSION = 1
OPS = ("status", "flows", "policy_show", "explain", "history", "switch")
DEFAULT_SOCKET = "/run/ccswitch/ccswitchd.sock"
ENV_SOCKET = "CCSWITCH_SOCKET"
MAX_MESSAGE = 64 << 20


class ProtocolError(RuntimeError):
    """The daemon answered with an error, or could not be reached (message says why and what to do)."""


class NoDaemon(ProtocolError):
    """Nothing listens on the socket: callers may fall back to the direct data plane."""


def encode(obj: dict[str, Any]) -> bytes:
    return (json.dumps(obj, separators=(",", ":"), default=_default, allow_nan=False) + "\n").encode()


def _default(o: Any) -> Any:
    import numpy as np

    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def clean(v: Any) -> Any:
    """NaN/inf -> None, recursively (JSON has no NaN)."""
    if isinstance(v, float):
        return v if v == v and v not in (float("inf"), float("-inf")) else None
    if isinstance(v, dict):
        return {k: clean(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [clean(x) for x in v]
    return v


def read_message(sock: socket.socket) -> dict[str, Any]:
    buf = bytearray()
    while not buf.endswith(b"\n"):
        chunk = sock.recv(1 << 16)
        if not chunk:
            break
        buf += chunk
        if len(buf) > MAX_MESSAGE:
            raise ProtocolError("message too large")
    return decode_message(bytes(buf))


def decode_message(buf: bytes) -> dict[str, Any]:
    """One message's bytes (a JSON object and its newline) -> the object; ProtocolError otherwise."""
    if not buf:
        raise ProtocolError("empty message")
    try:
        doc = json.loads(buf)
    except ValueError as e:
        raise ProtocolError(f"not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise ProtocolError("a message must be a JSON object")
    return doc


def socket_path(explicit: str | None = None) -> str:
    return explicit or os.environ.get(ENV_SOCKET) or DEFAULT_SOCKET


def request(path: str, op: str, timeout: float = 10.0, **args: Any) -> Any:
    """Send one request; returns the result or raises ProtocolError / NoDaemon."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        try:
            s.connect(path)
        except FileNotFoundError:
            raise NoDaemon(f"no daemon: {path} does not exist") from None
        except ConnectionRefusedError:
            raise NoDaemon(f"no daemon listens on {path}") from None
        except PermissionError:
            raise ProtocolError(f"permission denied on {path}: the control socket is root-only; rerun with sudo"
                                ) from None
        except OSError as e:
            if e.errno in (errno.ENOTSOCK, errno.ENOTDIR):
                raise NoDaemon(f"no daemon: {path} is not a socket") from None
            raise
        s.sendall(encode({"v": VERSION, "op": op, "args": clean(args)}))
        try:
            resp = read_message(s)
        except ProtocolError as e:
            raise ProtocolError(f"daemon at {path} closed the connection without an answer ({e}); is the CLI "
                                "root? (the daemon only answers uid 0)") from None
        except TimeoutError:
            raise ProtocolError(f"daemon at {path} did not answer within {timeout:g} s") from None
    finally:
        s.close()
    if not resp.get("ok"):
        raise ProtocolError(str(resp.get("error", "unknown error")))
    return resp.get("result")
