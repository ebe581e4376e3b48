"""`ccswitch testbed matrix requeue` (testbed/scenario/requeue.py): the committed dev split behind
another router queue, with nothing but the uplink queue changed, and its refusals."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from ccswitch.testbed.scenario import FqCodel, ScenarioError, load_scenario
from ccswitch.testbed.scenario.requeue import requeue, with_uplink_qdisc

REPO = Path(__file__).resolve().parents[1]
DEV = REPO / "testbed" / "scenarios" / "matrix" / "dev"
FQ_CODEL = '{ kind = "fq_codel" }'


def test_dev_split_behind_fq_codel_changes_only_the_uplink_queue(tmp_path: Path) -> None:
    files = requeue(DEV, FQ_CODEL, tmp_path / "out")
    assert len(files) == len(list(DEV.glob("*.toml"))) >= 30
    kinds_before = set()
    for f in files:
        before, after = load_scenario(DEV / f.name), load_scenario(f)
        kinds_before.add(type(before.link.uplink.qdisc).__name__)
        assert isinstance(after.link.uplink.qdisc, FqCodel), f.name
        # everything else parses to the same scenario (trace paths resolve to the copied traces)
        up_b = dataclasses.replace(before.link.uplink, qdisc=None, trace=None)
        up_a = dataclasses.replace(after.link.uplink, qdisc=None, trace=None)
        assert up_a == up_b, f.name
        assert after.link.downlink == before.link.downlink
        assert after.flows == before.flows and after.daemon == before.daemon and after.name == before.name
        if before.link.uplink.trace is not None:
            assert after.link.uplink.trace is not None
            assert after.link.uplink.trace.read_bytes() == before.link.uplink.trace.read_bytes()
    # the split mixes pfifo, CoDel and DualPI2 bottlenecks: every kind was replaced, not only pfifo
    assert {"Pfifo", "Codel", "DualPi2"} <= kinds_before
    assert (tmp_path / "out" / "index.csv").read_text() == (DEV / "index.csv").read_text()
    # idempotent: the same request on the same folder is accepted (a resumed matrix keeps its meaning)
    assert len(requeue(DEV, FQ_CODEL, tmp_path / "out")) == len(files)


def test_refusals_are_one_line_and_write_nothing(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="unknown value 'bogus'"):
        requeue(DEV, '{ kind = "bogus" }', tmp_path / "bad")
    assert not (tmp_path / "bad").exists()
    with pytest.raises(ScenarioError, match="no scenario files"):
        requeue(tmp_path, FQ_CODEL, tmp_path / "x")
    requeue(DEV, FQ_CODEL, tmp_path / "out")
    with pytest.raises(ScenarioError, match=r"already holds .* another queue"):
        requeue(DEV, '{ kind = "fq", flow_limit_pkts = 100 }', tmp_path / "out")
    with pytest.raises(ScenarioError, match=r"no \[link\.uplink\]"):
        with_uplink_qdisc('name = "x"\n[link]\nemulator = "linkemu"\n', FQ_CODEL)


def test_uplink_without_a_qdisc_line_gets_one() -> None:
    text = '[link]\nemulator = "linkemu"\n[link.uplink]\nrate_mbit = 10\n[link.downlink]\nqdisc = { kind = "pfifo" }\n'
    out = with_uplink_qdisc(text, FQ_CODEL)
    assert out.split("\n")[4] == f"qdisc = {FQ_CODEL}"
    assert out.count("kind = \"pfifo\"") == 1  # the downlink's queue is untouched


def test_cli_names_the_known_queues() -> None:
    r = subprocess.run([sys.executable, "-m", "ccswitch.cli", "testbed", "matrix", "requeue", str(DEV),
                        "--queue", "nope", "--out", "/nonexistent/x"], capture_output=True, text=True)
    assert r.returncode == 1
    assert r.stderr.count("\n") == 1 and "fq_codel" in r.stderr and "nope" in r.stderr


def test_vdq_on_trace_links_gets_the_trace_mean_as_capacity(tmp_path: Path) -> None:
    """vdq_csaqm needs a capacity C: a trace-driven uplink gets the trace's mean rate, a constant one none."""
    from ccswitch.testbed.scenario import VdqCsaqm

    traced = next(f for f in sorted(DEV.glob("*.toml")) if load_scenario(f).link.uplink.trace is not None)
    constant = next(f for f in sorted(DEV.glob("*.toml")) if load_scenario(f).link.uplink.rate_mbit is not None)
    out = requeue(DEV, '{ kind = "vdq_csaqm", default_policy = "gold" }', tmp_path / "out")
    by_name = {f.name: load_scenario(f).link.uplink.qdisc for f in out}
    up = load_scenario(traced).link.uplink
    ms = [int(x) for x in Path(up.trace).read_text().split()]  # type: ignore[arg-type]
    want = len(ms) * (up.trace_bytes_per_opportunity or 1500) * 8 / (ms[-1] / 1000) / 1e6
    q = by_name[traced.name]
    assert isinstance(q, VdqCsaqm) and q.rate_mbit == pytest.approx(want, abs=0.05)
    assert isinstance(by_name[constant.name], VdqCsaqm) and by_name[constant.name].rate_mbit is None


def test_dualpi2_agent_on_trace_links_gets_the_trace_mean_as_its_rate(tmp_path: Path) -> None:
    """The A3C agent measures utilisation against a rate: a trace-driven uplink's mean, as for vdq_csaqm."""
    from ccswitch.testbed.scenario import DualPi2

    traced = next(f for f in sorted(DEV.glob("*.toml")) if load_scenario(f).link.uplink.trace is not None)
    constant = next(f for f in sorted(DEV.glob("*.toml")) if load_scenario(f).link.uplink.rate_mbit is not None)
    actor = Path(__file__).resolve().parents[1] / "models" / "dualpi2_a3c.json"
    out = requeue(DEV, f'{{ kind = "dualpi2", agent = "{actor}" }}', tmp_path / "out")
    by_name = {f.name: load_scenario(f).link.uplink.qdisc for f in out}
    vdq = requeue(DEV, '{ kind = "vdq_csaqm", default_policy = "gold" }', tmp_path / "vdq")
    vdq_rate = {f.name: load_scenario(f).link.uplink.qdisc.rate_mbit for f in vdq}  # type: ignore[union-attr]
    q, c = by_name[traced.name], by_name[constant.name]
    assert isinstance(q, DualPi2) and q.agent_rate_mbit == vdq_rate[traced.name] and q.agent_rate_mbit
    assert isinstance(c, DualPi2) and c.agent_rate_mbit is None
    assert "agent_rate_mbit" not in q.to_config()  # the runner's, not linkemu's
