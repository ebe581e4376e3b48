"""The policy server's wire protocol: framing, authentication, replay protection, checks.

One request or answer is one UDP datagram::

    offset  size  field
    0       4     magic        b"CCRP"
    4       1     version      1
    5       1     kind         CWND_REQ 1, CWND_RESP 2, CCA_REQ 3, CCA_RESP 4, ERROR 5, CCA_JOINT_REQ 6
    6       2     count        records in the body (ERROR: the error code)
    8       4     client_id    chosen by the client; names its replay window on the server
    12      8     seq          per client, increasing; an answer echoes its request's
    20      8     time_ms      sender's wall clock, Unix ms (requests outside +-window_s are refused)
    28      2     deadline_ms  request: answer within this long after arrival or not at all
    30      2     body_len     bytes of body
    32      N     body         records, little-endian, below
    32+N    32    tag          HMAC-SHA256(key, bytes 0 .. 32+N)

Bodies (all integers unsigned little-endian; f4 = IEEE float32):

* CWND_REQ: `count` x CWND_OBS (56 bytes): cookie u8, step_us u4, cwnd u4, ssthresh u4,
  mss u4, inflight u4, acked u4, lost u4, ce u4, srtt_us u4, min_rtt_us u4, rtt_avg_us u4,
  inflight_avg u4 -- one socket's state over the last step (packets unless named).
* CWND_RESP: `count` x CWND_DEC (24 bytes): cookie u8, cwnd u4, ssthresh u4, max_pacing_Bps u8.
* CCA_REQ: policy_id 8 bytes (first 8 bytes of the policy file's sha256 checksum, so that
  features normalised for another policy are refused), n_features u2, 6 bytes zero, then
  `count` x (flow u8, n_features x f4).
* CCA_JOINT_REQ: as CCA_REQ, each record (flow u8, path u8, n_features x f4): `path` names the
  flow's path (ccswitch/remote/joint.py: a hash of the remote address), `flow` the daemon's flow
  id; answered by a CCA_RESP whose Q-values are the mean over the path's flows of every client.
* CCA_RESP: n_actions u1, 7 bytes zero, n_actions x 16-byte NUL-padded ASCII names, then
  `count` x (flow u8, action u1, 3 bytes zero, n_actions x f4 Q-values).
* ERROR: UTF-8 text; `count` is the ErrorCode.

Checks, in this order, each failing with one ProtocolError naming what is wrong:
size (HEADER + TAG .. MAX_DATAGRAM), magic, version, body_len, the HMAC (before
anything else is read: an unauthenticated datagram is never interpreted), kind,
time window, replay window, then the body (counts, lengths, value ranges, finite
floats).  The replay window of a client (the highest seq seen and a 64-bit
bitmap of the ones below it, as IPsec's) is only updated after the whole request
passed, so a rejected datagram never changes the server's state.

Why not a framing library: the messages are fixed-layout arrays of numbers that
numpy reads in one call; struct and numpy are all it takes, and a fixed layout
is what makes the length and range checks complete.  hmac/hashlib are stdlib.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import os
import stat
import struct
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MAGIC = b"CCRP"
VERSION = 1
HEADER = struct.Struct("<4sBBHIQQHH")
TAG_LEN = 32
MAX_DATAGRAM = 65507  # largest UDP payload over IPv4
MAX_RECORDS = 1024
MAX_FEATURES = 1024
MAX_ACTIONS = 16
NAME_LEN = 16
MIN_KEY_LEN = 16
CWND_MAX = 1 << 24  # packets: anything larger is garbage, whatever the path
TIME_WINDOW_S = 10.0
REPLAY_WINDOW = 64
MAX_CLIENTS = 65536
FEATURE_ABS_MAX = 1e6  # normalised features are clipped to +-10 by the policy; this only catches garbage


class Kind(enum.IntEnum):
    CWND_REQ = 1
    CWND_RESP = 2
    CCA_REQ = 3
    CCA_RESP = 4
    ERROR = 5
    CCA_JOINT_REQ = 6


REQUESTS = (Kind.CWND_REQ, Kind.CCA_REQ, Kind.CCA_JOINT_REQ)
ANSWER_TO = {Kind.CWND_REQ: Kind.CWND_RESP, Kind.CCA_REQ: Kind.CCA_RESP, Kind.CCA_JOINT_REQ: Kind.CCA_RESP}


class ErrorCode(enum.IntEnum):
    SIZE = 1
    MAGIC = 2
    VERSION = 3
    LENGTH = 4
    AUTH = 5
    KIND = 6
    TIME = 7
    REPLAY = 8
    BODY = 9
    RANGE = 10
    POLICY = 11
    LATE = 12
    INTERNAL = 13


class ProtocolError(ValueError):
    """A datagram that is not a valid message; `code` says which check refused it."""

    def __init__(self, code: ErrorCode, message: str):
        super().__init__(message)
        self.code = code


CWND_OBS = np.dtype([("cookie", "<u8"), ("step_us", "<u4"), ("cwnd", "<u4"), ("ssthresh", "<u4"),
                     ("mss", "<u4"), ("inflight", "<u4"), ("acked", "<u4"), ("lost", "<u4"), ("ce", "<u4"),
                     ("srtt_us", "<u4"), ("min_rtt_us", "<u4"), ("rtt_avg_us", "<u4"), ("inflight_avg", "<u4")])
CWND_DEC = np.dtype([("cookie", "<u8"), ("cwnd", "<u4"), ("ssthresh", "<u4"), ("max_pacing_Bps", "<u8")])
CCA_HEAD = struct.Struct("<8sH6x")
CCA_RESP_HEAD = struct.Struct("<B7x")


@dataclass(frozen=True)
class Header:
    kind: Kind
    count: int
    client_id: int
    seq: int
    time_ms: int
    deadline_ms: int


@dataclass(frozen=True)
class Message:
    header: Header
    body: bytes


def write_key(path: str | Path) -> Path:
    """A fresh random shared key (48 hex characters) in *path*, mode 600: what :func:`load_key` accepts."""
    p = Path(path)
    p.write_bytes(os.urandom(24).hex().encode())
    p.chmod(0o600)
    return p


def load_key(path: str | Path) -> bytes:
    """The shared key: the file's bytes without trailing whitespace; >= 16 bytes, not readable by others."""
    p = Path(path)
    try:
        st = p.stat()
        key = p.read_bytes().rstrip()
    except OSError as e:
        raise ValueError(f"key file {p}: {e.strerror}; create one with `head -c 32 /dev/urandom | base64 > {p}; "
                         f"chmod 600 {p}`") from None
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ValueError(f"key file {p} is accessible by group or others (mode {stat.filemode(st.st_mode)}); "
                         f"fix: chmod 600 {p}")
    if len(key) < MIN_KEY_LEN:
        raise ValueError(f"key file {p} holds {len(key)} bytes, at least {MIN_KEY_LEN} are needed; create one "
                         "with `head -c 32 /dev/urandom | base64`")
    return key


def now_ms() -> int:
    return time.time_ns() // 1_000_000


# ------------------------------------------------------------------ framing


def seal(key: bytes, kind: Kind, body: bytes, *, count: int, client_id: int, seq: int,
         time_ms: int | None = None, deadline_ms: int = 0) -> bytes:
    """One authenticated datagram."""
    head = HEADER.pack(MAGIC, VERSION, int(kind), count, client_id, seq,
                       now_ms() if time_ms is None else time_ms, deadline_ms, len(body))
    data = head + body
    if len(data) + TAG_LEN > MAX_DATAGRAM:
        raise ValueError(f"message of {len(data) + TAG_LEN} bytes exceeds one datagram ({MAX_DATAGRAM})")
    return data + hmac.new(key, data, hashlib.sha256).digest()


def open_datagram(key: bytes, data: bytes) -> Message:
    """Check size, magic, version, length and HMAC; the authenticated header and body."""
    if not HEADER.size + TAG_LEN <= len(data) <= MAX_DATAGRAM:
        raise ProtocolError(ErrorCode.SIZE, f"datagram of {len(data)} bytes (valid: {HEADER.size + TAG_LEN}.."
                                            f"{MAX_DATAGRAM})")
    magic, version, kind, count, client_id, seq, time_ms, deadline_ms, body_len = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise ProtocolError(ErrorCode.MAGIC, f"not a ccswitch policy message (magic {magic!r})")
    if version != VERSION:
        raise ProtocolError(ErrorCode.VERSION, f"protocol version {version} (this side speaks {VERSION})")
    if body_len != len(data) - HEADER.size - TAG_LEN:
        raise ProtocolError(ErrorCode.LENGTH, f"body_len {body_len} but {len(data) - HEADER.size - TAG_LEN} "
                                              "body bytes")
    signed, tag = data[:-TAG_LEN], data[-TAG_LEN:]
    if not hmac.compare_digest(hmac.new(key, signed, hashlib.sha256).digest(), tag):
        raise ProtocolError(ErrorCode.AUTH, f"bad HMAC (client {client_id}): wrong key or altered datagram")
    try:
        k = Kind(kind)
    except ValueError:
        raise ProtocolError(ErrorCode.KIND, f"unknown message kind {kind}") from None
    return Message(Header(k, count, client_id, seq, time_ms, deadline_ms), signed[HEADER.size:])


# ------------------------------------------------------------------ replay


class ReplayGuard:
    """Per-client sliding window of accepted sequence numbers (64 wide), LRU-bounded in clients."""

    def __init__(self, window_s: float = TIME_WINDOW_S, max_clients: int = MAX_CLIENTS):
        self.window_s = window_s
        self.max_clients = max_clients
        self._seen: OrderedDict[int, tuple[int, int]] = OrderedDict()  # client -> (highest seq, bitmap)

    def check(self, h: Header, now: int | None = None) -> None:
        """Refuse a request outside the time window or already seen; changes nothing."""
        now = now_ms() if now is None else now
        if abs(now - h.time_ms) > self.window_s * 1000:
            raise ProtocolError(ErrorCode.TIME, f"client {h.client_id} seq {h.seq}: timestamp {h.time_ms} ms is "
                                                f"{(h.time_ms - now) / 1000:+.1f} s off this clock (window "
                                                f"+-{self.window_s:g} s): replayed, or the clocks disagree")
        if h.seq == 0:
            raise ProtocolError(ErrorCode.REPLAY, f"client {h.client_id}: seq 0 is never valid")
        top, bits = self._seen.get(h.client_id, (0, 0))
        if h.seq > top:
            return
        age = top - h.seq
        if age >= REPLAY_WINDOW or bits >> age & 1:
            raise ProtocolError(ErrorCode.REPLAY, f"client {h.client_id}: seq {h.seq} replayed or too old "
                                                  f"(highest seen {top})")

    def commit(self, h: Header) -> None:
        """Record an accepted request (after check() and the body passed)."""
        top, bits = self._seen.pop(h.client_id, (0, 0))
        if h.seq > top:
            shift = h.seq - top
            bits = ((bits << shift) | 1) & ((1 << REPLAY_WINDOW) - 1) if shift < REPLAY_WINDOW else 1
            top = h.seq
        else:
            bits |= 1 << (top - h.seq)
        self._seen[h.client_id] = (top, bits)
        while len(self._seen) > self.max_clients:
            self._seen.popitem(last=False)

    def state(self) -> dict[int, tuple[int, int]]:
        return dict(self._seen)


# ------------------------------------------------------------------ bodies


def _records(body: bytes, offset: int, dtype: np.dtype, count: int, what: str) -> np.ndarray:
    if count > MAX_RECORDS:
        raise ProtocolError(ErrorCode.BODY, f"{what}: {count} records (at most {MAX_RECORDS})")
    want = offset + count * dtype.itemsize
    if len(body) != want:
        raise ProtocolError(ErrorCode.BODY, f"{what}: body of {len(body)} bytes, {count} records need {want}")
    return np.frombuffer(body, dtype=dtype, count=count, offset=offset)


def encode_cwnd_obs(obs: np.ndarray) -> bytes:
    return np.ascontiguousarray(obs, dtype=CWND_OBS).tobytes()


def decode_cwnd_obs(m: Message) -> np.ndarray:
    obs = _records(m.body, 0, CWND_OBS, m.header.count, "cwnd request")
    bad = (obs["cwnd"] > CWND_MAX) | (obs["mss"] == 0) | (obs["mss"] > 65535) | (obs["step_us"] == 0)
    if bad.any():
        i = int(np.argmax(bad))
        raise ProtocolError(ErrorCode.RANGE, f"cwnd request: flow {int(obs['cookie'][i])} has cwnd "
                                             f"{int(obs['cwnd'][i])}, mss {int(obs['mss'][i])}, step "
                                             f"{int(obs['step_us'][i])} us (valid: cwnd <= {CWND_MAX}, mss "
                                             "1..65535, step > 0)")
    return obs


def encode_cwnd_dec(dec: np.ndarray) -> bytes:
    return np.ascontiguousarray(dec, dtype=CWND_DEC).tobytes()


def decode_cwnd_dec(m: Message, cwnd_min: int = 2, cwnd_max: int = CWND_MAX) -> np.ndarray:
    """Decisions of a CWND_RESP; any cwnd outside [cwnd_min, cwnd_max] refuses the whole answer."""
    dec = _records(m.body, 0, CWND_DEC, m.header.count, "cwnd answer")
    bad = (dec["cwnd"] < cwnd_min) | (dec["cwnd"] > cwnd_max) | (dec["ssthresh"] > cwnd_max)
    if bad.any():
        i = int(np.argmax(bad))
        raise ProtocolError(ErrorCode.RANGE, f"cwnd answer: flow {int(dec['cookie'][i])} cwnd "
                                             f"{int(dec['cwnd'][i])} ssthresh {int(dec['ssthresh'][i])} "
                                             f"outside [{cwnd_min}, {cwnd_max}]")
    return dec


def _feature_dtype(n: int, joint: bool = False) -> np.dtype:
    return np.dtype([("flow", "<u8"), *([("path", "<u8")] if joint else []), ("x", "<f4", (n,))])


def encode_cca_req(policy_id: bytes, flows: np.ndarray, features: np.ndarray,
                   paths: np.ndarray | None = None) -> bytes:
    """A CCA_REQ body, or with *paths* a CCA_JOINT_REQ body."""
    n = features.shape[1]
    rec = np.zeros(len(flows), dtype=_feature_dtype(n, paths is not None))
    rec["flow"], rec["x"] = flows, features
    if paths is not None:
        rec["path"] = paths
    return CCA_HEAD.pack(policy_id[:8].ljust(8, b"\0"), n) + rec.tobytes()


def decode_cca_req(m: Message) -> tuple[bytes, np.ndarray, np.ndarray]:
    """(policy_id, flows [N], features [N, D]) of a CCA_REQ."""
    policy_id, rec, x = _decode_cca(m, joint=False)
    return policy_id, rec["flow"].copy(), x


def decode_cca_joint_req(m: Message) -> tuple[bytes, np.ndarray, np.ndarray, np.ndarray]:
    """(policy_id, flows [N], paths [N], features [N, D]) of a CCA_JOINT_REQ."""
    policy_id, rec, x = _decode_cca(m, joint=True)
    return policy_id, rec["flow"].copy(), rec["path"].copy(), x


def _decode_cca(m: Message, joint: bool) -> tuple[bytes, np.ndarray, np.ndarray]:
    if len(m.body) < CCA_HEAD.size:
        raise ProtocolError(ErrorCode.BODY, f"cca request: body of {len(m.body)} bytes, shorter than its "
                                            f"{CCA_HEAD.size}-byte head")
    policy_id, n = CCA_HEAD.unpack_from(m.body)
    if not 1 <= n <= MAX_FEATURES:
        raise ProtocolError(ErrorCode.BODY, f"cca request: {n} features (valid: 1..{MAX_FEATURES})")
    rec = _records(m.body, CCA_HEAD.size, _feature_dtype(n, joint), m.header.count, "cca request")
    x = rec["x"].reshape(len(rec), n)
    finite = np.isfinite(x) & (np.abs(x) <= FEATURE_ABS_MAX)
    if not finite.all():
        row = int(np.argmax(~finite.all(axis=1)))
        raise ProtocolError(ErrorCode.RANGE, f"cca request: flow {int(rec['flow'][row])} has a non-finite or "
                                             f"out-of-range feature (|x| > {FEATURE_ABS_MAX:g})")
    return policy_id, rec, x.copy()


def _resp_dtype(n_actions: int) -> np.dtype:
    return np.dtype([("flow", "<u8"), ("action", "u1"), ("_pad", "V3"), ("q", "<f4", (n_actions,))])


def encode_cca_resp(actions: tuple[str, ...], flows: np.ndarray, q: np.ndarray) -> bytes:
    names = b"".join(a.encode("ascii")[:NAME_LEN].ljust(NAME_LEN, b"\0") for a in actions)
    rec = np.zeros(len(flows), dtype=_resp_dtype(len(actions)))
    rec["flow"], rec["q"] = flows, q
    rec["action"] = np.argmax(q, axis=1) if len(flows) else []
    return CCA_RESP_HEAD.pack(len(actions)) + names + rec.tobytes()


def decode_cca_resp(m: Message) -> tuple[tuple[str, ...], np.ndarray, np.ndarray, np.ndarray]:
    """(actions, flows, chosen action index, Q-values [N, A]) of a CCA_RESP."""
    if len(m.body) < CCA_RESP_HEAD.size:
        raise ProtocolError(ErrorCode.BODY, "cca answer: body shorter than its head")
    (na,) = CCA_RESP_HEAD.unpack_from(m.body)
    off = CCA_RESP_HEAD.size + na * NAME_LEN
    if not 1 <= na <= MAX_ACTIONS or len(m.body) < off:
        raise ProtocolError(ErrorCode.BODY, f"cca answer: {na} actions (valid: 1..{MAX_ACTIONS})")
    raw = [m.body[CCA_RESP_HEAD.size + i * NAME_LEN:CCA_RESP_HEAD.size + (i + 1) * NAME_LEN].rstrip(b"\0")
           for i in range(na)]
    if not all(r and r.isascii() and r.replace(b"_", b"").replace(b"-", b"").isalnum() for r in raw):
        raise ProtocolError(ErrorCode.BODY, "cca answer: an action name is empty or not [A-Za-z0-9_-]")
    rec = _records(m.body, off, _resp_dtype(na), m.header.count, "cca answer")
    q = rec["q"].reshape(len(rec), na)
    if (rec["action"] >= na).any() or not np.isfinite(q).all():
        raise ProtocolError(ErrorCode.RANGE, "cca answer: an action index out of range or a non-finite Q-value")
    return tuple(r.decode() for r in raw), rec["flow"].copy(), rec["action"].astype(np.int64), q.copy()


def random_client_id() -> int:
    return int.from_bytes(os.urandom(4), "little") or 1
