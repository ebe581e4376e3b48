"""The control socket: root-only UNIX socket serving daemon/protocol.py requests.

Runs inside the daemon's single thread, so a request never races a tick,
and never blocks it: the main loop waits (selectors) on the listening socket
and on `pending_fileno()`, an epoll set of the accepted connections whose
request has not fully arrived.  A connection is read as its bytes come, is
answered as soon as its request is complete, and is closed unanswered after
REQUEST_TIMEOUT_S; at most MAX_PENDING wait at once (more get a one-line
"busy" answer), so 1,000 silent clients cost the daemon nothing but fds for
two seconds.  Permissions: the
directory is created 0700, the socket chmod 0600 before listen(), and every
peer's SO_PEERCRED uid must be 0 (a root-owned socket file alone would
still admit processes with CAP_DAC_OVERRIDE in other user namespaces).

A socket file left by a killed daemon is removed at start after checking
that nothing answers on it; a live one means another daemon: refuse.
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import socket
import stat
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ccswitch.daemon.protocol import MAX_MESSAGE, VERSION, ProtocolError, clean, decode_message, encode

log = logging.getLogger("ccswitchd")
REQUEST_TIMEOUT_S = 2.0  # a request must arrive whole within this; the answer must be taken within it
MAX_PENDING = 64  # connections waiting for their request at once
Handler = Callable[[str, dict[str, Any]], Any]


class ServerError(RuntimeError):
    pass


READ_OPS = frozenset({"status", "flows", "history", "policy_show", "explain"})
"""Requests that change nothing: what members of daemon.read_group may send."""


def peer_creds(conn: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the peer process (SO_PEERCRED)."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", creds)
    return pid, uid, gid


def peer_uid(conn: socket.socket) -> int:
    return peer_creds(conn)[1]


def in_group(pid: int, gid: int, primary: int) -> bool:
    """Is the peer a member of group *gid*: its primary group, or one of its supplementary groups
    (/proc/PID/status, read while the peer is connected)."""
    if primary == gid:
        return True
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Groups:"):
                    return str(gid) in line.split()[1:]
    except OSError:
        pass
    return False


@dataclass
class _Pending:
    """An accepted connection whose request is still arriving."""

    conn: socket.socket
    buf: bytearray
    deadline: float
    uid: int
    reader: bool  # a read_group member, not root: READ_OPS only


class ControlServer:
    """The daemon's control socket: root (allowed_uid) may do everything; members of `read_gid`
    (daemon.read_group) only the READ_OPS; everyone else gets a one-line refusal."""

    def __init__(self, path: str | Path, handler: Handler, allowed_uid: int = 0, read_gid: int | None = None):
        self.path = Path(path)
        self.handler = handler
        self.allowed_uid = allowed_uid
        self.read_gid = read_gid
        self.sock: socket.socket | None = None
        self._sel = selectors.EpollSelector()
        self._pending: dict[int, _Pending] = {}
        self._busy = False  # refusing as busy (logged once per flood)

    def open(self) -> None:
        p = self.path
        try:
            if not p.parent.exists():
                p.parent.mkdir(parents=True, mode=0o700)
            if p.exists() or p.is_symlink():
                if not stat.S_ISSOCK(p.lstat().st_mode):
                    raise ServerError(f"{p} exists and is not a socket; remove it or set daemon.socket elsewhere")
                probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    probe.connect(str(p))
                    raise ServerError(f"another ccswitchd answers on {p}; stop it first (one daemon per socket)")
                except (ConnectionRefusedError, FileNotFoundError):
                    p.unlink(missing_ok=True)  # stale: left by a killed daemon
                    log.info("stale control socket removed", extra={"fields": {"path": str(p)}})
                finally:
                    probe.close()
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
            old = os.umask(0o177)
            try:
                s.bind(str(p))
            finally:
                os.umask(old)
            if self.read_gid is None:
                os.chmod(p, 0o600)
            else:  # the group reaches the socket: group-owned socket (rw) and directory (x)
                os.chown(p, -1, self.read_gid)
                os.chmod(p, 0o660)
                os.chown(p.parent, -1, self.read_gid)
                os.chmod(p.parent, (p.parent.stat().st_mode & 0o700) | 0o050)
            s.listen(16)
            s.setblocking(False)
            self.sock = s
        except OSError as e:
            raise ServerError(f"cannot open the control socket {p}: {e.strerror}; set daemon.socket or --socket "
                              "to a writable place") from None

    def fileno(self) -> int:
        assert self.sock is not None
        return self.sock.fileno()

    def pending_fileno(self) -> int:
        """Readable when a waiting connection has bytes (or hung up): then call serve_pending()."""
        return self._sel.fileno()

    def serve_ready(self) -> None:
        """Accept every pending connection: refuse strangers at once, queue the others."""
        assert self.sock is not None
        self.drop_expired()
        while True:
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            self.accept_connection(conn)

    def accept_connection(self, conn: socket.socket) -> None:
        """Check the peer and queue the connection for its request (or answer and close it)."""
        try:
            pid, uid, gid = peer_creds(conn)
            reader = uid != self.allowed_uid and self.read_gid is not None and in_group(pid, self.read_gid, gid)
            if uid != self.allowed_uid and not reader:
                log.warning("control request refused", extra={"fields": {"uid": uid}})
                who = "root" if self.read_gid is None else f"root and (read-only) group {self.read_gid}"
                self._answer(conn, {"v": VERSION, "ok": False, "error": f"permission denied: the ccswitchd control "
                                    f"socket only answers {who}; rerun with sudo"})
                return
            if len(self._pending) >= MAX_PENDING:
                if not self._busy:
                    self._busy = True
                    log.warning("control socket flooded: refusing new connections as busy",
                                extra={"fields": {"waiting": len(self._pending)}})
                self._answer(conn, {"v": VERSION, "ok": False, "error": f"busy: {MAX_PENDING} control connections "
                                    "are waiting; retry in a moment"})
                return
            if self._busy and len(self._pending) < MAX_PENDING // 2:
                self._busy = False
                log.info("control socket: flood over, serving again")
        except OSError as e:
            log.debug("control connection dropped", extra={"fields": {"error": str(e)}})
            conn.close()
            return
        conn.setblocking(False)
        self._pending[conn.fileno()] = _Pending(conn, bytearray(), time.monotonic() + REQUEST_TIMEOUT_S,
                                                uid, reader)
        self._sel.register(conn, selectors.EVENT_READ, conn.fileno())

    def serve_pending(self) -> None:
        """Read what arrived on waiting connections; answer the complete requests; drop the expired."""
        for key, _ in self._sel.select(0):
            p = self._pending.get(key.data)
            if p is None:
                continue
            try:
                chunk = p.conn.recv(1 << 16)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError as e:
                log.debug("control connection dropped", extra={"fields": {"error": str(e)}})
                self._drop(p)
                continue
            p.buf += chunk
            if len(p.buf) > MAX_MESSAGE:
                self._finish(p, {"v": VERSION, "ok": False, "error": "bad request: message too large"})
            elif not chunk or p.buf.endswith(b"\n"):
                self._finish(p, self._respond(p))
        self.drop_expired()

    def drop_expired(self) -> None:
        """Close the connections whose request did not arrive in time.  Called on every daemon tick
        as well, so silent connections give back their descriptors when nothing else arrives, and
        before a new connection is counted against MAX_PENDING, so that they never make it busy."""
        now = time.monotonic()
        for p in [p for p in self._pending.values() if now > p.deadline]:
            log.debug("control connection timed out", extra={"fields": {"uid": p.uid}})
            self._drop(p)

    def _respond(self, p: _Pending) -> dict[str, Any]:
        """The answer to a complete request (validated, permission-checked, handled)."""
        try:
            req = decode_message(bytes(p.buf))
            op = req.get("op")
            args = req.get("args") or {}
            if not isinstance(op, str) or not isinstance(args, dict):
                raise ProtocolError("request needs 'op' (string) and 'args' (object)")
        except ProtocolError as e:  # a malformed request gets its one-line answer, then the connection ends
            return {"v": VERSION, "ok": False, "error": f"bad request: {e}"}
        if p.reader and op not in READ_OPS:
            log.warning("control request refused", extra={"fields": {"uid": p.uid, "op": op}})
            return {"v": VERSION, "ok": False, "error": f"permission denied: {op!r} changes the daemon's state and "
                    "is root-only (daemon.read_group allows status, flows, history, policy); rerun with sudo"}
        try:
            return {"v": VERSION, "ok": True, "result": clean(self.handler(op, args))}
        except (ValueError, KeyError, ProtocolError) as e:
            msg = str(e).replace("\n", " ") if not isinstance(e, KeyError) else f"missing argument {e}"
            return {"v": VERSION, "ok": False, "error": msg}
        except Exception as e:  # a bug in a handler must not kill the daemon
            log.exception("control request failed", extra={"fields": {"op": op}})
            msg = f"internal error in {op!r}: {type(e).__name__}: {e}".replace("\n", " ")
            return {"v": VERSION, "ok": False, "error": msg}

    def _finish(self, p: _Pending, resp: dict[str, Any]) -> None:
        self._sel.unregister(p.conn)
        del self._pending[p.conn.fileno()]
        self._answer(p.conn, resp)

    def _answer(self, conn: socket.socket, resp: dict[str, Any]) -> None:
        """Send and close; a client that does not take its answer within the timeout loses it."""
        try:
            conn.setblocking(True)
            conn.settimeout(REQUEST_TIMEOUT_S)
            conn.sendall(encode(resp))
        except OSError as e:
            log.debug("control answer not delivered", extra={"fields": {"error": str(e)}})
        finally:
            conn.close()

    def _drop(self, p: _Pending) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self._sel.unregister(p.conn)
        self._pending.pop(p.conn.fileno(), None)
        p.conn.close()

    def close(self) -> None:
        for p in list(self._pending.values()):
            self._drop(p)
        self._sel.close()
        if self.sock is not None:
            self.sock.close()
            self.sock = None
            with contextlib.suppress(OSError):
                self.path.unlink()
