"""Shared scaffolding for the benchmarks: a private netns and many live sockets."""

from __future__ import annotations

import contextlib
import os
import resource
import secrets
import socket
import statistics
from collections.abc import Iterator

from ccswitch.testbed.runs.netns import create_netns, delete_netns, entered


@contextlib.contextmanager
def private_netns(role: str = "bench") -> Iterator[str]:
    """A fresh namespace entered by this thread, so only our sockets are counted."""
    name = f"ccs-{secrets.token_hex(3)}-{role}"
    create_netns(name)
    try:
        with entered(name):
            yield name
    finally:
        delete_netns(name)


@contextlib.contextmanager
def socket_pairs(n: int) -> Iterator[list[socket.socket]]:
    """n established loopback TCP connections; yields the client ends.

    The accepting ends live in a forked child: each process then needs only
    n file descriptors, which keeps 10,000 connections under a 20,000 fd limit.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = min(n + 256, hard)
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4096)
    addr = srv.getsockname()
    ready_r, ready_w = os.pipe()
    stop_r, stop_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: accept n, report, hold them until told to stop
        try:
            os.close(ready_r)
            os.close(stop_w)
            held = [srv.accept()[0] for _ in range(n)]
            os.write(ready_w, b"1")
            os.read(stop_r, 1)
            del held
        finally:
            os._exit(0)
    os.close(ready_w)
    os.close(stop_r)
    srv.close()
    clients: list[socket.socket] = []
    try:
        for _ in range(n):
            clients.append(socket.create_connection(addr))
        if os.read(ready_r, 1) != b"1":
            raise RuntimeError("socket_pairs: the accepting child failed")
        yield clients
    finally:
        for c in clients:
            c.close()
        os.close(stop_w)
        os.close(ready_r)
        os.waitpid(pid, 0)


def pct(values: list[float], q: float) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]
