"""daemon/server.py: silent control connections expire without help from other clients.

Fast, no root: a real ControlServer on a socket in tmp_path.  The flood through a running
daemon is tests/test_faults.py::test_control_socket_flood_of_1000_clients.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import pytest

from ccswitch.daemon import server as server_mod
from ccswitch.daemon.server import MAX_PENDING, ControlServer


@pytest.fixture()
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(server_mod, "REQUEST_TIMEOUT_S", 0.2)
    s = ControlServer(tmp_path / "c.sock", lambda op, args: {"op": op}, allowed_uid=os.getuid())
    s.open()
    yield s
    s.close()


def silent_clients(path: Path, n: int) -> list[socket.socket]:
    out = []
    for _ in range(n):
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.connect(str(path))
        out.append(c)
    return out


def test_silent_connections_give_back_their_descriptors_on_the_tick(server: ControlServer) -> None:
    clients = silent_clients(server.path, 10)
    server.serve_ready()
    fds = len(os.listdir("/proc/self/fd"))
    time.sleep(0.3)
    server.drop_expired()  # what the daemon's tick calls; no other client came
    assert len(os.listdir("/proc/self/fd")) == fds - 10
    for c in clients:
        c.settimeout(1)
        assert c.recv(1) == b""  # closed by the server
        c.close()


def test_a_full_queue_of_expired_connections_does_not_refuse_the_next_client(server: ControlServer) -> None:
    clients = silent_clients(server.path, 16)  # the listen backlog; accept, then fill up to MAX_PENDING
    for _ in range(MAX_PENDING // 16):
        server.serve_ready()
        clients += silent_clients(server.path, 16)
    server.serve_ready()
    assert len(server._pending) == MAX_PENDING
    time.sleep(0.3)
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.connect(str(server.path))
    c.sendall(b'{"op": "status", "args": {}}\n')
    server.serve_ready()
    server.serve_pending()
    c.settimeout(1)
    answer = json.loads(c.recv(1 << 16))
    assert answer["ok"] is True and answer["result"] == {"op": "status"}, answer
    for s in (*clients, c):
        s.close()
