"""`ccswitch policy serve`: the policy server (asyncio, UDP).

Each datagram is checked completely on arrival (protocol.py: size, HMAC,
kind, time and replay windows, body ranges) and either refused -- counted,
one log line per (reason, source) the first time, an ERROR answer only to
authenticated, non-replayed senders -- or queued.  The queue is flushed
`batch_s` (default 2 ms) after the first request arrived, or at once when it
holds `max_batch` flows: all cwnd requests of the batch go through the cwnd
agent in one vectorised call, all CCA requests through the DQN in one
forward pass, then each client gets its own answer.  A request whose
deadline (its deadline_ms, counted from arrival; `default_deadline_s` when
0) passed before its answer was ready is dropped: its client has fallen back
already, and a late answer would only be refused as stale.

CCA_JOINT_REQ rows (ccswitchd's `policy.remote_joint`) are answered with the mean
Q-values of every flow the server has seen on the same path, frozen for an
epoch (joint.py: one decision per path); the whole batch is recorded before any
mean is taken, so daemons asking at the same moment see each other.

`added_latency_s` (`--added-latency-ms`) holds every answer that long before
sending it: an emulated control path for experiments (paper 003's second
stage delays each decision by the control RTT it measured in the first).

The server never crashes on input: every path from a datagram to an answer
is inside the checks above, and an agent that raises turns into an ERROR
answer (INTERNAL) for that batch, logged with its traceback once.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from ccswitch.remote import protocol as p
from ccswitch.remote.agents import CcaPolicy, CwndAgent
from ccswitch.remote.joint import NO_PATH, PathBoard

log = logging.getLogger("ccswitch.remote.server")

NO_ANSWER = frozenset({p.ErrorCode.SIZE, p.ErrorCode.MAGIC, p.ErrorCode.VERSION, p.ErrorCode.LENGTH,
                       p.ErrorCode.AUTH, p.ErrorCode.REPLAY, p.ErrorCode.TIME})
"""Refusals that get no answer: the sender is not authenticated, or the request is a replay."""


@dataclass
class Pending:
    header: p.Header
    addr: tuple[str, int]
    arrival: float
    obs: np.ndarray | None = None  # CWND_REQ
    flows: np.ndarray | None = None  # CCA_REQ, CCA_JOINT_REQ
    x: np.ndarray | None = None
    paths: np.ndarray | None = None  # CCA_JOINT_REQ


@dataclass
class ServerStats:
    requests: Counter[str] = field(default_factory=Counter)  # accepted, by kind
    refused: Counter[str] = field(default_factory=Counter)  # by ErrorCode name
    answered: int = 0
    late: int = 0
    batches: int = 0
    flows: int = 0
    joint_flows: int = 0  # rows answered with their path's mean (CCA_JOINT_REQ)

    def as_dict(self) -> dict[str, object]:
        return {"requests": dict(self.requests), "refused": dict(self.refused), "answered": self.answered,
                "late": self.late, "batches": self.batches, "flows": self.flows, "joint_flows": self.joint_flows}


class PolicyServer(asyncio.DatagramProtocol):
    def __init__(self, key: bytes, cwnd_agent: CwndAgent, cca: CcaPolicy | None, *, batch_s: float = 0.002,
                 max_batch: int = 4096, default_deadline_s: float = 0.1,
                 time_window_s: float = p.TIME_WINDOW_S, added_latency_s: float = 0.0) -> None:
        self.key = key
        self.cwnd_agent = cwnd_agent
        self.cca = cca
        self.batch_s = batch_s
        self.max_batch = max_batch
        self.default_deadline_s = default_deadline_s
        self.added_latency_s = added_latency_s  # experiments only: every answer held this long
        self.guard = p.ReplayGuard(time_window_s)
        self.stats = ServerStats()
        self.transport: asyncio.DatagramTransport | None = None
        self._pending: list[Pending] = []
        self._pending_flows = 0
        self._timer: asyncio.TimerHandle | None = None
        self._logged: set[tuple[str, str]] = set()
        self.board = PathBoard()

    # -- asyncio.DatagramProtocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def error_received(self, exc: Exception) -> None:  # ICMP errors of earlier answers: nothing to do
        log.debug("socket error: %s", exc)

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        arrival = time.monotonic()
        try:
            req = self.accept(data, addr, arrival)
        except p.ProtocolError as e:
            self.refuse(e, addr, data)
            return
        self._pending.append(req)
        self._pending_flows += req.header.count
        if self._pending_flows >= self.max_batch:
            self.flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.batch_s, self.flush)

    # -- checks
    def accept(self, data: bytes, addr: tuple[str, int], arrival: float) -> Pending:
        """A checked request (the replay window updated), or ProtocolError with nothing changed."""
        m = p.open_datagram(self.key, data)
        h = m.header
        if h.kind not in p.REQUESTS:
            raise p.ProtocolError(p.ErrorCode.KIND, f"client {h.client_id}: a {h.kind.name} is not a request")
        self.guard.check(h)
        req = Pending(h, addr, arrival)
        if h.kind == p.Kind.CWND_REQ:
            req.obs = p.decode_cwnd_obs(m)
        else:
            if self.cca is None:
                raise p.ProtocolError(p.ErrorCode.POLICY, "this server has no CCA policy (--no-cca)")
            if h.kind == p.Kind.CCA_JOINT_REQ:
                pid, req.flows, req.paths, req.x = p.decode_cca_joint_req(m)
            else:
                pid, req.flows, req.x = p.decode_cca_req(m)
            if pid != self.cca.policy_id or req.x.shape[1] != self.cca.n_features:
                raise p.ProtocolError(p.ErrorCode.POLICY, f"client {h.client_id}: features for policy "
                                                          f"{pid.hex()} ({req.x.shape[1]} features); this "
                                                          f"server runs {self.cca.policy_id.hex()} "
                                                          f"({self.cca.n_features})")
        self.guard.commit(h)
        self.stats.requests[h.kind.name] += 1
        return req

    def refuse(self, e: p.ProtocolError, addr: tuple[str, int], data: bytes) -> None:
        self.stats.refused[e.code.name] += 1
        what = (e.code.name, addr[0])
        if what not in self._logged:
            self._logged.add(what)
            log.warning("refused a datagram from %s:%d: %s (further %s refusals from %s are only counted)",
                        addr[0], addr[1], e, e.code.name, addr[0])
        if e.code in NO_ANSWER:
            return
        try:
            h = p.open_datagram(self.key, data).header
        except p.ProtocolError:
            return
        self.send_error(h, addr, e.code, str(e))

    # -- answers
    def flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        batch, self._pending, self._pending_flows = self._pending, [], 0
        if not batch:
            return
        now = time.monotonic()
        live = []
        for r in batch:
            budget = r.header.deadline_ms / 1000 if r.header.deadline_ms else self.default_deadline_s
            if now - r.arrival > budget:
                self.stats.late += 1
            else:
                live.append(r)
        self.stats.batches += 1
        self.answer_cwnd([r for r in live if r.obs is not None])
        self.answer_cca([r for r in live if r.flows is not None])

    def answer_cwnd(self, reqs: list[Pending]) -> None:
        if not reqs:
            return
        obs = np.concatenate([r.obs for r in reqs if r.obs is not None])
        try:
            dec = self.cwnd_agent.decide(obs)
            if len(dec) != len(obs):
                raise ValueError(f"agent {self.cwnd_agent.name} returned {len(dec)} decisions for {len(obs)}")
        except Exception as e:
            self.agent_failed(reqs, e)
            return
        self.stats.flows += len(obs)
        start = 0
        for r in reqs:
            n = r.header.count
            self.send(r, p.Kind.CWND_RESP, p.encode_cwnd_dec(dec[start:start + n]), n)
            start += n

    def answer_cca(self, reqs: list[Pending]) -> None:
        if not reqs or self.cca is None:
            return
        x = np.concatenate([r.x for r in reqs if r.x is not None])
        try:
            q = self.cca.q_values(x)
        except Exception as e:
            self.agent_failed(reqs, e)
            return
        self.stats.flows += len(x)
        starts = np.cumsum([0] + [r.header.count for r in reqs])
        joint = [i for i, r in enumerate(reqs) if r.paths is not None]
        if joint:  # one decision per path: record the whole batch, then answer with the path means
            now = time.monotonic()
            self.board.expire(now)
            for i in joint:
                r = reqs[i]
                assert r.flows is not None and r.paths is not None
                self.board.record(r.header.client_id, r.flows, r.paths, q[starts[i]:starts[i + 1]], now)
                self.stats.joint_flows += int((r.paths != NO_PATH).sum())
            rows = np.concatenate([np.arange(starts[i], starts[i + 1]) for i in joint])
            paths = np.concatenate([reqs[i].paths for i in joint])  # type: ignore[misc]
            q[rows] = self.board.means(paths, q[rows], now)  # one pass over the board for the whole batch
        for i, r in enumerate(reqs):
            assert r.flows is not None
            self.send(r, p.Kind.CCA_RESP, p.encode_cca_resp(self.cca.actions, r.flows, q[starts[i]:starts[i + 1]]),
                      r.header.count)

    def agent_failed(self, reqs: list[Pending], e: Exception) -> None:
        if ("agent", type(e).__name__) not in self._logged:
            self._logged.add(("agent", type(e).__name__))
            log.error("the agent failed on a batch of %d requests: %s", len(reqs), e, exc_info=e)
        for r in reqs:
            self.send_error(r.header, r.addr, p.ErrorCode.INTERNAL, f"agent failed: {type(e).__name__}")

    def send(self, r: Pending, kind: p.Kind, body: bytes, count: int) -> None:
        h = r.header
        data = p.seal(self.key, kind, body, count=count, client_id=h.client_id, seq=h.seq)
        if self.transport is None:
            return
        if self.added_latency_s > 0:
            asyncio.get_running_loop().call_later(self.added_latency_s, self.transport.sendto, data, r.addr)
        else:
            self.transport.sendto(data, r.addr)
        self.stats.answered += 1

    def send_error(self, h: p.Header, addr: tuple[str, int], code: p.ErrorCode, text: str) -> None:
        body = text.encode()[:512]
        data = p.seal(self.key, p.Kind.ERROR, body, count=int(code), client_id=h.client_id, seq=h.seq)
        if self.transport is not None:
            self.transport.sendto(data, addr)


def parse_hostport(text: str, default_port: int = 7070) -> tuple[str, int]:
    """HOST:PORT ([v6]:PORT for IPv6) -> (host, port); one ValueError naming the problem."""
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = text, str(default_port)
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{text!r} is not HOST:PORT (e.g. 127.0.0.1:7070)")
    return host, int(port)


async def serve(server: PolicyServer, listen: tuple[str, int], *, tos: int = 0,
                ready: asyncio.Event | None = None, stop: asyncio.Event | None = None) -> None:
    """Run *server* on *listen* until *stop* is set (forever if None)."""
    loop = asyncio.get_running_loop()
    family = socket.AF_INET6 if ":" in listen[0] else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_DGRAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        if tos:
            sock.setsockopt(socket.IPPROTO_IP if family == socket.AF_INET else socket.IPPROTO_IPV6,
                            socket.IP_TOS if family == socket.AF_INET else socket.IPV6_TCLASS, tos)
        sock.bind(listen)
    except BaseException:
        sock.close()
        raise
    transport, _ = await loop.create_datagram_endpoint(lambda: server, sock=sock)
    try:
        if ready is not None:
            ready.set()
        await (stop.wait() if stop is not None else asyncio.Future())
    finally:
        transport.close()
