"""One decision per path (ccswitch/remote/joint.py): the board, the joint request, two daemons' views.

The kernel/testbed counterpart is the `dqn-joint` arm run end to end (docs/learning.md,
"One decision per path"); tests/test_scenario_remote.py runs it on namespaces.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_remote_protocol import CCA, KEY, new_server, running

from ccswitch.remote import protocol as p
from ccswitch.remote.client import PolicyClient
from ccswitch.remote.joint import NO_PATH, PathBoard, path_keys
from ccswitch.remote.remote_policy import RemotePolicy


def test_path_keys_are_stable_and_distinct() -> None:
    k = path_keys(["10.99.0.1", "10.99.0.1", "10.99.0.2"])
    assert k.dtype == np.uint64 and k[0] == k[1] != k[2]
    assert path_keys(["10.99.0.1"])[0] == k[0]  # the same key on every client: a pure function of the address


def test_board_means_per_path_and_forgets_old_flows() -> None:
    b = PathBoard(horizon_s=2.0, epoch_s=0)  # a fresh mean on every request
    a, other = np.uint64(1), np.uint64(2)
    b.record(7, np.array([10], np.uint64), np.array([a]), np.array([[1.0, 0.0, 0.0]]), now=0.0)
    b.record(8, np.array([10], np.uint64), np.array([a]), np.array([[0.0, 3.0, 0.0]]), now=0.5)  # other client
    b.record(8, np.array([11], np.uint64), np.array([other]), np.array([[0.0, 0.0, 9.0]]), now=0.5)
    own = np.zeros((2, 3))
    assert np.allclose(b.means(np.array([a, other]), own), [[0.5, 1.5, 0.0], [0.0, 0.0, 9.0]])
    b.record(7, np.array([10], np.uint64), np.array([a]), np.array([[4.0, 0.0, 0.0]]), now=1.0)  # replaces
    assert len(b) == 3 and np.allclose(b.means(np.array([a]), own[:1]), [[2.0, 1.5, 0.0]])
    b.expire(now=2.8)  # client 8's flows last seen at 0.5: gone
    assert len(b) == 1 and np.allclose(b.means(np.array([a]), own[:1]), [[4.0, 0.0, 0.0]])
    # a row on no path (an unmanaged flow) keeps its own Q-values and is never remembered
    b.record(7, np.array([12], np.uint64), np.array([NO_PATH], np.uint64), np.array([[0.0, 0.0, 7.0]]), now=2.8)
    mixed = b.means(np.array([NO_PATH, a], np.uint64), np.array([[0.0, 0.0, 7.0], [1.0, 1.0, 1.0]]))
    assert len(b) == 1 and np.allclose(mixed, [[0.0, 0.0, 7.0], [4.0, 0.0, 0.0]])


def test_board_is_bounded() -> None:
    b = PathBoard(max_flows=3, epoch_s=0)
    for f in range(5):
        b.record(1, np.array([f], np.uint64), np.array([5], np.uint64), np.array([[float(f)]]), now=0.0)
    assert len(b) == 3 and np.allclose(b.means(np.array([5], np.uint64), np.zeros((1, 1))), [[3.0]])  # 2, 3, 4


def test_path_mean_is_frozen_for_an_epoch() -> None:
    """Every request within an epoch gets the mean computed at its start; the next epoch sees everyone."""
    b = PathBoard(horizon_s=20.0, epoch_s=8.0)
    a = np.array([3], np.uint64)
    b.record(1, np.array([1], np.uint64), a, np.array([[1.0, 0.0]]), now=0.0)
    assert np.allclose(b.means(a, np.zeros((1, 2)), now=0.0), [[1.0, 0.0]])
    b.record(2, np.array([1], np.uint64), a, np.array([[0.0, 3.0]]), now=1.0)  # joins mid-epoch
    assert np.allclose(b.means(a, np.zeros((1, 2)), now=1.0), [[1.0, 0.0]])  # the same vector as client 1's
    b.record(1, np.array([1], np.uint64), a, np.array([[5.0, 0.0]]), now=7.9)  # its own state moved
    assert np.allclose(b.means(a, np.zeros((1, 2)), now=7.9), [[1.0, 0.0]])
    b.expire(now=8.1)
    assert np.allclose(b.means(a, np.zeros((1, 2)), now=8.1), [[2.5, 1.5]])  # the new epoch: both flows


def test_joint_request_roundtrip_and_checks() -> None:
    x = np.zeros((2, CCA.n_features), np.float32)
    body = p.encode_cca_req(CCA.policy_id, np.array([5, 6], np.uint64), x, np.array([9, 9], np.uint64))
    m = p.open_datagram(KEY, p.seal(KEY, p.Kind.CCA_JOINT_REQ, body, count=2, client_id=1, seq=1))
    pid, flows, paths, got = p.decode_cca_joint_req(m)
    assert pid == CCA.policy_id and list(flows) == [5, 6] and list(paths) == [9, 9] and np.array_equal(got, x)
    short = p.open_datagram(KEY, p.seal(KEY, p.Kind.CCA_JOINT_REQ, body[:-4], count=2, client_id=1, seq=2))
    with pytest.raises(p.ProtocolError, match="cca request: body of"):
        p.decode_cca_joint_req(short)
    plain = p.open_datagram(KEY, p.seal(KEY, p.Kind.CCA_REQ, body, count=2, client_id=1, seq=3))
    with pytest.raises(p.ProtocolError):  # a joint body sent as a plain request does not fit its layout
        p.decode_cca_req(plain)


def test_two_daemons_on_one_path_get_the_same_preference() -> None:
    """Two clients, different states, one path: both answered with the mean of their own Q-values."""
    rng = np.random.default_rng(3)
    x1, x2 = rng.normal(size=(1, CCA.n_features)), rng.normal(size=(1, CCA.n_features))
    q1, q2 = CCA.q_values(x1.astype(np.float32)), CCA.q_values(x2.astype(np.float32))
    path = path_keys(["10.99.0.1"])
    server = new_server()
    server.board.epoch_s = 0  # the mean of the moment (the epoch is tested on the board above)
    with running(server) as addr, PolicyClient(addr, KEY, deadline_s=1.0) as c1, \
            PolicyClient(addr, KEY, deadline_s=1.0) as c2:
        r1, r2 = RemotePolicy(CCA.policy, c1, joint=True), RemotePolicy(CCA.policy, c2, joint=True)
        first = r1.q_values(x1, np.array([100], np.uint64), path)
        assert np.allclose(first, q1, atol=1e-4)  # alone on the path so far: its own Q-values
        second = r2.q_values(x2, np.array([200], np.uint64), path)
        assert np.allclose(second, (q1 + q2) / 2, atol=1e-4)
        assert np.allclose(r1.q_values(x1, np.array([100], np.uint64), path), second, atol=1e-4)
        other = r2.q_values(x2, np.array([201], np.uint64), path_keys(["10.99.0.2"]))  # another path
        assert np.allclose(other, q2, atol=1e-4)
    assert server.stats.joint_flows == 4 and server.stats.requests["CCA_JOINT_REQ"] == 4
