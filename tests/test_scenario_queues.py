"""Scenario files' queues and links (ccswitch.testbed.scenario): each qdisc kind maps onto linkemu's
config, and `linkemu --check` accepts every generated config (the build is needed for that one)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from test_scenario import CCAS, GOOD, LINKEMU, SCENARIOS, parse

from ccswitch.testbed.scenario import (
    Codel,
    Fq,
    FqCodel,
    FqDualPi2,
    FqPie,
    Lfq,
    Pie,
    ScenarioError,
    VdqCsaqm,
    VdqPolicyRule,
    load_scenario,
)


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
