"""Client of linkemu's control socket: read queue state and set qdisc parameters while it runs.

linkemu listens when its config has ``"control": {"socket": "/path.sock"}`` (the socket
exists once linkemu has printed ``ready``).  The protocol (defined in
``testbed/linkemu/src/control/mod.rs``, examples in ``testbed/linkemu/README.md``) is one JSON
object per line each way over a UNIX stream socket; each request line gets exactly one response
line, in order:

* ``{"op": "state"}`` (optional ``"dir": "uplink" | "downlink"``, ``"max_flows": N``, default
  1024, ``"fields": [NAME, ...]``: each DIR holds only these of its keys) answers ``{"ok": true,
  "t_s": T, "uplink": DIR, "downlink": DIR}``.  DIR has ``kind``,
  ``backlog_pkts``, ``backlog_bytes``, ``packets_in``, ``bytes_in``, ``packets_out``,
  ``bytes_out``, ``drops`` (per cause) and ``drops_total``, the qdisc's own values (dualpi2:
  ``base_prob``, ``pi`` "auto"/"manual", ``p_c``, ``p_cl``, ``k``, ``classic_pkts``,
  ``l4s_pkts``, ``classic_delay_ms``, ``l4s_delay_ms``, counters; lfq: ``default_limit_pkts``,
  ...) and, for per-flow qdiscs (lfq, fq, fq_codel, fq_pie), ``flows_active`` and ``flows``: one object
  per active flow with ``queue``, ``key`` (``src``, ``dst``, ``proto``, ``sport``, ``dport``),
  ``limit_pkts``, ``backlog_pkts``, and for lfq ``features`` (paper 001: ``queue_pkts``,
  ``queue_std_pkts``, ``limit_pkts``, ``in_rate_pps``, ``out_rate_pps``, ``since_loss_s``, and ours,
  ``empty_frac``; 10 averages each, weights in DIR's ``weights``).
* ``{"op": "set", "dir": D, ...}`` changes parameters of direction D's qdisc, all or nothing:
  lfq ``default_limit_pkts`` and ``flows: [{"queue": Q | "key": KEY, "limit_pkts": N}]``;
  dualpi2 ``base_prob`` (a number fixes p' and pauses the PI controller, ``"auto"`` resumes it;
  ``hold_ms`` makes the number a lease that lapses back to the PI controller unless renewed)
  and ``k``.  The answer is ``{"ok": true, "t_s": T, "dir": D, "applied": {...}}``.
* Anything refused is ``{"ok": false, "error": "FIELD: what is wrong"}``; a request may carry
  ``"id"``, echoed in its response (this client numbers its requests and checks the echo).

Use::

    from ccswitch.testbed.runs.linkemu_control import LinkemuControl

    with LinkemuControl("/tmp/run1/linkemu.sock") as ctl:
        up = ctl.state("uplink")["uplink"]
        for f in up["flows"]:
            ctl.set("uplink", flows=[{"queue": f["queue"], "limit_pkts": 20}])
        ctl.set("downlink", base_prob=0.05)      # DualPI2: p' fixed
        ctl.set("downlink", base_prob="auto")    # PI controller again

Errors (a refused request, no answer within the timeout, a closed or missing socket) raise
:class:`LinkemuControlError` with linkemu's one-line message.
"""

from __future__ import annotations

import itertools
import json
import socket
import struct
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

__all__ = ["DIRECTIONS", "LinkemuControl", "LinkemuControlError"]

DIRECTIONS = ("uplink", "downlink")
MAX_LINE = 64 << 20
"""Longest response accepted (a state with thousands of lfq flows is a few MB)."""
_dumps = json.JSONEncoder(separators=(",", ":")).encode
_scan = json.JSONDecoder().scan_once  # json.loads' own scanner, without its Python layers
_NAMES = frozenset(("op", "dir", "state", "set", "uplink", "downlink", "max_flows", "default_limit_pkts",
                    "base_prob", "k", "hold_ms", "auto"))
"""Request keys and string values that JSON writes as they are (the common ones; see _encode)."""


class LinkemuControlError(RuntimeError):
    """linkemu refused a request, or the socket failed (missing, closed, no answer in time)."""


class LinkemuControl:
    """One connection to linkemu's control socket at *path*.

    Parameters:
        path: the ``control.socket`` of linkemu's config.
        timeout: seconds to wait for each answer (linkemu answers between packet events,
            normally within a millisecond; it gives up on itself after 5 s).
        connect_timeout: seconds to keep retrying while the socket does not exist yet or
            refuses connections (0: one attempt).

    The connection opens on first use (or :meth:`connect`) and closes with :meth:`close` or at
    the end of a ``with`` block.  Not thread-safe: use one instance per thread.
    """

    def __init__(self, path: str | Path, *, timeout: float = 5.0, connect_timeout: float = 0.0) -> None:
        self.path = Path(path)
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self._sock: socket.socket | None = None
        self._buf = b""
        self._ids = itertools.count(1)
        self._posted: list[tuple[int, str]] = []  # (id, op) of requests sent by post(), answers not read yet
        self._state_lines: dict[tuple[Any, ...], bytes] = {}  # state()'s requests encoded, "%d" for the id
        self._set_lines: dict[tuple[str, ...], str] = {}  # post_set()'s, "%r" for each value, "%d" for the id

    # -- connection --

    def connect(self) -> None:
        """Connect (retrying for ``connect_timeout`` s); raise :class:`LinkemuControlError` on failure."""
        if self._sock is not None:
            return
        deadline = time.monotonic() + self.connect_timeout
        while True:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(self.timeout)
            try:
                s.connect(str(self.path))
            except OSError as e:
                s.close()
                if time.monotonic() >= deadline:
                    raise LinkemuControlError(f"cannot connect to linkemu's control socket {self.path}: {e}") from e
                time.sleep(0.05)
                continue
            if self.timeout > 0:
                # Blocking, with the timeout kept by the kernel (SO_RCVTIMEO / SO_SNDTIMEO): a Python
                # socket timeout polls before every send and recv, two syscalls instead of one (issue 14).
                s.settimeout(None)
                sec = int(self.timeout)
                tv = struct.pack("@ll", sec, max(int((self.timeout - sec) * 1e6), 0 if sec else 1))
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)
            self._sock, self._buf, self._posted = s, b"", []
            return

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self) -> LinkemuControl:
        self.connect()
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    # -- requests --

    def request(self, req: Mapping[str, Any]) -> dict[str, Any]:
        """Send one request object (an ``id`` is added) and return its ``ok`` response.

        Raises :class:`LinkemuControlError` with linkemu's message when the answer is
        ``{"ok": false, ...}``, and when the socket fails or stays silent for ``timeout`` s
        (the connection is then closed, since a late answer would be taken for the next one).
        """
        return self._exchange(req, None, str(req.get("op")))

    def _exchange(self, req: Mapping[str, Any] | None, template: bytes | None, op: str) -> dict[str, Any]:
        """:meth:`request` of *req*, or of *template* (a request encoded with ``%d`` for its id): send it,
        read and check the answers to post()ed requests (they come first, in order), return its own.

        An agent calls this every control interval, so it is one call, not several: reading a line, the
        check of a post()ed request's answer (an ``ok`` one is recognised in the line as it is, without
        decoding it: linkemu writes compact JSON with sorted keys, ``{..., "id":ID,"ok":true, ...}``, text
        that cannot occur inside a JSON string) and the decoding are written out here."""
        if self._sock is None:
            self.connect()
        sock = self._sock
        assert sock is not None
        rid = next(self._ids)
        self._send_line(template % rid if template is not None else _encode(req or {}, rid))
        expected = [*self._posted, (rid, op)] if self._posted else [(rid, op)]
        resp: Any = None
        for want, want_op in expected:
            try:
                buf = self._buf
                end = buf.find(b"\n")
                while end < 0:
                    if len(buf) > MAX_LINE:
                        raise ValueError(f"response longer than {MAX_LINE} bytes")
                    chunk = sock.recv(1 << 16)
                    if not chunk:
                        raise ConnectionError("linkemu closed the connection")
                    end = chunk.find(b"\n")
                    if end >= 0:
                        end += len(buf)
                    buf += chunk
                    self._buf = buf
                line, self._buf = buf[:end], buf[end + 1:]
                if want != rid and b'"id":%d,"ok":true' % want in line:
                    continue  # a post()ed request's answer: ok
                # json.loads(line), through its scanner directly for a line of UTF-8 JSON and nothing else
                # (what linkemu writes); anything else (whitespace around it, an error) goes to json.loads.
                try:
                    text = line.decode()
                    resp, end = _scan(text, 0)
                    if end != len(text):
                        raise ValueError
                except (ValueError, StopIteration):
                    resp = json.loads(line)
            except (TimeoutError, BlockingIOError) as e:  # BlockingIOError: SO_RCVTIMEO ran out
                self.close()
                raise LinkemuControlError(f"no answer from linkemu within {self.timeout:g} s to {want_op}") from e
            except (OSError, ValueError) as e:
                self.close()
                raise LinkemuControlError(f"linkemu control socket {self.path}: {e}") from e
            if not isinstance(resp, dict) or resp.get("id") != want:
                self.close()
                raise LinkemuControlError(f"unexpected answer (request id {want}): {resp!r}")
            if resp.get("ok") is not True:
                raise LinkemuControlError(str(resp.get("error", resp)))
        self._posted = []
        return resp

    def post(self, req: Mapping[str, Any]) -> None:
        """Send a request without waiting for its answer; the next :meth:`request` reads and checks it
        first (a refusal then raises there).  Saves one round trip per control step for an agent
        that does not need the answer at once (``set`` every interval)."""
        rid = self._send(req)
        self._posted.append((rid, str(req.get("op"))))

    def _send(self, req: Mapping[str, Any]) -> int:
        """Send *req* with the next id; return the id."""
        if self._sock is None:
            self.connect()
        assert self._sock is not None
        rid = next(self._ids)
        self._send_line(_encode(req, rid))
        return rid

    def _send_line(self, line: bytes) -> None:
        """Send one encoded request line on the open socket (closing it if the send fails)."""
        assert self._sock is not None
        try:
            self._sock.sendall(line)
        except OSError as e:
            raise self._send_failed(e) from e

    def _send_failed(self, e: OSError) -> LinkemuControlError:
        self.close()
        if isinstance(e, BlockingIOError):  # SO_SNDTIMEO ran out
            return LinkemuControlError(f"linkemu control socket {self.path}: send timed out after {self.timeout:g} s")
        return LinkemuControlError(f"linkemu control socket {self.path}: {e}")

    def state(self, direction: str | None = None, *, max_flows: int | None = None,
              fields: Sequence[str] | None = None) -> dict[str, Any]:
        """``{"t_s": ..., "uplink": {...}, "downlink": {...}}`` (only *direction* if given; with *fields*,
        each direction holds only those of its keys: a shorter answer for an agent that reads a few)."""
        try:  # the same request every control interval: encoded once
            key = (direction, max_flows, fields)
            template = self._state_lines.get(key)
        except TypeError:  # unhashable (fields in a list): encoded each time
            key, template = None, None
        if template is None:
            req: dict[str, Any] = {"op": "state"}
            if direction is not None:
                req["dir"] = _direction(direction)
            if max_flows is not None:
                req["max_flows"] = max_flows
            if fields is not None:
                req["fields"] = list(fields)
            if key is None or len(self._state_lines) >= 16:
                return self.request(req)
            # json.dumps({**req, "id": ID}) with "%d" for ID (and any "%" in it doubled).
            template = (_dumps(req).replace("%", "%%")[:-1] + ',"id":%d}\n').encode()
            self._state_lines[key] = template
        return self._exchange(None, template, "state")

    def set(
        self,
        direction: str,
        *,
        default_limit_pkts: int | None = None,
        flows: Sequence[Mapping[str, Any]] | None = None,
        base_prob: float | str | None = None,
        prob_scale: float | None = None,
        k: float | None = None,
        hold_ms: float | None = None,
    ) -> dict[str, Any]:
        """Set parameters of *direction*'s qdisc (None: leave alone); return linkemu's ``applied``.

        lfq: *default_limit_pkts* (flows that start later) and *flows*, each
        ``{"queue": Q, "limit_pkts": N}`` or ``{"key": {"src", "dst", "proto", "sport", "dport"},
        "limit_pkts": N}`` (a flow's ``key`` from :meth:`state` works as is).  dualpi2:
        *base_prob* (0..1 fixes p', ``"auto"`` gives it back to the PI controller), *prob_scale* (1/16..16:
        the PI controller keeps running and p' is its value times this; a residual agent's action),
        *hold_ms* (with a numeric base_prob, a prob_scale or a k: a lease, after which the PI controller
        alone sets p' again and k is the configuration's unless renewed) and *k*.
        """
        req: dict[str, Any] = {"op": "set", "dir": _direction(direction)}
        for name, value in (("default_limit_pkts", default_limit_pkts), ("base_prob", base_prob),
                            ("prob_scale", prob_scale), ("k", k), ("hold_ms", hold_ms)):
            if value is not None:
                req[name] = value
        if flows is not None:
            req["flows"] = [dict(f) for f in flows]
        resp = self.request(req)
        applied: dict[str, Any] = resp["applied"]
        return applied

    def post_set(self, direction: str, **params: Any) -> None:
        """:meth:`set` without waiting for the answer (see :meth:`post`); None values are left out."""
        values = tuple(params.values())
        for v in values:
            t = type(v)
            if not ((t is float and v - v == 0.0) or t is int):
                break
        else:  # plain numbers (an agent's set every interval): the line from a template, as for state()
            fmt = None
            if direction in DIRECTIONS:
                key = (direction, *params)
                fmt = self._set_lines.get(key)
                if fmt is None and len(self._set_lines) < 16 and all(k in _NAMES or _plain(k) for k in params):
                    # json.dumps({"op": "set", "dir": D, **params, "id": ID}): json writes numbers as repr does
                    fmt = "".join((f'{{"op":"set","dir":"{direction}",', *(f'"{k}":%r,' for k in params),
                                   '"id":%d}\n'))
                    self._set_lines[key] = fmt
            if fmt is not None:
                if self._sock is None:
                    self.connect()
                rid = next(self._ids)
                self._send_line((fmt % (*values, rid)).encode())
                self._posted.append((rid, "set"))
                return
        self.post({"op": "set", "dir": _direction(direction), **{k: v for k, v in params.items() if v is not None}})

    def __repr__(self) -> str:
        return f"LinkemuControl({str(self.path)!r}, connected={self._sock is not None})"


def _encode(req: Mapping[str, Any], rid: int) -> bytes:
    """``json.dumps({**req, "id": rid}, separators=(",", ":"))`` and a newline, as bytes.  A flat request
    of plain names and finite numbers (an agent's state and set, every control interval) is formatted
    directly, to the same bytes: json writes ints and floats with their ``repr``, and ASCII identifiers
    as they are."""
    parts = []
    for k, v in req.items():
        if not (k in _NAMES or _plain(k)):
            break
        t = type(v)
        if (t is float and v - v == 0.0) or t is int:
            parts.append(f'"{k}":{v!r}')
        elif t is str and (v in _NAMES or _plain(v)):
            parts.append(f'"{k}":"{v}"')
        else:
            break
    else:
        parts.append(f'"id":{rid}')
        return ("{" + ",".join(parts) + "}\n").encode()
    return _dumps({**req, "id": rid}).encode() + b"\n"


def _plain(s: object) -> bool:
    """A string that JSON writes as it is, and not "id" (which _encode adds)."""
    return type(s) is str and s.isidentifier() and s.isascii() and s != "id"


def _direction(d: str) -> str:
    if d not in DIRECTIONS:
        raise ValueError(f"direction must be 'uplink' or 'downlink', got {d!r}")
    return d
