"""The policy server's protocol, server and client (ccswitch/remote/) without the kernel.

Hypothesis properties (derandomized, bounded, as tests/test_fuzz_parsers.py):
a random or mutated datagram is refused with one ProtocolError (one line) and
leaves the server's replay state and counters of accepted requests unchanged;
an authenticated datagram with a random body is either a valid request or one
ProtocolError; random answers never make the client raise.  Then the named
attacks: a forged HMAC, a replayed sequence number, a stale timestamp, an
out-of-range cwnd from the server, a slow server and an absent one.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ccswitch.remote import protocol as p
from ccswitch.remote.agents import CWND_AGENTS, CcaPolicy, DelayAimd, rltcp_action, rltcp_reward
from ccswitch.remote.cli import AGENT_NAMES
from ccswitch.remote.client import PolicyClient
from ccswitch.remote.server import PolicyServer, parse_hostport, serve

KEY = b"k" * 32
FUZZ = settings(max_examples=200, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
CCA = CcaPolicy()


def obs_records(n: int = 3) -> np.ndarray:
    obs = np.zeros(n, dtype=p.CWND_OBS)
    obs["cookie"] = np.arange(1, n + 1)
    obs["step_us"], obs["cwnd"], obs["mss"], obs["srtt_us"], obs["min_rtt_us"] = 100_000, 10, 1448, 1000, 900
    obs["rtt_avg_us"], obs["inflight_avg"] = 1000, 10
    return obs


def cwnd_request(seq: int = 1, client: int = 7, key: bytes = KEY, n: int = 3, **kw: int) -> bytes:
    return p.seal(key, p.Kind.CWND_REQ, p.encode_cwnd_obs(obs_records(n)), count=n, client_id=client, seq=seq, **kw)


def cca_request(seq: int = 1, client: int = 7, n: int = 2) -> bytes:
    x = np.zeros((n, CCA.n_features), np.float32)
    body = p.encode_cca_req(CCA.policy_id, np.arange(n, dtype=np.uint64), x)
    return p.seal(KEY, p.Kind.CCA_REQ, body, count=n, client_id=client, seq=seq)


def new_server() -> PolicyServer:
    return PolicyServer(KEY, DelayAimd(), CCA)


def snapshot(s: PolicyServer) -> tuple[dict[int, tuple[int, int]], dict[str, int]]:
    return s.guard.state(), dict(s.stats.requests)


# ------------------------------------------------------------- framing


def test_roundtrip_of_every_kind() -> None:
    s = new_server()
    r = s.accept(cwnd_request(), ("127.0.0.1", 1), 0.0)
    assert r.obs is not None and list(r.obs["cookie"]) == [1, 2, 3]
    r = s.accept(cca_request(seq=2), ("127.0.0.1", 1), 0.0)
    assert r.x is not None and r.x.shape == (2, CCA.n_features)
    dec = DelayAimd().decide(obs_records())
    m = p.open_datagram(KEY, p.seal(KEY, p.Kind.CWND_RESP, p.encode_cwnd_dec(dec), count=3, client_id=7, seq=1))
    assert np.array_equal(p.decode_cwnd_dec(m), dec)
    q = CCA.q_values(np.zeros((2, CCA.n_features), np.float32))
    body = p.encode_cca_resp(CCA.actions, np.arange(2, dtype=np.uint64), q)
    m = p.open_datagram(KEY, p.seal(KEY, p.Kind.CCA_RESP, body, count=2, client_id=7, seq=2))
    actions, flows, act, got = p.decode_cca_resp(m)
    assert actions == CCA.actions and list(flows) == [0, 1] and np.allclose(got, q)
    assert list(act) == list(np.argmax(q, axis=1))


@FUZZ
@given(st.binary(max_size=600))
def test_random_datagrams_are_refused_without_state_change(data: bytes) -> None:
    s = new_server()
    s.accept(cwnd_request(seq=5), ("h", 1), 0.0)
    before = snapshot(s)
    with pytest.raises(p.ProtocolError) as e:
        s.accept(data, ("h", 1), 0.0)
    assert "\n" not in str(e.value) and str(e.value)
    assert snapshot(s) == before
    s.refuse(e.value, ("h", 1), data)  # the server's refusal path never raises either


@FUZZ
@given(st.data())
def test_mutated_datagrams_are_refused_without_state_change(data: st.DataObject) -> None:
    good = bytearray(data.draw(st.sampled_from([cwnd_request(seq=9), cca_request(seq=9)])))
    how = data.draw(st.sampled_from(["flip", "truncate", "extend", "splice"]))
    if how == "flip":
        i = data.draw(st.integers(0, len(good) - 1))
        good[i] ^= data.draw(st.integers(1, 255))
    elif how == "truncate":
        del good[data.draw(st.integers(0, len(good) - 1)):]
    elif how == "extend":
        good += data.draw(st.binary(min_size=1, max_size=64))
    else:
        i = data.draw(st.integers(0, len(good) - 1))
        good[i:i + 4] = data.draw(st.binary(min_size=1, max_size=8))
    s = new_server()
    before = snapshot(s)
    with pytest.raises(p.ProtocolError) as e:
        s.accept(bytes(good), ("h", 1), 0.0)
    assert e.value.code in (p.ErrorCode.SIZE, p.ErrorCode.MAGIC, p.ErrorCode.VERSION, p.ErrorCode.LENGTH,
                            p.ErrorCode.AUTH)
    assert snapshot(s) == before


@FUZZ
@given(kind=st.sampled_from(list(p.Kind)), count=st.integers(0, 0xFFFF), body=st.binary(max_size=400))
def test_authenticated_random_bodies_give_one_error_or_a_request(kind: p.Kind, count: int, body: bytes) -> None:
    s = new_server()
    before = snapshot(s)
    try:
        req = s.accept(p.seal(KEY, kind, body, count=count, client_id=3, seq=1), ("h", 1), 0.0)
    except p.ProtocolError as e:
        assert str(e) and "\n" not in str(e)
        assert snapshot(s) == before
    else:
        assert req.header.kind in p.REQUESTS and s.guard.state()[3][0] == 1


def test_forged_hmac_is_refused() -> None:
    s = new_server()
    with pytest.raises(p.ProtocolError) as e:
        s.accept(cwnd_request(key=b"x" * 32), ("h", 1), 0.0)
    assert e.value.code == p.ErrorCode.AUTH and "HMAC" in str(e.value)
    assert snapshot(s) == ({}, {})


def test_replayed_and_old_sequence_numbers_are_refused() -> None:
    s = new_server()
    s.accept(cwnd_request(seq=100), ("h", 1), 0.0)
    with pytest.raises(p.ProtocolError) as e:
        s.accept(cwnd_request(seq=100), ("h", 1), 0.0)
    assert e.value.code == p.ErrorCode.REPLAY
    s.accept(cwnd_request(seq=90), ("h", 1), 0.0)  # reordered, inside the 64-wide window: once
    with pytest.raises(p.ProtocolError):
        s.accept(cwnd_request(seq=90), ("h", 1), 0.0)
    with pytest.raises(p.ProtocolError):
        s.accept(cwnd_request(seq=100 - p.REPLAY_WINDOW), ("h", 1), 0.0)
    s.accept(cwnd_request(seq=100, client=8), ("h", 1), 0.0)  # windows are per client
    with pytest.raises(p.ProtocolError) as e:
        s.accept(cwnd_request(seq=0, client=9), ("h", 1), 0.0)
    assert e.value.code == p.ErrorCode.REPLAY


def test_stale_timestamp_is_refused() -> None:
    s = new_server()
    with pytest.raises(p.ProtocolError) as e:
        s.accept(cwnd_request(time_ms=p.now_ms() - 60_000), ("h", 1), 0.0)
    assert e.value.code == p.ErrorCode.TIME
    assert snapshot(s) == ({}, {})


def test_out_of_range_values_are_refused() -> None:
    s = new_server()
    obs = obs_records()
    obs["mss"][1] = 0
    bad = p.seal(KEY, p.Kind.CWND_REQ, p.encode_cwnd_obs(obs), count=3, client_id=1, seq=1)
    with pytest.raises(p.ProtocolError, match="mss 0"):
        s.accept(bad, ("h", 1), 0.0)
    x = np.zeros((1, CCA.n_features), np.float32)
    x[0, 3] = np.nan
    bad = p.seal(KEY, p.Kind.CCA_REQ, p.encode_cca_req(CCA.policy_id, np.zeros(1, np.uint64), x), count=1,
                 client_id=1, seq=2)
    with pytest.raises(p.ProtocolError, match="non-finite"):
        s.accept(bad, ("h", 1), 0.0)
    for cwnd in (0, 1, p.CWND_MAX + 1):
        dec = np.zeros(1, dtype=p.CWND_DEC)
        dec["cwnd"] = cwnd
        m = p.open_datagram(KEY, p.seal(KEY, p.Kind.CWND_RESP, p.encode_cwnd_dec(dec), count=1, client_id=1,
                                        seq=1))
        with pytest.raises(p.ProtocolError) as e:
            p.decode_cwnd_dec(m)
        assert e.value.code == p.ErrorCode.RANGE


def test_key_file_checks(tmp_path) -> None:
    k = tmp_path / "key"
    k.write_bytes(b"short")
    k.chmod(0o600)
    with pytest.raises(ValueError, match="at least 16"):
        p.load_key(k)
    k.write_bytes(b"0123456789abcdef0123\n")
    k.chmod(0o644)
    with pytest.raises(ValueError, match="chmod 600"):
        p.load_key(k)
    k.chmod(0o600)
    assert p.load_key(k) == b"0123456789abcdef0123"
    with pytest.raises(ValueError, match="No such file"):
        p.load_key(tmp_path / "none")


def test_hostport_and_agent_names() -> None:
    assert parse_hostport("10.0.0.1:7070") == ("10.0.0.1", 7070)
    assert parse_hostport("[::1]:80") == ("::1", 80)
    for bad in ("host:", ":80", "h:0", "h:99999", "h:x"):
        with pytest.raises(ValueError):
            parse_hostport(bad)
    assert tuple(CWND_AGENTS) == AGENT_NAMES


def test_agents_stay_in_range() -> None:
    obs = obs_records(4)
    obs["lost"][1] = 3
    obs["rtt_avg_us"][2] = 50_000
    obs["inflight_avg"][3] = 0
    dec = DelayAimd().decide(obs)
    assert list(dec["cookie"]) == list(obs["cookie"])
    assert dec["cwnd"][0] > 10 and dec["cwnd"][1] < 10 and dec["cwnd"][2] < 10 and dec["cwnd"][3] == 10
    assert (dec["cwnd"] >= 2).all()
    rl = rltcp_action(obs, np.array([0, 1, 2, 3]))
    assert list(rl["cwnd"]) == [10, 11, 10, 11] and list(rl["ssthresh"]) == [2, 2, 2, 2]  # in-flight 0: at least 2
    assert rltcp_reward(obs).shape == (4,)


# ------------------------------------------------------------- client and server over UDP


@contextlib.contextmanager
def running(server: PolicyServer) -> Iterator[tuple[str, int]]:
    """The server on an ephemeral 127.0.0.1 port in a thread; its address."""
    port_box: list[int] = []
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    ready = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.bind(("127.0.0.1", 0))
            port_box.append(probe.getsockname()[1])

        async def main() -> None:
            ev = asyncio.Event()
            task = asyncio.create_task(serve(server, ("127.0.0.1", port_box[0]), ready=ev, stop=stop))
            await ev.wait()
            ready.set()
            await task

        loop.run_until_complete(main())

    t = threading.Thread(target=run, daemon=True)
    t.start()
    assert ready.wait(5)
    try:
        yield ("127.0.0.1", port_box[0])
    finally:
        loop.call_soon_threadsafe(stop.set)
        t.join(5)
        loop.close()


def test_client_gets_remote_decisions_batched() -> None:
    server = new_server()
    with running(server) as addr:
        clients = [PolicyClient(addr, KEY, deadline_s=1.0) for _ in range(20)]
        results: list[bool] = []

        def ask(c: PolicyClient) -> None:
            dec, remote = c.cwnd(obs_records(), None)
            results.append(remote and dec is not None and len(dec) == 3)

        threads = [threading.Thread(target=ask, args=(c,)) for c in clients]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        q, remote = clients[0].cca(CCA.policy_id, np.arange(2, dtype=np.uint64),
                                   np.zeros((2, CCA.n_features), np.float32), None)
        assert remote and q is not None and np.allclose(q, CCA.q_values(np.zeros((2, CCA.n_features), np.float32)))
        for c in clients:
            c.close()
    assert all(results) and len(results) == 20
    assert server.stats.requests["CWND_REQ"] == 20 and server.stats.batches <= 20


def test_server_survives_garbage_and_answers_after() -> None:
    server = new_server()
    with running(server) as addr:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as raw:
            for junk in (b"", b"x" * 40, cwnd_request(key=b"y" * 32), cwnd_request(seq=1, client=5)):
                raw.sendto(junk, addr)
            raw.sendto(cwnd_request(seq=1, client=5), addr)  # replay of the last one
        time.sleep(0.2)
        with PolicyClient(addr, KEY, deadline_s=1.0) as c:
            dec, remote = c.cwnd(obs_records(), None)
    assert remote and dec is not None
    assert server.stats.refused["AUTH"] == 1 and server.stats.refused["REPLAY"] == 1
    assert server.stats.refused["SIZE"] == 2 and server.stats.requests["CWND_REQ"] == 2


@contextlib.contextmanager
def fake_server(answer: object) -> Iterator[tuple[str, int]]:
    """A UDP server that answers each request with answer(request_header) (None: stay silent)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(0.1)
    done = threading.Event()

    def run() -> None:
        while not done.is_set():
            try:
                data, peer = sock.recvfrom(70000)
            except TimeoutError:
                continue
            out = answer(p.open_datagram(KEY, data).header)  # type: ignore[operator]
            if out is not None:
                sock.sendto(out, peer)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    try:
        yield sock.getsockname()
    finally:
        done.set()
        t.join(2)
        sock.close()


def dec_answer(cwnd: int):
    def answer(h: p.Header) -> bytes:
        dec = np.zeros(h.count, dtype=p.CWND_DEC)
        dec["cookie"], dec["cwnd"] = np.arange(1, h.count + 1), cwnd
        return p.seal(KEY, p.Kind.CWND_RESP, p.encode_cwnd_dec(dec), count=h.count, client_id=h.client_id, seq=h.seq)
    return answer


def local_agent(obs: np.ndarray) -> np.ndarray:
    return DelayAimd().decide(obs)


@pytest.mark.parametrize("answer,reason", [
    (dec_answer(0), "garbage"),                       # out-of-range cwnd
    (dec_answer(p.CWND_MAX + 5), "garbage"),
    (lambda h: b"\0" * 80, "timeout"),                # unauthenticated garbage, then silence
    (lambda h: None, "timeout"),                      # a slow (here: silent) server
    (lambda h: p.seal(KEY, p.Kind.CWND_RESP, b"", count=0, client_id=h.client_id, seq=h.seq - 1), "timeout"),
])
def test_client_falls_back_and_counts(answer, reason: str, caplog) -> None:
    with fake_server(answer) as addr, PolicyClient(addr, KEY, deadline_s=0.1) as c:
        for _ in range(3):
            dec, remote = c.cwnd(obs_records(), local_agent)
            assert not remote and dec is not None and len(dec) == 3
    assert c.fallbacks[reason] == 3
    assert sum(reason in r.getMessage() for r in caplog.records) == 1  # logged once


def test_client_with_no_server_falls_back() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        addr = s.getsockname()
    with PolicyClient(addr, KEY, deadline_s=0.2) as c:
        dec, remote = c.cwnd(obs_records(), None)
    assert dec is None and not remote and c.fallbacks["unreachable"] == 1


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300))
def test_client_never_raises_on_random_answers(junk: bytes) -> None:
    with fake_server(lambda h: junk) as addr, PolicyClient(addr, KEY, deadline_s=0.02) as c:
        dec, remote = c.cwnd(obs_records(1), local_agent)
    assert not remote and dec is not None


def test_remote_policy_matches_the_local_one_and_falls_back() -> None:
    from ccswitch.daemon.policies import DqnDecider
    from ccswitch.remote.remote_policy import RemotePolicy, rows_per_datagram

    x = np.random.default_rng(1).normal(size=(rows_per_datagram(CCA.n_features) + 5, CCA.n_features))
    local = CCA.policy.q_values(x.astype(np.float32))
    with running(new_server()) as addr, PolicyClient(addr, KEY, deadline_s=1.0) as c:
        rp = RemotePolicy(CCA.policy, c)
        assert np.allclose(rp.q_values(x), local, atol=1e-4) and rp.remote_rows == len(x)
        assert np.allclose(rp.q_values(x[0]), local[0], atol=1e-4)
        assert DqnDecider(rp).actions == CCA.actions  # the daemon's decider takes it as a policy
    with PolicyClient(addr, KEY, deadline_s=0.05) as c:  # server gone
        rp = RemotePolicy(CCA.policy, c)
        assert np.allclose(rp.q_values(x), local, atol=1e-4) and rp.local_rows == len(x) and rp.remote_rows == 0


def test_l4s_control_traffic_marking() -> None:
    from ccswitch.remote.client import L4S_TOS

    with PolicyClient(("127.0.0.1", 9), KEY, tos=L4S_TOS) as c:
        assert c.sock.getsockopt(socket.IPPROTO_IP, socket.IP_TOS) == L4S_TOS == (40 << 2) | 1


def test_serve_command_errors_are_one_line(tmp_path) -> None:
    from click.testing import CliRunner

    from ccswitch.cli import cli

    key = tmp_path / "key"
    key.write_bytes(b"0123456789abcdef0123")
    key.chmod(0o644)
    r = CliRunner().invoke(cli, ["policy", "serve", "--key", str(key), "--no-cca"])
    assert r.exit_code == 2 and "chmod 600" in r.output
    key.chmod(0o600)
    r = CliRunner().invoke(cli, ["policy", "serve", "--key", str(key), "--no-cca", "--listen", "192.0.2.1:7070"])
    assert r.exit_code == 1 and "cannot listen on 192.0.2.1:7070" in r.output  # fails at once, does not hang
    r = CliRunner().invoke(cli, ["policy", "serve", "--key", str(key), "--listen", "host:"])
    assert r.exit_code == 2 and "HOST:PORT" in r.output


def test_added_latency_holds_answers() -> None:
    server = PolicyServer(KEY, DelayAimd(), None, added_latency_s=0.06)
    with running(server) as addr, PolicyClient(addr, KEY, deadline_s=1.0) as c:
        dec, remote = c.cwnd(obs_records(), None)
        assert remote and dec is not None and c.last_rtt_s is not None and c.last_rtt_s >= 0.06
        with PolicyClient(addr, KEY, deadline_s=0.03) as late:  # shorter deadline than the emulated path
            dec, remote = late.cwnd(obs_records(), local_agent)
            assert not remote and late.fallbacks["timeout"] == 1


def test_daemon_config_remote_runs_the_forward_pass_on_the_server(tmp_path) -> None:
    """[policy] remote: the daemon's DQN decider asks the server, gives the local policy's answers, falls back
    to the local policy when the server is gone, and a config without the key file is one clear error."""
    from ccswitch.daemon.config import ConfigError, parse_config
    from ccswitch.daemon.policies import build_decider
    from ccswitch.models.policy import PolicyError

    key = tmp_path / "key"
    key.write_bytes(KEY)
    key.chmod(0o600)
    x = np.random.default_rng(2).normal(size=(7, CCA.n_features)).astype(np.float32)
    with running(new_server()) as addr:
        cfg = parse_config({"policy": {"remote": f"{addr[0]}:{addr[1]}", "remote_key": str(key),
                                       "remote_deadline_s": 1.0}})
        dec, warning = build_decider(dict(cfg.policy))
        assert warning is None
        q = dec.policy.q_values(x)
        info = dec.describe()["remote"]
    assert np.allclose(q, CCA.policy.q_values(x), atol=1e-4)
    assert info["server"] == f"{addr[0]}:{addr[1]}" and info["remote_rows"] >= len(x)
    dec.policy.client.deadline_s = 0.05  # the server is gone now: the local policy answers
    assert np.allclose(dec.policy.q_values(x), CCA.policy.q_values(x), atol=1e-4)
    assert dec.describe()["remote"]["local_rows"] >= len(x)
    from ccswitch.daemon.policies import close_decider

    close_decider(dec)
    assert dec.policy.client.sock.fileno() == -1
    with pytest.raises(ConfigError, match=r"policy\.remote_key: must name"):
        parse_config({"policy": {"remote": "127.0.0.1:7070"}})
    with pytest.raises(PolicyError, match=r"policy\.remote: key file .*missing"):
        build_decider(dict(parse_config({"policy": {"remote": "127.0.0.1:7070",
                                                    "remote_key": str(tmp_path / "missing")}}).policy))
