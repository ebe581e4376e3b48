"""Scenario files (ccswitch.testbed.scenario): parsing, defaults, one-line errors, the [daemon] table; no
kernel needed.  Queues and links: test_scenario_queues.py; run metrics: test_run_metrics.py."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from ccswitch.testbed.runs.emulator import binary_path
from ccswitch.testbed.scenario import (
    BASE_CPORT,
    BASE_PORT,
    GilbertLoss,
    Pfifo,
    ScenarioError,
    load_scenario,
    parse_scenario,
)

CCAS = ["bbr", "cubic", "pcc", "prague", "reno"]  # prague: the L4S scenarios (BPF Prague)
REPO = Path(__file__).resolve().parent.parent
SCENARIOS = REPO / "testbed" / "scenarios"
LINKEMU = binary_path()  # $LINKEMU, else the crate's release build

GOOD = """
name = "two"
duration_s = 20
[link.uplink]
rate_mbit = 100
delay_ms = 2
qdisc = { kind = "pfifo", limit_pkts = 50 }
[[flows]]
client = 1
cca = "cubic"
[[flows]]
client = 2
cca = "bbr"
[[switches]]
at_s = 5
flow = "C2"
cca = "cubic"
"""


def parse(text: str) -> object:
    return parse_scenario(text, "s.toml", ccas=CCAS)


def test_good_scenario_and_defaults() -> None:
    sc = parse(GOOD)
    assert sc.name == "two" and sc.duration_s == 20 and sc.clients == 2
    assert sc.seeds == (1,) and sc.repetitions == 1 and sc.sample_interval_s == 1.0
    c1, c2 = sc.flows
    assert (c1.name, c1.client, c1.start_s, c1.duration_s) == ("C1", 1, 0.0, 20.0)
    assert (c1.port, c1.cport, c2.port, c2.cport) == (BASE_PORT, BASE_CPORT, BASE_PORT + 1, BASE_CPORT + 1)
    assert sc.link.uplink.qdisc == Pfifo(50)
    # downlink defaults to the uplink without loss
    assert sc.link.downlink.rate_mbit == 100 and sc.link.downlink.delay_ms == 2
    assert sc.phase_bounds() == [0.0, 5.0, 20.0]
    assert sc.cca_at(c2, 4.9) == "bbr" and sc.cca_at(c2, 5.0) == "cubic"


def test_emulator_config_maps_onto_linkemu_contract(tmp_path: Path) -> None:
    sc = parse(GOOD.replace("[[flows]]", """
[link.uplink.loss]
model = "gilbert"
p_gb = 0.01
p_bg = 0.5
[link.wifi]
clients = [{ phy_rate_mbit = 300 }, { phy_rate_mbit = 150, uplink_phy_rate_mbit = 100 }]
aggregation = { max_frames = 32 }
access_delay_us = { cw_min = 15, extra = { dist = "exponential", mean_us = 100 } }
[[flows]]""", 1))
    assert isinstance(sc.link.uplink.loss, GilbertLoss)
    cfg = sc.emulator_config(["c1", "c2"], "srv", 7, tmp_path)
    assert cfg["client_ifs"] == ["c1", "c2"] and cfg["server_if"] == "srv" and cfg["seed"] == 7
    assert cfg["uplink"] == {"rate_mbit": 100.0, "delay_ms": 2.0, "qdisc": {"kind": "pfifo", "limit_pkts": 50},
                             "loss": {"model": "gilbert", "p_gb": 0.01, "p_bg": 0.5, "loss_good": 0.0,
                                      "loss_bad": 1.0}}
    assert "loss" not in cfg["downlink"]
    assert cfg["wifi"] == {"clients": [{"phy_rate_mbit": 300.0},
                                       {"phy_rate_mbit": 150.0, "uplink_phy_rate_mbit": 100.0}],
                           "aggregation": {"max_frames": 32},
                           "access_delay_us": {"cw_min": 15, "extra": {"dist": "exponential", "mean_us": 100.0}},
                           "phy": {}}
    assert cfg["stats"] == {"dir": str(tmp_path), "interval_ms": 1000, "per_packet": False}
    json.dumps(cfg)  # serialisable


@pytest.mark.parametrize(("change", "field", "words"), [
    (("cca = \"bbr\"", "cca = \"vegas\""), "flows[1].cca", "unknown congestion control 'vegas' (available: bbr"),
    (("duration_s = 20", "duration_s = \"long\""), "duration_s", "must be a number"),
    (("duration_s = 20", ""), "duration_s", "missing"),
    (("delay_ms = 2", "delay_ms = -1"), "link.uplink.delay_ms", "must be >= 0"),
    (("delay_ms = 2", "dealy_ms = 2"), "link.uplink.dealy_ms", "unknown field"),
    (("limit_pkts = 50", "limit_pkts = 0"), "link.uplink.qdisc.limit_pkts", "must be >= 1"),
    (("kind = \"pfifo\"", "kind = \"sfq\""), "link.uplink.qdisc.kind", "unknown value 'sfq'"),
    (("kind = \"pfifo\", limit_pkts = 50", "kind = \"fq_codel\", quantum = 100"), "link.uplink.qdisc.quantum",
     "must be >= 256, got 100"),
    (("kind = \"pfifo\", limit_pkts = 50", "kind = \"fq_codel\", flow_limit_pkts = 100"),
     "link.uplink.qdisc.flow_limit_pkts", "unknown field"),
    (("kind = \"pfifo\", limit_pkts = 50", "kind = \"fq\", flow_limit_pkts = 20000"),
     "link.uplink.qdisc.flow_limit_pkts", "must be <= limit_pkts (10240), got 20000"),
    (("kind = \"pfifo\", limit_pkts = 50", "kind = \"fq\", flow_limit_pkts = 0"),
     "link.uplink.qdisc.flow_limit_pkts", "must be >= 1"),
    (("kind = \"pfifo\", limit_pkts = 50", "kind = \"lfq\", default_limit_pkts = 200, limit_pkts = 100"),
     "link.uplink.qdisc.default_limit_pkts", "must be <= limit_pkts (100), got 200"),
    (("kind = \"pfifo\", limit_pkts = 50", "kind = \"lfq\", flow_limit_pkts = 10"),
     "link.uplink.qdisc.flow_limit_pkts", "unknown field"),
    (("kind = \"pfifo\", limit_pkts = 50", "kind = \"lfq\", idle_timeout_ms = 0"),
     "link.uplink.qdisc.idle_timeout_ms", "must be > 0"),
    (("kind = \"pfifo\", limit_pkts = 50", "kind = \"vdq_csaqm\", ctv_rule = \"pi\""),
     "link.uplink.qdisc.ctv_rule", "unknown value 'pi'"),
    (("kind = \"pfifo\", limit_pkts = 50", "kind = \"vdq_csaqm\", steady_alpha = 2"),
     "link.uplink.qdisc.steady_alpha", "must be <= 1"),
    (("kind = \"pfifo\", limit_pkts = 50", "kind = \"vdq_csaqm\", steady_setpoint = 0"),
     "link.uplink.qdisc.steady_setpoint", "must be > 0"),
    (("kind = \"pfifo\", limit_pkts = 50", "kind = \"vdq_csaqm\", steady_setpoint = 1.5"),
     "link.uplink.qdisc.steady_setpoint", "must be <= 1"),
    (("kind = \"pfifo\", limit_pkts = 50", "kind = \"vdq_csaqm\", steady_l4s_gain = 0"),
     "link.uplink.qdisc.steady_l4s_gain", "must be > 0"),
    (("kind = \"pfifo\", limit_pkts = 50", "kind = \"pie\", alpha = 3"), "link.uplink.qdisc.alpha",
     "must be <= 2, got 3"),
    (("kind = \"pfifo\", limit_pkts = 50", "kind = \"pie\", alpha = 0"), "link.uplink.qdisc.alpha", "must be > 0"),
    (("kind = \"pfifo\", limit_pkts = 50", "kind = \"pie\", beta = -1"), "link.uplink.qdisc.beta", "must be >= 0"),
    (("kind = \"pfifo\", limit_pkts = 50", "kind = \"pie\", tupdate_ms = 0.01"), "link.uplink.qdisc.tupdate_ms",
     "must be >= 0.1"),
    (("kind = \"pfifo\", limit_pkts = 50", "kind = \"pie\", target_ms = 0"), "link.uplink.qdisc.target_ms",
     "must be > 0"),
    (("kind = \"pfifo\", limit_pkts = 50", "kind = \"pie\", limit_pkts = 0"), "link.uplink.qdisc.limit_pkts",
     "must be >= 1"),
    (("kind = \"pfifo\", limit_pkts = 50", "kind = \"pie\", ecn = 1"), "link.uplink.qdisc.ecn",
     "must be true or false"),
    (("kind = \"pfifo\", limit_pkts = 50", "kind = \"pie\", flows = 16"), "link.uplink.qdisc.flows",
     "unknown field"),
    (("kind = \"pfifo\", limit_pkts = 50", "kind = \"pie\", ecn_prob_pct = 20"), "link.uplink.qdisc.ecn_prob_pct",
     "unknown field"),
    (("kind = \"pfifo\", limit_pkts = 50", "kind = \"fq_pie\", ecn_prob_pct = 150"),
     "link.uplink.qdisc.ecn_prob_pct", "must be <= 100, got 150"),
    (("kind = \"pfifo\", limit_pkts = 50", "kind = \"fq_pie\", quantum = 100"), "link.uplink.qdisc.quantum",
     "must be >= 256, got 100"),
    (("kind = \"pfifo\", limit_pkts = 50", "kind = \"fq_pie\", max_burst_ms = -1"),
     "link.uplink.qdisc.max_burst_ms", "must be >= 0"),
    (("kind = \"pfifo\", limit_pkts = 50", "kind = \"fq_pie\", flow_limit_pkts = 100"),
     "link.uplink.qdisc.flow_limit_pkts", "unknown field"),
    (("flow = \"C2\"", "flow = \"C3\""), "switches[0].flow", "no flow named 'C3'"),
    (("at_s = 5", "at_s = 25"), "switches[0].at_s", "outside flow C2's lifetime"),
    (("client = 2", "client = 2\nstart_s = 30"), "flows[1].start_s", "must be before the end"),
    (("client = 2", "client = 2\nduration_s = 30"), "flows[1].duration_s", "exceeds the run's duration_s"),
    (("client = 2", "client = 1"), "flows[1].name", "duplicate flow name 'C1'"),
    (("name = \"two\"", "name = \"two\"\nclients = 1"), "flows[1].client", "must be <= 1"),
    (("name = \"two\"", "name = \"two\"\ndaemon = 3"), "daemon", "must be true, false or a table"),
    (("[link.uplink]", "[daemon]\npolicy = \"ml\"\n[link.uplink]"), "daemon.policy", "unknown value 'ml'"),
    (("[link.uplink]", "[daemon]\npolicy = \"static\"\n[link.uplink]"), "daemon.cca",
     "needs the CCA"),
    (("[link.uplink]", "[daemon]\ncca = \"bbr\"\n[link.uplink]"), "daemon.cca",
     "only used with policy = \"static\""),
    (("[link.uplink]", "[daemon]\nclients = [3]\n[link.uplink]"), "daemon.clients", "client numbers 1..2"),
    (("[link.uplink]", "[daemon]\ntick_s = 0.01\n[link.uplink]"), "daemon.tick_s", "must be >= 0.1"),
    (("[link.uplink]", "[daemon]\nguard = { min_dwell_s = -1 }\n[link.uplink]"), "daemon.guard.min_dwell_s",
     "must be >= 0"),
    (("[link.uplink]", "[daemon]\nguard = { dwell = 1 }\n[link.uplink]"), "daemon.guard.dwell",
     "unknown key"),
    (("[link.uplink]", "[daemon]\npolicy = \"heuristic\"\npolicy_file = \"p.json\"\n[link.uplink]"),
     "daemon.policy_file", "only used with policy = \"dqn\""),
    (("[link.uplink]", "[daemon]\npolicy_file = \"no-such-policy.json\"\n[link.uplink]"),
     "daemon.policy_file", "no such file"),
    (("name = \"two\"", "name = \"two\"\nseeds = [1, 2]\nrepetitions = 3"), "seeds", "repetitions = 3"),
    (("name = \"two\"", "name = \"two\"\nsample_interval_s = 0.01"), "sample_interval_s", "must be >= 0.1"),
    (("name = \"two\"", "name = \"two\"\nextra = 1"), "extra", "unknown field (expected one of:"),
    (("flow = \"C2\"", "flow = \"C2\"\ninherit = \"all\""), "switches[0].inherit", "unknown value 'all'"),
    (("rate_mbit = 100", "rate_mbit = 100\ntrace = \"x\""), "link.uplink.trace", "not both"),
    (("[link.uplink]", "[link]\nemulator = \"kernel\"\n[link.uplink]"), "link.uplink.delay_ms",
     "must be 0 with emulator = \"kernel\""),
])
def test_bad_field_gives_one_clear_error(change: tuple[str, str], field: str, words: str) -> None:
    old, new = change
    assert old in GOOD
    # the last occurrence for cca/client (flows[1]), the first otherwise
    text = GOOD[::-1].replace(old[::-1], new[::-1], 1)[::-1] if old.startswith(("cca = \"bbr\"", "client = 2")) \
        else GOOD.replace(old, new, 1)
    with pytest.raises(ScenarioError) as ei:
        parse(text)
    msg = str(ei.value)
    assert "\n" not in msg
    assert msg.startswith(f"s.toml: {field}: "), msg
    assert words in msg, msg


def test_tcp_ecn_option() -> None:
    assert parse(GOOD).tcp_ecn is None  # the kernel's default (2: no ECN negotiated)
    assert parse("tcp_ecn = 1\n" + GOOD).tcp_ecn == 1
    assert parse("tcp_ecn = 0\n" + GOOD).tcp_ecn == 0
    for bad in ("3", "true", "1.0", '"on"'):
        with pytest.raises(ScenarioError) as ei:
            parse(f"tcp_ecn = {bad}\n" + GOOD)
        assert str(ei.value).startswith("s.toml: tcp_ecn: must be 0 (no ECN), 1 ") and "\n" not in str(ei.value)


def test_wifi_needs_one_entry_per_client() -> None:
    text = GOOD.replace("[[flows]]", "[link.wifi]\nclients = [{ phy_rate_mbit = 300 }]\n[[flows]]", 1)
    with pytest.raises(ScenarioError, match=r"^s\.toml: link\.wifi\.clients: needs one entry per client \(2\)"):
        parse(text)


def test_invalid_toml_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match=r"^s\.toml: invalid TOML: .*line 1"):
        parse("duration_s = = 3")
    with pytest.raises(ScenarioError, match="no such file"):
        load_scenario(tmp_path / "nope.toml")
    with pytest.raises(ScenarioError, match=r"^s\.toml: flows: at least one"):
        parse("duration_s = 10")


def test_shipped_scenarios_are_valid() -> None:
    files = sorted(f for f in SCENARIOS.glob("*.toml") if f.name != "space.toml")  # space.toml: test_space.py
    assert len(files) >= 6
    for f in files:
        sc = load_scenario(f, ccas=CCAS)
        assert sc.flows and sc.name == f.stem


def test_daemon_table_and_its_config() -> None:
    """[daemon] settings become a ccswitchd config that the daemon's own validator accepts."""
    from ccswitch.daemon.config import parse_config
    from ccswitch.testbed.runs.daemons import daemon_config, toml_text

    sc = parse(GOOD.replace("[link.uplink]", "[daemon]\npolicy = \"static\"\ncca = \"bbr\"\nclients = [2]\n"
                                             "guard = { min_dwell_s = 2.5, consecutive = 2 }\n[link.uplink]"))
    d = sc.daemon
    assert d is not None and d.policy == "static" and d.cca == "bbr" and d.clients == (2,)
    assert not d.runs_on(1) and d.runs_on(2)
    cfg = daemon_config(d, sc.flows_of(2))
    assert cfg["flows"]["local_ports"] == [BASE_CPORT + 1]  # only the iperf3 data flow, not the control one
    parsed = parse_config(tomllib.loads(toml_text(cfg, "header\nline 2")))
    assert parsed.get("policy.kind") == "static" and parsed.get("policy.static_cca") == "bbr"
    assert parsed.get("guard.min_dwell_s") == 2.5 and parsed.get("guard.consecutive") == 2
    assert parse(GOOD.replace("[link.uplink]", "daemon = true\n[link.uplink]")).daemon.policy == "dqn"
    assert parse(GOOD).daemon is None


def test_daemon_policy_file_reaches_the_daemon_config(tmp_path: Path) -> None:
    """A candidate policy (scenario policy_file, or experiments --policy-file) becomes policy.file
    of every daemon's config, resolved against the scenario's folder; other arms drop it."""
    from ccswitch.daemon.config import parse_config
    from ccswitch.testbed.scenario import daemon_config, toml_text
    from ccswitch.testbed.scenario.arms import arm_scenario

    (tmp_path / "cand.json").write_text("{}")
    (tmp_path / "s.toml").write_text(GOOD.replace("[link.uplink]", "[daemon]\npolicy_file = \"cand.json\"\n"
                                                                   "[link.uplink]"))
    sc = load_scenario(tmp_path / "s.toml", ccas=CCAS)
    assert sc.daemon is not None and sc.daemon.policy_file == tmp_path / "cand.json"
    cfg = daemon_config(sc.daemon, sc.flows_of(1))
    assert parse_config(tomllib.loads(toml_text(cfg, "x"))).get("policy.file") == str(tmp_path / "cand.json")
    other = tmp_path / "other.json"
    assert arm_scenario(sc, "dqn", other).daemon.policy_file == other
    assert arm_scenario(sc, "heuristic", other).daemon.policy_file is None
    assert arm_scenario(sc, "daemon-static-pcc").daemon.policy_file is None
    assert arm_scenario(sc, "static").daemon is None
    tuned = arm_scenario(sc, "heuristic", guard=[("return_holdoff_s", 20), ("margin", 0.5)])
    assert dict(tuned.daemon.guard) == {"return_holdoff_s": 20, "margin": 0.5}
    assert parse_config(tomllib.loads(toml_text(daemon_config(tuned.daemon, sc.flows_of(1)), "x"))).get(
        "guard.return_holdoff_s") == 20


def test_experiments_guard_option_is_checked_by_the_daemon_validator(capsys: pytest.CaptureFixture[str]) -> None:
    """--guard KEY=VALUE reaches every daemon arm; a bad key or value is one line naming it, exit 2."""
    from ccswitch.testbed.experiments import main
    from ccswitch.testbed.scenario.arms import guard_setting

    assert guard_setting("return_holdoff_s=20") == ("return_holdoff_s", 20)
    assert guard_setting("margin = 0.5") == ("margin", 0.5)
    with pytest.raises(SystemExit) as e:
        main(["run", "--arms", "dqn", "--guard", "margn=1", "--out", "/nonexistent"])
    assert e.value.code == 2 and "margn" in capsys.readouterr().err
