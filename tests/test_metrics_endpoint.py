"""The daemon's Prometheus endpoint (daemon/metrics.py), scraped over HTTP as Prometheus would.

No kernel: the controller is a stand-in holding the counters the real one keeps (``stats``,
``last_table``, ``decider``); the remote part uses a real policy server on 127.0.0.1 and the
daemon's real RemotePolicy and client (tests/test_remote_protocol.py's helpers).
"""

from __future__ import annotations

import socket
import urllib.request
from types import SimpleNamespace

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families
from test_remote_protocol import CCA, KEY, new_server, running

from ccswitch.daemon.metrics import Metrics
from ccswitch.daemon.policies import DqnDecider
from ccswitch.remote.client import PolicyClient
from ccswitch.remote.remote_policy import RemotePolicy


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def _stats(**kw: int) -> SimpleNamespace:
    base = {"switches": 0, "reverts": 0, "manual": 0, "failed": 0, "decisions": 0, "managed": 0}
    return SimpleNamespace(**{**base, **kw})


def test_counters_follow_the_controller_and_non_loopback_is_refused() -> None:
    with pytest.raises(ValueError, match="not a loopback address"):
        Metrics("192.0.2.1:9101")
    port = _free_port()
    m = Metrics(f"127.0.0.1:{port}")
    try:
        ctl = SimpleNamespace(stats=_stats(switches=2, decisions=5, managed=3), last_table=None,
                              decider=SimpleNamespace())
        m.tick(ctl, 1.5)
        ctl.stats = _stats(switches=3, reverts=1, failed=1, decisions=9, managed=2)
        m.tick(ctl, 2.5)
        got = _scrape(port)
    finally:
        m.close()
    assert got[("ccswitch_switches_total", (("kind", "policy"),))] == 3  # deltas add up to the total
    assert got[("ccswitch_switches_total", (("kind", "revert"),))] == 1
    assert got[("ccswitch_switch_failures_total", ())] == 1
    assert got[("ccswitch_decisions_total", ())] == 9
    assert got[("ccswitch_managed_flows", ())] == 2
    assert got[("ccswitch_tick_seconds_count", ())] == 2
    assert not any(name.startswith("ccswitch_remote") for name, _ in got)  # no server, no remote series


def test_remote_rows_fallbacks_and_answer_times() -> None:
    x = np.random.default_rng(3).normal(size=(4, CCA.n_features)).astype(np.float32)
    port = _free_port()
    m = Metrics(f"127.0.0.1:{port}")
    try:
        with running(new_server()) as addr, PolicyClient(addr, KEY, deadline_s=1.0) as c:
            rp = RemotePolicy(CCA.policy, c)
            ctl = SimpleNamespace(stats=_stats(), last_table=None, decider=DqnDecider(rp))
            for _ in range(3):  # three requests of 4 rows, answered by the server
                rp.q_values(x)
            m.tick(ctl, 1.0)
            answered, server_rows = c.rtts_total, rp.remote_rows
        with PolicyClient(addr, KEY, deadline_s=0.05) as gone:  # the server has stopped
            rp2 = RemotePolicy(CCA.policy, gone)
            ctl.decider = DqnDecider(rp2)  # as after a SIGHUP: a new policy whose counters start at 0
            rp2.q_values(x)
            rp2.q_values(x)
            m.tick(ctl, 1.0)
            reasons, local_rows = dict(gone.fallbacks), rp2.local_rows
        got = _scrape(port)
    finally:
        m.close()
    assert answered >= 3  # the three requests, and whatever the client asked before them (its hello)
    assert server_rows >= 12 and local_rows >= 8  # 3 x 4 rows and 2 x 4 rows (plus the decider's own probes)
    assert got[("ccswitch_remote_rows_total", (("answered", "server"),))] == server_rows
    assert got[("ccswitch_remote_rows_total", (("answered", "local"),))] == local_rows  # counted from 0 again
    assert got[("ccswitch_remote_answer_seconds_count", ())] == answered  # every timed answer, once
    assert 0 < got[("ccswitch_remote_answer_seconds_sum", ())] < answered * 1.0  # each within its 1 s deadline
    assert sum(reasons.values()) >= 2  # one per request that found no server
    for reason, n in reasons.items():
        assert got[("ccswitch_remote_fallbacks_total", (("reason", reason),))] == n
