"""Client of linkemu's control socket: read queue state and set qdisc parameters while it runs.

linkemu listens when its config has ``"control": {"socket": "/path.sock"}`` (the socket
exists once linkemu has printed ``ready``).  The protocol (defined in
``testbed/linkemu/src/control/mod.rs``, examples in ``testbed/linkemu/README.md``) is one JSON
object per line each way over a UNIX stream socket; each request line gets exactly one response
line, in order:

* ``{"op": "state"}`` (optional ``"dir": "uplink" | "downlink"``, ``"max_flows": N``, default
  1024) answers ``{"ok": true, "t_s": T, "uplink": DIR, "downlink": DIR}``.  DIR has ``kind``,
  ``backlog_pkts``, ``backlog_bytes``, ``packets_in``, ``bytes_in``, ``packets_out``,
  ``bytes_out``, ``drops`` (per cause) and ``drops_total``, the qdisc's own values (dualpi2:
  ``base_prob``, ``pi`` "auto"/"manual", ``p_c``, ``p_cl``, ``k``, ``classic_pkts``,
  ``l4s_pkts``, ``classic_delay_ms``, ``l4s_delay_ms``, counters; lfq: ``default_limit_pkts``,
  ...) and, for per-flow qdiscs (lfq, fq, fq_codel, fq_pie), ``flows_active`` and ``flows``: one object
  per active flow with ``queue``, ``key`` (``src``, ``dst``, ``proto``, ``sport``, ``dport``),
  ``limit_pkts``, ``backlog_pkts``, and for lfq ``features`` (paper 001: ``queue_pkts``,
  ``queue_std_pkts``, ``limit_pkts``, ``in_rate_pps``, ``out_rate_pps``, ``since_loss_s``, 10
  averages each, weights in DIR's ``weights``).
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
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

__all__ = ["DIRECTIONS", "LinkemuControl", "LinkemuControlError"]

DIRECTIONS = ("uplink", "downlink")
MAX_LINE = 64 << 20
"""Longest response accepted (a state with thousands of lfq flows is a few MB)."""


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
        rid = self._send(req)
        for posted, op in self._posted:  # answers to post()ed requests come first, in order
            self._answer(posted, op)
        self._posted = []
        return self._answer(rid, str(req.get("op")))

    def post(self, req: Mapping[str, Any]) -> None:
        """Send a request without waiting for its answer; the next :meth:`request` reads and checks it
        first (a refusal then raises there).  Saves one round trip per control step for an agent
        that does not need the answer at once (``set`` every interval)."""
        rid = self._send(req)
        self._posted.append((rid, str(req.get("op"))))

    def _send(self, req: Mapping[str, Any]) -> int:
        self.connect()
        assert self._sock is not None
        rid = next(self._ids)
        line = json.dumps({**req, "id": rid}, separators=(",", ":")).encode() + b"\n"
        try:
            self._sock.sendall(line)
        except OSError as e:
            self.close()
            raise LinkemuControlError(f"linkemu control socket {self.path}: {e}") from e
        return rid

    def _answer(self, rid: int, op: str) -> dict[str, Any]:
        try:
            resp = json.loads(self._read_line())
        except TimeoutError as e:
            self.close()
            raise LinkemuControlError(f"no answer from linkemu within {self.timeout:g} s to {op}") from e
        except (OSError, ValueError) as e:
            self.close()
            raise LinkemuControlError(f"linkemu control socket {self.path}: {e}") from e
        if not isinstance(resp, dict) or resp.get("id") != rid:
            self.close()
            raise LinkemuControlError(f"unexpected answer (request id {rid}): {resp!r}")
        if resp.get("ok") is not True:
            raise LinkemuControlError(str(resp.get("error", resp)))
        return resp

    def _read_line(self) -> bytes:
        assert self._sock is not None
        while b"\n" not in self._buf:
            if len(self._buf) > MAX_LINE:
                raise ValueError(f"response longer than {MAX_LINE} bytes")
            chunk = self._sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("linkemu closed the connection")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line

    def state(self, direction: str | None = None, *, max_flows: int | None = None) -> dict[str, Any]:
        """``{"t_s": ..., "uplink": {...}, "downlink": {...}}`` (only *direction* if given)."""
        req: dict[str, Any] = {"op": "state"}
        if direction is not None:
            req["dir"] = _direction(direction)
        if max_flows is not None:
            req["max_flows"] = max_flows
        return self.request(req)

    def set(
        self,
        direction: str,
        *,
        default_limit_pkts: int | None = None,
        flows: Sequence[Mapping[str, Any]] | None = None,
        base_prob: float | str | None = None,
        k: float | None = None,
        hold_ms: float | None = None,
    ) -> dict[str, Any]:
        """Set parameters of *direction*'s qdisc (None: leave alone); return linkemu's ``applied``.

        lfq: *default_limit_pkts* (flows that start later) and *flows*, each
        ``{"queue": Q, "limit_pkts": N}`` or ``{"key": {"src", "dst", "proto", "sport", "dport"},
        "limit_pkts": N}`` (a flow's ``key`` from :meth:`state` works as is).  dualpi2:
        *base_prob* (0..1 fixes p', ``"auto"`` gives it back to the PI controller), *hold_ms* (with a
        numeric base_prob: a lease, after which the PI controller takes p' back unless renewed) and *k*.
        """
        req: dict[str, Any] = {"op": "set", "dir": _direction(direction)}
        for name, value in (("default_limit_pkts", default_limit_pkts), ("base_prob", base_prob), ("k", k),
                            ("hold_ms", hold_ms)):
            if value is not None:
                req[name] = value
        if flows is not None:
            req["flows"] = [dict(f) for f in flows]
        resp = self.request(req)
        applied: dict[str, Any] = resp["applied"]
        return applied

    def post_set(self, direction: str, **params: Any) -> None:
        """:meth:`set` without waiting for the answer (see :meth:`post`); None values are left out."""
        self.post({"op": "set", "dir": _direction(direction), **{k: v for k, v in params.items() if v is not None}})

    def __repr__(self) -> str:
        return f"LinkemuControl({str(self.path)!r}, connected={self._sock is not None})"


def _direction(d: str) -> str:
    if d not in DIRECTIONS:
        raise ValueError(f"direction must be 'uplink' or 'downlink', got {d!r}")
    return d
