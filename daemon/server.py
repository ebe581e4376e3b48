"""The control socket: root-only UNIX socket serving daemon/protocol.py requests.

Runs inside the daemon's single thread: the main loop waits on the
listening socket between ticks (selectors) and serves one request per
ready connection, so a request never races a tick.  Permissions: the
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
import socket
import stat
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ccswitch.daemon.protocol import VERSION, ProtocolError, clean, encode, read_message

log = logging.getLogger("ccswitchd")
REQUEST_TIMEOUT_S = 2.0
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


class ControlServer:
    """The daemon's control socket: root (allowed_uid) may do everything; members of `read_gid`
    (daemon.read_group) only the READ_OPS; everyone else gets a one-line refusal."""

    def __init__(self, path: str | Path, handler: Handler, allowed_uid: int = 0, read_gid: int | None = None):
        self.path = Path(path)
        self.handler = handler
        self.allowed_uid = allowed_uid
        self.read_gid = read_gid
        self.sock: socket.socket | None = None

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

    def serve_ready(self) -> None:
        """Accept and serve every pending connection."""
        assert self.sock is not None
        while True:
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            with conn:
                self._serve(conn)

    def _serve(self, conn: socket.socket) -> None:
        conn.setblocking(True)
        conn.settimeout(REQUEST_TIMEOUT_S)
        try:
            pid, uid, gid = peer_creds(conn)
            reader = uid != self.allowed_uid and self.read_gid is not None and in_group(pid, self.read_gid, gid)
            if uid != self.allowed_uid and not reader:
                log.warning("control request refused", extra={"fields": {"uid": uid}})
                who = "root" if self.read_gid is None else f"root and (read-only) group {self.read_gid}"
                conn.sendall(encode({"v": VERSION, "ok": False, "error": f"permission denied: the ccswitchd control "
                                     f"socket only answers {who}; rerun with sudo"}))
                return
            try:
                req = read_message(conn)
                op = req.get("op")
                args = req.get("args") or {}
                if not isinstance(op, str) or not isinstance(args, dict):
                    raise ProtocolError("request needs 'op' (string) and 'args' (object)")
            except ProtocolError as e:  # a malformed request gets its one-line answer, then the connection ends
                conn.sendall(encode({"v": VERSION, "ok": False, "error": f"bad request: {e}"}))
                return
            if reader and op not in READ_OPS:
                log.warning("control request refused", extra={"fields": {"uid": uid, "op": op}})
                conn.sendall(encode({"v": VERSION, "ok": False, "error": f"permission denied: '{op}' changes the "
                                     "daemon's state and is root-only (daemon.read_group allows status, flows, "
                                     "history, policy); rerun with sudo"}))
                return
            try:
                result = self.handler(op, args)
                resp = {"v": VERSION, "ok": True, "result": clean(result)}
            except (ValueError, KeyError, ProtocolError) as e:
                msg = str(e).replace("\n", " ") if not isinstance(e, KeyError) else f"missing argument {e}"
                resp = {"v": VERSION, "ok": False, "error": msg}
            except Exception as e:  # a bug in a handler must not kill the daemon
                log.exception("control request failed", extra={"fields": {"op": op}})
                resp = {"v": VERSION, "ok": False, "error": f"internal error in {op}: {type(e).__name__}: {e}"}
            conn.sendall(encode(resp))
        except (OSError, ProtocolError) as e:
            log.debug("control connection dropped", extra={"fields": {"error": str(e)}})

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
            with contextlib.suppress(OSError):
                self.path.unlink()
