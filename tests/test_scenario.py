"""Scenario files (ccswitch.testbed.scenario), metrics and report helpers: no kernel needed."""

from __future__ import annotations

import json
import math
import subprocess
import tomllib
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ccswitch.metrics import starvation, thratio, utilisation
from ccswitch.testbed.runs.emulator import binary_path
from ccswitch.testbed.scenario import (
    BASE_CPORT,
    BASE_PORT,
    Codel,
    Fq,
    FqCodel,
    FqDualPi2,
    FqPie,
    GilbertLoss,
    Lfq,
    Pfifo,
    Pie,
    ScenarioError,
    VdqCsaqm,
    VdqPolicyRule,
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


def test_codel_and_trace(tmp_path: Path) -> None:
    (tmp_path / "t.trace").write_text("1\n2\n")
    (tmp_path / "s.toml").write_text(GOOD.replace('qdisc = { kind = "pfifo", limit_pkts = 50 }',
                                                  'qdisc = { kind = "codel", target_ms = 5 }')
                                     .replace("rate_mbit = 100", 'trace = "t.trace"'))
    sc = load_scenario(tmp_path / "s.toml", ccas=CCAS)
    assert sc.link.uplink.trace == tmp_path / "t.trace" and sc.link.uplink.rate_mbit is None
    assert sc.link.uplink.qdisc == Codel(target_ms=5.0)
    assert sc.emulator_config(["c1"], "srv", 1, tmp_path)["uplink"]["trace"] == str(tmp_path / "t.trace")


def test_fair_queuing_qdiscs_map_onto_linkemu(tmp_path: Path) -> None:
    """fq_codel and fq: None fields stay out of the config (linkemu's defaults), set ones pass through."""
    def uplink(qdisc: str) -> tuple[object, dict[str, object]]:
        sc = parse(GOOD.replace('qdisc = { kind = "pfifo", limit_pkts = 50 }', qdisc))
        return sc.link.uplink, sc.emulator_config(["c1", "c2"], "srv", 1, tmp_path)

    up, cfg = uplink('qdisc = { kind = "fq_codel" }')
    assert up.qdisc == FqCodel() and up.queue_limit_pkts == 10_240
    assert cfg["uplink"]["qdisc"] == {"kind": "fq_codel"}
    assert cfg["downlink"]["qdisc"] == {"kind": "fq_codel"}  # the downlink defaults to the uplink
    up, cfg = uplink('qdisc = { kind = "fq_codel", flows = 256, quantum = 300, target_ms = 10, interval_ms = 200, '
                     'limit_pkts = 2000, ecn = true }')
    assert up.queue_limit_pkts == 2000
    assert cfg["uplink"]["qdisc"] == {"kind": "fq_codel", "flows": 256, "quantum": 300, "target_ms": 10.0,
                                      "interval_ms": 200.0, "limit_pkts": 2000, "ecn": True}
    up, cfg = uplink('qdisc = { kind = "fq", flow_limit_pkts = 100 }')
    assert up.qdisc == Fq(flow_limit_pkts=100) and up.queue_limit_pkts == 10_240
    assert cfg["uplink"]["qdisc"] == {"kind": "fq", "flow_limit_pkts": 100}
    _, cfg = uplink('qdisc = { kind = "fq", flow_limit_pkts = 1000, limit_pkts = 1000, flows = 64, quantum = 3028 }')
    assert cfg["uplink"]["qdisc"] == {"kind": "fq", "flow_limit_pkts": 1000, "limit_pkts": 1000, "flows": 64,
                                      "quantum": 3028}
    json.dumps(cfg)
    # lfq: fq with per-flow limits an agent sets through linkemu's control socket.
    up, cfg = uplink('qdisc = { kind = "lfq", default_limit_pkts = 100 }')
    assert up.qdisc == Lfq(default_limit_pkts=100) and up.queue_limit_pkts == 10_240
    assert cfg["uplink"]["qdisc"] == {"kind": "lfq", "default_limit_pkts": 100}
    up, cfg = uplink('qdisc = { kind = "lfq", default_limit_pkts = 20, limit_pkts = 500, flows = 64, quantum = 3028, '
                     'idle_timeout_ms = 1000 }')
    assert up.queue_limit_pkts == 500
    assert cfg["uplink"]["qdisc"] == {"kind": "lfq", "default_limit_pkts": 20, "limit_pkts": 500, "flows": 64,
                                      "quantum": 3028, "idle_timeout_ms": 1000.0}
    # Bottleneck links only, as in linkemu: not the WiFi queues.
    for kind in ("fq_codel", "fq", "lfq"):
        text = GOOD.replace("[[flows]]", "[link.wifi]\nclients = [{ phy_rate_mbit = 300 }, { phy_rate_mbit = 300 }]\n"
                            f'queue = {{ kind = "{kind}" }}\n[[flows]]', 1)
        with pytest.raises(ScenarioError, match=rf"^s\.toml: link\.wifi\.queue\.kind: {kind} is supported on "):
            parse(text)


def test_pie_and_fq_pie_map_onto_linkemu(tmp_path: Path) -> None:
    """pie and fq_pie: None fields stay out of the config (linkemu's = Linux's defaults), set ones pass through."""
    def uplink(qdisc: str) -> tuple[object, dict[str, object]]:
        sc = parse(GOOD.replace('qdisc = { kind = "pfifo", limit_pkts = 50 }', qdisc))
        return sc.link.uplink, sc.emulator_config(["c1", "c2"], "srv", 1, tmp_path)

    up, cfg = uplink('qdisc = { kind = "pie" }')
    assert up.qdisc == Pie() and up.queue_limit_pkts == 1000
    assert cfg["uplink"]["qdisc"] == {"kind": "pie"} and cfg["downlink"]["qdisc"] == {"kind": "pie"}
    # Paper 000's PIE: target 15 ms, tupdate 15 ms, alpha 0.125, beta 1.25, max burst 150 ms.
    up, cfg = uplink('qdisc = { kind = "pie", target_ms = 15, tupdate_ms = 15, alpha = 0.125, beta = 1.25, '
                     'max_burst_ms = 150, limit_pkts = 500, ecn = true, bytemode = false }')
    assert up.queue_limit_pkts == 500
    assert cfg["uplink"]["qdisc"] == {"kind": "pie", "target_ms": 15.0, "tupdate_ms": 15.0, "alpha": 0.125,
                                      "beta": 1.25, "max_burst_ms": 150.0, "limit_pkts": 500, "ecn": True,
                                      "bytemode": False}
    up, cfg = uplink('qdisc = { kind = "fq_pie" }')
    assert up.qdisc == FqPie() and up.queue_limit_pkts == 10_240
    assert cfg["uplink"]["qdisc"] == {"kind": "fq_pie"}
    # Paper 000's FQ-PIE: the PIE settings, quantum 1514, limit 10240, 6 flow queues.
    up, cfg = uplink('qdisc = { kind = "fq_pie", flows = 6, quantum = 1514, limit_pkts = 10240, target_ms = 15, '
                     'alpha = 0.125, beta = 1.25, ecn = true, ecn_prob_pct = 10 }')
    assert up.qdisc == FqPie(flows=6, quantum=1514, limit_pkts=10_240, target_ms=15.0, alpha=0.125, beta=1.25,
                             ecn=True, ecn_prob_pct=10.0)
    assert cfg["uplink"]["qdisc"] == {"kind": "fq_pie", "flows": 6, "quantum": 1514, "target_ms": 15.0,
                                      "alpha": 0.125, "beta": 1.25, "limit_pkts": 10_240, "ecn": True,
                                      "ecn_prob_pct": 10.0}
    json.dumps(cfg)
    for kind in ("pie", "fq_pie", "fq_dualpi2"):
        text = GOOD.replace("[[flows]]", "[link.wifi]\nclients = [{ phy_rate_mbit = 300 }, { phy_rate_mbit = 300 }]\n"
                            f'queue = {{ kind = "{kind}" }}\n[[flows]]', 1)
        with pytest.raises(ScenarioError, match=rf"^s\.toml: link\.wifi\.queue\.kind: {kind} is supported on "):
            parse(text)


def test_fq_dualpi2_maps_onto_linkemu(tmp_path: Path) -> None:
    """fq_dualpi2 (paper 000's hashed L4S/Classic pairs): defaults stay out, set fields pass through; one error line."""
    def uplink(qdisc: str) -> tuple[object, dict[str, object]]:
        sc = parse(GOOD.replace('qdisc = { kind = "pfifo", limit_pkts = 50 }', qdisc))
        return sc.link.uplink, sc.emulator_config(["c1", "c2"], "srv", 1, tmp_path)

    up, cfg = uplink('qdisc = { kind = "fq_dualpi2" }')
    assert up.qdisc == FqDualPi2() and up.queue_limit_pkts == 10_240
    assert cfg["uplink"]["qdisc"] == {"kind": "fq_dualpi2"} and cfg["downlink"]["qdisc"] == {"kind": "fq_dualpi2"}
    # Paper 000: 6 queues (3 pairs), PIE 15 ms / 15 ms / 0.125 / 1.25, quantum 1514, k = 2, a 1 ms L step.
    up, cfg = uplink('qdisc = { kind = "fq_dualpi2", flows = 6, quantum = 1514, target_ms = 15, tupdate_ms = 15, '
                     'alpha = 0.125, beta = 1.25, max_burst_ms = 150, limit_pkts = 5000, k = 2, l_min_th_ms = 1, '
                     'c_weight_pct = 10, drop_on_overload = false }')
    assert up.queue_limit_pkts == 5000
    assert cfg["uplink"]["qdisc"] == {"kind": "fq_dualpi2", "flows": 6, "quantum": 1514, "target_ms": 15.0,
                                      "tupdate_ms": 15.0, "alpha": 0.125, "beta": 1.25, "max_burst_ms": 150.0,
                                      "limit_pkts": 5000, "k": 2.0, "l_min_th_ms": 1.0, "c_weight_pct": 10.0,
                                      "drop_on_overload": False}
    json.dumps(cfg)
    for bad, field, words in (("flows = 5", "flows", "must be even, 2..65536"), ("k = 0.1", "k", "must be >= 0.5"),
                              ("ecn = true", "ecn", "unknown field")):
        with pytest.raises(ScenarioError) as ei:
            uplink(f'qdisc = {{ kind = "fq_dualpi2", {bad} }}')
        msg = str(ei.value)
        assert msg.startswith(f"s.toml: link.uplink.qdisc.{field}: ") and words in msg and "\n" not in msg, msg


def test_vdq_csaqm_maps_onto_linkemu(tmp_path: Path) -> None:
    """vdq_csaqm (paper 004): defaults stay out, policies and fields pass through; mistakes name the field."""
    def uplink(qdisc: str, text: str = GOOD) -> tuple[object, dict[str, object]]:
        sc = parse(text.replace('qdisc = { kind = "pfifo", limit_pkts = 50 }', qdisc))
        return sc.link.uplink, sc.emulator_config(["c1", "c2"], "srv", 1, tmp_path)

    up, cfg = uplink('qdisc = { kind = "vdq_csaqm" }')
    assert up.qdisc == VdqCsaqm() and up.queue_limit_pkts == 2083  # 250 ms at 100 Mbit/s
    assert cfg["uplink"]["qdisc"] == {"kind": "vdq_csaqm"}
    up, cfg = uplink('qdisc = { kind = "vdq_csaqm", target0_ms = 1, classic_ecn = false, default_policy = "gold", '
                     'policies = [{ policy = "silver", src = "10.99.0.12", dport = 5202 }] }')
    assert up.qdisc.policies == (VdqPolicyRule("silver", src="10.99.0.12", dport=5202),)
    assert cfg["uplink"]["qdisc"] == {"kind": "vdq_csaqm", "target0_ms": 1.0, "classic_ecn": False,
                                      "default_policy": "gold",
                                      "policies": [{"policy": "silver", "src": "10.99.0.12", "dport": 5202}]}
    json.dumps(cfg)
    base = 'qdisc = { kind = "pfifo", limit_pkts = 50 }'
    for qdisc, field, words in [
        ('{ kind = "vdq_csaqm", vq1_rate = 1.5 }', "link.uplink.qdisc.vq1_rate", "must be <= 1"),
        ('{ kind = "vdq_csaqm", vq0_rate = 0.99 }', "link.uplink.qdisc.vq0_rate", "must be <= vq1_rate"),
        ('{ kind = "vdq_csaqm", default_policy = "bronze" }', "link.uplink.qdisc.default_policy", "unknown value"),
        ('{ kind = "vdq_csaqm", policies = [{ policy = "gold" }, { policy = "x" }] }',
         r"link.uplink.qdisc.policies\[1\].policy", "unknown value 'x'"),
        ('{ kind = "vdq_csaqm", policies = [{ policy = "gold", src = "10.0.0" }] }',
         r"link.uplink.qdisc.policies\[0\].src", "must be an IP address"),
        ('{ kind = "vdq_csaqm", policies = [{ policy = "gold", port = 1 }] }',
         r"link.uplink.qdisc.policies\[0\].port", "unknown field"),
        ('{ kind = "vdq_csaqm", classifier = "dscp" }', "link.uplink.qdisc.l_dscp", "classifier = \"dscp\" needs"),
        ('{ kind = "vdq_csaqm", target_ms = 5 }', "link.uplink.qdisc.target_ms", "unknown field"),
    ]:
        with pytest.raises(ScenarioError, match=rf"^s\.toml: {field}: {words}"):
            parse(GOOD.replace(base, f"qdisc = {qdisc}"))
    no_rate = GOOD.replace("rate_mbit = 100\n", "").replace(base, 'qdisc = { kind = "vdq_csaqm" }')
    with pytest.raises(ScenarioError, match=r"^s\.toml: link\.uplink\.qdisc\.rate_mbit: required"):
        parse(no_rate)
    up, _ = uplink('qdisc = { kind = "vdq_csaqm", rate_mbit = 50 }', GOOD.replace("rate_mbit = 100\n", ""))
    assert up.queue_limit_pkts == 1041
    text = GOOD.replace("[[flows]]", "[link.wifi]\nclients = [{ phy_rate_mbit = 300 }, { phy_rate_mbit = 300 }]\n"
                        'queue = { kind = "vdq_csaqm", rate_mbit = 10 }\n[[flows]]', 1)
    with pytest.raises(ScenarioError, match=r"^s\.toml: link\.wifi\.queue\.kind: vdq_csaqm is supported on "):
        parse(text)



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


def test_linkemu_accepts_the_generated_configs(tmp_path: Path, require: Callable[[bool, str], None]) -> None:
    """The scenario's link section maps onto linkemu's config: `linkemu --check` agrees."""
    require(LINKEMU.is_file(), f"{LINKEMU} is not built (run scripts/setup.sh)")
    full = GOOD.replace("[[flows]]", """
loss = { model = "gilbert", p_gb = 0.01, p_bg = 0.5, loss_bad = 0.5 }
overhead_bytes = 14
[link.downlink]
qdisc = { kind = "codel", target_ms = 5, ecn = true }
[link.wifi]
clients = [{ phy_rate_mbit = 300 }, { phy_rate_mbit = 150, uplink_phy_rate_mbit = 100 }]
aggregation = { max_frames = 32, max_wait_us = 100 }
phy = { preamble_us = 44, mpdu_overhead_bytes = 40 }
queue = { kind = "pfifo", limit_pkts = 500 }
[link.wifi.access_delay_us]
cw_min = 7
cw_max = 255
collisions = false
extra = { dist = "lognormal", median_us = 50, sigma = 1 }
[[flows]]""", 1)
    fair = [parse(GOOD.replace('qdisc = { kind = "pfifo", limit_pkts = 50 }', q)) for q in (
        'qdisc = { kind = "fq_codel" }',
        'qdisc = { kind = "fq_codel", flows = 256, quantum = 300, target_ms = 10, interval_ms = 200, '
        'limit_pkts = 2000, ecn = true }',
        'qdisc = { kind = "fq", flow_limit_pkts = 1000, limit_pkts = 1000, flows = 64, quantum = 3028 }',
        'qdisc = { kind = "lfq" }',
        'qdisc = { kind = "lfq", default_limit_pkts = 20, limit_pkts = 500, flows = 64, idle_timeout_ms = 1000 }',
        'qdisc = { kind = "pie" }',
        'qdisc = { kind = "pie", target_ms = 15, tupdate_ms = 15, alpha = 0.125, beta = 1.25, max_burst_ms = 150, '
        'limit_pkts = 500, ecn = true, bytemode = true }',
        'qdisc = { kind = "fq_pie" }',
        'qdisc = { kind = "fq_pie", flows = 6, quantum = 1514, limit_pkts = 10240, alpha = 0.125, beta = 1.25, '
        'ecn = true, ecn_prob_pct = 10, max_burst_ms = 0 }',
        'qdisc = { kind = "fq_dualpi2" }')]
    scenarios = [parse(full), *fair] + [load_scenario(f, ccas=CCAS) for f in sorted(SCENARIOS.glob("*.toml"))
                                        if f.name != "space.toml"]
    for sc in scenarios:
        if sc.link.emulator != "linkemu":
            continue
        cfg = tmp_path / "config.json"
        ifs = [f"c{i}" for i in range(1, sc.clients + 1)]
        (tmp_path / "stats").mkdir(exist_ok=True)  # the runner makes it; a control socket's folder must exist
        cfg.write_text(json.dumps(sc.emulator_config(ifs, "srv", 1, tmp_path / "stats")))
        cp = subprocess.run([str(LINKEMU), "--config", str(cfg), "--check"], capture_output=True, text=True,
                            check=False)
        assert cp.returncode == 0, f"{sc.name}: {cp.stderr}"


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


def test_rebin_daemon_ticks_onto_the_grid() -> None:
    """200 ms FlowSample rows -> one row per 1 s interval: rates time-weighted, counts summed, last state."""
    from ccswitch.schema import FLOW_SAMPLE_SCHEMA
    from ccswitch.testbed.reports.run_folder import rebin_samples

    t0 = 1000.0
    proto = {f.name: (0 if str(f.type).startswith("uint") else "x" if str(f.type) == "string" else 0.0)
             for f in FLOW_SAMPLE_SCHEMA}
    rows = []
    for k in range(1, 11):  # ticks ending at t0 + 0.2 k (s), flow 7, goodput 10 Mbit/s then 20 Mbit/s
        rows.append({**proto, "ts_s": t0 + 0.2 * k + 0.01, "interval_s": 0.2, "flow_id": 7,
                     "cca": "bbr" if k < 4 else "cubic", "goodput_bps": 10e6 if k <= 5 else 20e6,
                     "throughput_bps": 11e6, "sent_segs": 10, "retrans_segs": 1 if k == 2 else 0,
                     "rtt_us": 1000.0 * k, "jitter_us": 100.0, "rtt_samples": 5})
    table = pa.Table.from_pylist(rows, schema=FLOW_SAMPLE_SCHEMA)
    out = rebin_samples(table, t0, 1.0).to_pylist()
    assert len(out) == 2
    first, second = out
    assert first["interval_s"] == pytest.approx(1.0) and first["goodput_bps"] == pytest.approx(10e6)
    assert second["goodput_bps"] == pytest.approx(20e6)
    assert first["sent_segs"] == 50 and first["retrans_segs"] == 1 and first["loss_rate"] == pytest.approx(0.02)
    assert first["cca"] == "cubic" and first["rtt_us"] == 5000.0  # the state at the end of the interval
    assert first["ts_s"] == pytest.approx(t0 + 1.01)


def test_last_half_targets(tmp_path: Path) -> None:
    """Share of fair share, Jain and the targets over the last half, from a synthetic run folder."""
    from ccswitch.schema import FLOW_SAMPLE_SCHEMA
    from ccswitch.testbed.reports.run_folder import load_run
    from ccswitch.testbed.reports.run_metrics import last_half

    t0 = 5000.0
    proto = {f.name: (0 if str(f.type).startswith("uint") else "cubic" if str(f.type) == "string" else 0.0)
             for f in FLOW_SAMPLE_SCHEMA}
    rows = []
    for k in range(1, 21):
        for fid, mbps in ((1, 60.0 if k <= 10 else 47.0), (2, 30.0 if k <= 10 else 40.0)):
            rows.append({**proto, "ts_s": t0 + k, "interval_s": 1.0, "flow_id": fid, "goodput_bps": mbps * 1e6,
                         "throughput_bps": mbps * 1.04e6, "rtt_us": 1000.0 * k + 500.0 * (fid - 1),
                         "cca": "bbr" if fid == 2 and k > 5 else "cubic"})
    pq.write_table(pa.Table.from_pylist(rows, schema=FLOW_SAMPLE_SCHEMA), tmp_path / "samples.parquet")
    pq.write_table(pa.Table.from_pylist([{"flow_id": 1, "flow": "C1"}, {"flow_id": 2, "flow": "C2"}]),
                   tmp_path / "flows.parquet")
    meta = {"t0_epoch": t0, "sample_interval_s": 1.0, "duration_s": 20.0, "uplink_rate_mbit": 100.0,
            "phase_bounds_s": [0.0, 20.0], "flows": [{"name": "C1", "client": 1, "cca": "cubic"},
                                                     {"name": "C2", "client": 2, "cca": "cubic"}]}
    (tmp_path / "summary.json").write_text(json.dumps({"meta": meta}))
    lh = last_half(load_run(tmp_path))
    assert lh["throughput_mbps"] == {"C1": pytest.approx(47.0), "C2": pytest.approx(40.0)}
    assert lh["min_share_flow"] == "C2" and lh["min_share"] == pytest.approx(40.0 / 43.5)
    assert lh["jain"] == pytest.approx(87.0**2 / (2 * (47.0**2 + 40.0**2)))
    assert lh["utilisation"] == pytest.approx(87.0 * 1.04 / 100.0)  # no linkemu stats: the flows' wire rate
    assert lh["targets"] == {"min_share": True, "jain": True, "utilisation": True} and lh["targets_met"]
    assert lh["rtt_p95_ms"] == pytest.approx(20.025)  # 11, 11.5, ..., 20.5 ms: pos 18.05 of 0..19
    assert lh["cca_changes"]["C2"] == [{"t_s": 6.0, "from": "cubic", "to": "bbr"}]


def test_starvation_episodes() -> None:
    times = [float(t) for t in range(1, 21)]
    a = [50.0] * 20
    b = [1.0] * 8 + [45.0] * 4 + [2.0] * 3 + [40.0] * 5  # starving 0-8 s (8 s), then 12-15 s (3 s: too short)
    eps = starvation(times, {"A": a, "B": b}, 1.0)
    assert [(e.flow, e.start_s, e.end_s) for e in eps] == [("B", 0.0, 8.0)]
    # still starving at the end counts up to the last interval; NaN = not running
    c = [math.nan] * 10 + [0.5] * 10
    eps = starvation(times, {"A": a, "C": c}, 1.0)
    assert [(e.flow, e.start_s, e.end_s) for e in eps] == [("C", 10.0, 20.0)]
    assert starvation(times, {"A": a}, 1.0) == []


def test_thratio_and_utilisation() -> None:
    assert thratio(40.0, 20.0) == 2.0 and math.isnan(thratio(1.0, 0.0))
    assert utilisation([45e6, 45e6], 100e6) == pytest.approx(0.9)
    assert math.isnan(utilisation([1.0], None))
