"""The host-vs-router comparison driver: scenario variants and the queueing-delay reading."""

from __future__ import annotations

from pathlib import Path

import pytest

from ccswitch.testbed.experiments import scenario_files
from ccswitch.testbed.network_comparison import QUEUES, _sojourn_ms, scenario_text
from ccswitch.testbed.scenario.parse import parse_scenario


@pytest.mark.parametrize("queue", list(QUEUES))
def test_only_the_uplink_queue_changes(queue: str) -> None:
    """Every fairness scenario parses under every queue; downlink, WiFi, flows and daemon stay as committed."""
    for f in scenario_files():
        base = parse_scenario(f.read_text(), f.name, base_dir=f.parent)
        var = parse_scenario(scenario_text(f, queue), f.name, base_dir=f.parent)
        assert var.link.downlink == base.link.downlink and var.link.wifi == base.link.wifi
        assert var.flows == base.flows and var.daemon == base.daemon and var.duration_s == base.duration_s
        kind = type(var.link.uplink.qdisc).__name__.lower()
        assert kind.replace("_", "") in {"pfifo": "pfifo", "fq_codel": "fqcodel", "fq-100": "fq",
                                         "dualpi2": "dualpi2", "dualpi2-a3c": "dualpi2", "dualpi2-a3c-res": "dualpi2",
                                         "vdq_csaqm": "vdqcsaqm", "lfq": "lfq", "lfq-space": "lfq",
                                         "lfq-space-floor": "lfq", "lfq-space-floor1": "lfq",
                                         "lfq-space-floor1-min8": "lfq", "lfq-space-floor1-min16": "lfq"}[queue]
        # the shipped actor, wherever the copy is written
        if queue in ("dualpi2-a3c", "dualpi2-a3c-res", "lfq", "lfq-space", "lfq-space-floor", "lfq-space-floor1",
                     "lfq-space-floor1-min8", "lfq-space-floor1-min16"):
            assert var.link.uplink.qdisc.agent is not None and var.link.uplink.qdisc.agent.is_file()
        if queue.startswith("lfq-space-floor"):
            q = var.link.uplink.qdisc
            assert (q.share_floor_bdp, q.share_floor_min_pkts) == {
                "lfq-space-floor": (0.5, None), "lfq-space-floor1": (1.0, None),
                "lfq-space-floor1-min8": (1.0, 8), "lfq-space-floor1-min16": (1.0, 16)}[queue]


def test_bad_queue_and_foreign_file_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown queue 'red'"):
        scenario_text(scenario_files()[0], "red")
    f = tmp_path / "x.toml"
    f.write_text('name = "x"\n[link.uplink]\nrate_mbit = 10\nqdisc = { kind = "codel" }\n')
    with pytest.raises(ValueError, match=r"has no .*pfifo"):
        scenario_text(f, "fq_codel")


def test_sojourn_is_the_worst_client() -> None:
    s = {"uplink": {"clients": [{"sojourn_us": {"count": 10, "p90": 1000.0, "p99": 4000.0}},
                                {"sojourn_us": {"count": 10, "p90": 3000.0, "p99": 2000.0}},
                                {"sojourn_us": {"count": 0, "p90": 9e9, "p99": 9e9}}]}}
    assert _sojourn_ms(s) == (3.0, 4.0)
