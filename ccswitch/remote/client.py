"""The policy server's client: ask with a deadline, fall back locally, never raise.

`PolicyClient.cwnd(obs, local)` and `PolicyClient.cca(flows, x, local)` send
one request and wait at most `deadline_s` for the answer to *that* request
(same client id and seq, authenticated, every value in range).  Whatever
goes wrong -- no answer in time, the server unreachable (ICMP refused), a
datagram that fails the checks, an ERROR answer -- the call returns the
local decision instead (`local(...)`, or None when the caller has no local
policy: the `remote` CC then falls back in the kernel at its deadline).

Every fallback is counted by reason (`fallbacks`); the first one of an
outage is logged as one warning (at most one a minute), the rest of the
outage only counted, and the first answer after it is logged once (info)
with the outage's length.  Answers that
arrive after their request gave up (seq of an earlier request) are dropped
and counted as `stale`.

Control traffic class: `tos` sets the IP TOS byte of the requests, e.g.
L4S_TOS = DSCP 40 with ECT(1) (the testbed's DualPI2 classifies by either),
or 0 for classic.
"""

from __future__ import annotations

import logging
import select
import socket
import time
from collections import Counter, deque
from collections.abc import Callable

import numpy as np

from ccswitch.remote import protocol as p

log = logging.getLogger("ccswitch.remote.client")

ECT1 = 0x01
L4S_TOS = (40 << 2) | ECT1  # DSCP 40 (bpf/prague.h PRAGUE_DSCP) + ECT(1)
WARN_EVERY_S = 60.0


class PolicyClient:
    def __init__(self, server: tuple[str, int], key: bytes, *, deadline_s: float = 0.05,
                 client_id: int | None = None, tos: int = 0, cwnd_max: int = p.CWND_MAX) -> None:
        self.server = server
        self.key = key
        self.deadline_s = deadline_s
        self.client_id = client_id if client_id is not None else p.random_client_id()
        self.cwnd_max = cwnd_max
        # seq starts at the wall clock in us: a restarted client is never taken for a replay
        self.seq = time.time_ns() // 1000
        self.fallbacks: Counter[str] = Counter()
        self.answers = 0
        self.stale = 0
        self._failing = 0
        self._warned_at: float | None = None
        self.last_rtt_s: float | None = None
        self.rtts_s: deque[float] = deque(maxlen=4096)  # request to answer, the last 4096 answers
        self.rtts_total = 0  # answers ever timed (rtts_s keeps the last 4096): the metrics' new-answer cursor
        family = socket.AF_INET6 if ":" in server[0] else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_DGRAM)
        if tos:
            if family == socket.AF_INET:
                self.sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
            else:
                self.sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_TCLASS, tos)
        self.sock.setblocking(False)
        try:
            self.sock.connect(server)  # connected: ICMP port unreachable surfaces as ECONNREFUSED
        except OSError as e:
            self._note_fallback("unreachable", f"cannot reach {server[0]}:{server[1]} ({e.strerror})")

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> PolicyClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the two questions
    def cwnd(self, obs: np.ndarray, local: Callable[[np.ndarray], np.ndarray] | None
             ) -> tuple[np.ndarray | None, bool]:
        """(CWND_DEC records for *obs*, True if the server decided); the local ones on any failure."""
        m = self._exchange(p.Kind.CWND_REQ, p.encode_cwnd_obs(obs), len(obs))
        if m is not None:
            try:
                dec = p.decode_cwnd_dec(m, cwnd_max=self.cwnd_max)
                if not np.array_equal(dec["cookie"], obs["cookie"]):
                    raise p.ProtocolError(p.ErrorCode.BODY, "cwnd answer: not for the flows asked about")
                return self._answered(dec), True
            except p.ProtocolError as e:
                self._note_fallback("garbage", str(e))
        return (local(obs) if local is not None else None), False

    def cca(self, policy_id: bytes, flows: np.ndarray, x: np.ndarray,
            local: Callable[[np.ndarray], np.ndarray] | None,
            paths: np.ndarray | None = None) -> tuple[np.ndarray | None, bool]:
        """(Q-values [N, A] for feature rows *x*, True if the server decided); local(x) on any failure.

        With *paths* (a path key per row, joint.path_keys) the request is a CCA_JOINT_REQ: the
        answer is the mean over every flow the server knows on each row's path."""
        x = np.asarray(x, dtype=np.float32)
        kind = p.Kind.CCA_REQ if paths is None else p.Kind.CCA_JOINT_REQ
        m = self._exchange(kind, p.encode_cca_req(policy_id, flows, x, paths), len(flows))
        if m is not None:
            try:
                _, got, _, q = p.decode_cca_resp(m)
                if not np.array_equal(got, flows):
                    raise p.ProtocolError(p.ErrorCode.BODY, "cca answer: not for the flows asked about")
                return self._answered(q), True
            except p.ProtocolError as e:
                self._note_fallback("garbage", str(e))
        return (local(x) if local is not None else None), False

    # -- one round trip
    def _exchange(self, kind: p.Kind, body: bytes, count: int) -> p.Message | None:
        self.seq += 1
        seq = self.seq
        t0 = time.monotonic()
        end = t0 + self.deadline_s
        try:
            data = p.seal(self.key, kind, body, count=count, client_id=self.client_id, seq=seq,
                          deadline_ms=max(1, min(65535, int(self.deadline_s * 1000))))
            self._drain()
            self.sock.send(data)
        except (OSError, ValueError) as e:
            self._note_fallback("unreachable", f"send failed: {e}")
            return None
        while True:
            left = end - time.monotonic()
            if left <= 0:
                self._note_fallback("timeout", f"no answer within {self.deadline_s * 1000:.0f} ms")
                return None
            try:
                ready, _, _ = select.select([self.sock], [], [], left)
                if not ready:
                    continue
                raw = self.sock.recv(p.MAX_DATAGRAM + 1)
            except ConnectionRefusedError:
                self._note_fallback("unreachable", f"{self.server[0]}:{self.server[1]} refused (no server)")
                return None
            except OSError as e:
                self._note_fallback("unreachable", f"receive failed: {e}")
                return None
            try:
                m = p.open_datagram(self.key, raw)
            except p.ProtocolError as e:
                self._note_fallback("garbage", str(e), count=False)  # may be noise: keep waiting
                continue
            h = m.header
            if h.client_id != self.client_id or h.seq != seq:
                self.stale += 1
                continue
            if h.kind == p.Kind.ERROR:
                self._note_fallback("refused", m.body.decode(errors="replace"))
                return None
            if h.kind != p.ANSWER_TO[kind]:
                self._note_fallback("garbage", f"a {h.kind.name} answered a {kind.name}")
                return None
            self.last_rtt_s = time.monotonic() - t0
            self.rtts_s.append(self.last_rtt_s)
            self.rtts_total += 1
            return m

    def _drain(self) -> None:
        """Drop answers that arrived after their request gave up."""
        while True:
            try:
                self.sock.recv(p.MAX_DATAGRAM + 1)
                self.stale += 1
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # an ICMP error of an earlier request: the next send will tell
                return

    # -- bookkeeping
    def _answered(self, out: np.ndarray) -> np.ndarray:
        self.answers += 1
        if self._failing:
            log.info("policy server %s:%d answering again after %d fallback(s) (so far by reason: %s)",
                     *self.server, self._failing, dict(self.fallbacks))
            self._failing = 0
        return out

    def _note_fallback(self, reason: str, detail: str, *, count: bool = True) -> None:
        """Count a fallback; warn at the start of an outage (at most every WARN_EVERY_S), else only count."""
        if not count:
            log.debug("policy server %s:%d: ignored a datagram (%s)", *self.server, detail)
            return
        self.fallbacks[reason] += 1
        now = time.monotonic()
        if self._failing == 0 and (self._warned_at is None or now - self._warned_at >= WARN_EVERY_S):
            self._warned_at = now
            log.warning("policy server %s:%d: %s (%s); using the local decision until it answers again, "
                        "further fallbacks are only counted", *self.server, reason, detail)
        self._failing += 1
