"""Scenario ``[daemon.remote]`` and the dqn-remote / dqn-joint arms: the daemons' DQN on a policy server.

* No kernel: the table's checks (one line each), the arms' settings, the daemon config the
  runner writes once the server is up.
* Kernel (root, netns; fails under CI=true when missing): a 2-client run whose daemons ask a
  real `ccswitch policy serve` in the server namespace, jointly (one decision per path), with
  20 ms of added control latency: both daemons are pointed at it, it answers their joint
  requests in time (none late, none refused), and no daemon fell back to its local policy.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ccswitch.testbed.scenario import (
    DaemonSettings,
    RemoteDecisions,
    ScenarioError,
    daemon_config,
    load_scenario,
)
from ccswitch.testbed.scenario.arms import arm_scenario, check_arms, remote_arm

SCENARIO = """
name = "remote-joint"
duration_s = 10
clients = 2
[link.uplink]
rate_mbit = 20
delay_ms = 5
qdisc = {{ kind = "pfifo", limit_pkts = 100 }}
[link.downlink]
rate_mbit = 20
delay_ms = 5
[[flows]]
name = "C1"
client = 1
cca = "cubic"
[[flows]]
name = "C2"
client = 2
cca = "bbr"
[daemon]
policy = "{policy}"
{remote}
[capture]
tshark = false
"""


def scenario(tmp_path: Path, remote: str, policy: str = "dqn") -> Path:
    p = tmp_path / "s.toml"
    p.write_text(SCENARIO.format(policy=policy, remote=remote))
    return p


def test_remote_table_defaults_and_deadline(tmp_path: Path) -> None:
    sc = load_scenario(scenario(tmp_path, "remote = { latency_ms = 65, joint = true }"))
    r = sc.daemon.remote if sc.daemon else None
    assert r == RemoteDecisions(latency_ms=65.0, joint=True) and r.effective_deadline_ms == 215.0


@pytest.mark.parametrize(("remote", "policy", "words"), [
    ("remote = { latency_ms = 100, deadline_ms = 50 }", "dqn", "daemon.remote.deadline_ms: must be above latency_ms"),
    ("remote = { latency_ms = -1 }", "dqn", "daemon.remote.latency_ms: must be >= 0"),
    ("remote = { joint = 1 }", "dqn", "daemon.remote.joint: must be true or false"),
    ("remote = { via = \"tcp\" }", "dqn", "via"),
    ("remote = { }\ncca = \"cubic\"", "static", 'daemon.remote: only used with policy = "dqn"'),
])
def test_bad_remote_table_is_one_line(tmp_path: Path, remote: str, policy: str, words: str) -> None:
    with pytest.raises(ScenarioError) as e:
        load_scenario(scenario(tmp_path, remote, policy))
    assert words in str(e.value) and "\n" not in str(e.value).strip()


def test_arms_and_the_config_the_runner_writes(tmp_path: Path) -> None:
    assert check_arms(["dqn-remote", "dqn-joint-105"]) == ["dqn-remote", "dqn-joint-105"]
    for bad in ("dqn-joint-x", "dqn-remote-65-l4s", "dqn-remote-l4s-l4s"):
        with pytest.raises(ValueError, match=f"unknown arm '{bad}'"):
            check_arms([bad])
    assert remote_arm("dqn-remote-l4s") == RemoteDecisions(l4s=True)
    assert remote_arm("dqn-joint-l4s-65") == RemoteDecisions(latency_ms=65.0, joint=True, l4s=True)
    assert remote_arm("dqn-remote-65") == RemoteDecisions(latency_ms=65.0)
    sc = arm_scenario(load_scenario(scenario(tmp_path, "")), "dqn-joint-105")
    assert sc.daemon is not None and sc.daemon.remote == RemoteDecisions(latency_ms=105.0, joint=True)
    assert "remote" not in daemon_config(sc.daemon, sc.flows)["policy"]  # no server started yet
    started = RemoteDecisions(latency_ms=105.0, joint=True, server="10.9.0.1:7070", key_file=tmp_path / "k")
    pol = daemon_config(DaemonSettings(remote=started), sc.flows)["policy"]
    assert pol["remote"] == "10.9.0.1:7070" and pol["remote_joint"] is True
    assert pol["remote_deadline_s"] == pytest.approx(0.255) and pol["remote_key"] == str(tmp_path / "k")


@pytest.mark.kernel
def test_daemons_decide_jointly_through_a_server_in_the_testbed(tmp_path: Path, iperf3: str) -> None:
    from ccswitch.testbed.runs.runner import run_once

    sc = load_scenario(scenario(tmp_path, "remote = { latency_ms = 20, joint = true }"))
    summary = run_once(sc, tmp_path / "run", progress=False)
    srv = summary["meta"]["policy_server"]
    assert srv["joint"] and srv["latency_ms"] == 20.0 and srv["stats"] is not None, srv
    st = srv["stats"]
    # two daemons, one decision a second each over ~10 s (slack for start-up on a loaded machine)
    assert st["requests"].get("CCA_JOINT_REQ", 0) >= 10 and st["joint_flows"] >= 10, st
    assert st["refused"] == {} and st["late"] == 0, st
    # the serving's own CPU clock: some CPU was spent, never more than 2 cores' worth of the wall time
    assert st["serving_wall_s"] >= 5.0 and 0.0 < st["serving_cpu_s"] <= 2.0 * st["serving_wall_s"], st
    # one managed flow per daemon: iperf3's control connection goes on no path, so it never votes
    assert st["joint_flows"] <= st["requests"]["CCA_JOINT_REQ"] < st["flows"], st
    for c in ("C1", "C2"):
        d = tmp_path / "run" / "daemon" / c
        cfg = (d / "ccswitchd.toml").read_text()
        assert 'remote = "' in cfg and "remote_joint = true" in cfg
        log = (d / "ccswitchd.log").read_text()
        stopped = next(x for x in log.splitlines() if "msg=stopped" in x)
        fields = dict(kv.split("=", 1) for kv in stopped.split() if "=" in kv)
        # every decision answered by the server; the answer time is the 20 ms hold plus the path
        assert int(fields["remote_rows"]) >= 5 and int(fields["remote_local_rows"]) <= 2, stopped
        assert 20.0 <= float(fields["remote_answer_ms_p50"]) < 150.0, stopped
        assert any(json.loads(x)["policy"] == "dqn" for x in (d / "decisions.jsonl").read_text().splitlines())
