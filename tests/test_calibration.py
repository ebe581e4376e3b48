"""The paper 002 calibration driver (testbed/calibration.py): profile texts and scoring.

The runs themselves are ordinary testbed runs (tests/test_testbed*.py cover the runner); the
committed sweep is docs/calibration.md.  Here: every profile yields a valid scenario with the
intended link, bad input gets one line, and the score follows the paper's Table 5.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from ccswitch.testbed import calibration as cal
from ccswitch.testbed.scenario.model import Codel, Pfifo
from ccswitch.testbed.scenario.parse import parse_scenario


@pytest.mark.parametrize("profile", list(cal.PROFILES))
def test_every_profile_is_a_valid_scenario_with_its_link(profile: str) -> None:
    p = cal.PROFILES[profile]
    for key in cal.PAPER:
        sc = parse_scenario(cal.scenario_text(key, profile, duration_s=60, seeds=[2, 3]), "t",
                            base_dir=cal.SCENARIOS)
        assert sc.duration_s == 60 and sc.seeds == (2, 3) and sc.repetitions == 2 and not sc.capture.tshark
        assert sc.switches[0].at_s == cal.SWITCH_AT_S
        assert sc.link.uplink.qdisc == Pfifo(limit_pkts=p.get("router_pkts", 50))
        assert sc.link.downlink.qdisc == Pfifo(limit_pkts=50)  # the ACK path stays as published
        assert sc.link.wifi is not None
        assert {c.phy_rate_mbit for c in sc.link.wifi.clients} == {p.get("phy_mbit", 300)}
        if "station_queue" in p:
            assert isinstance(sc.link.wifi.queue, Codel)


def test_bad_input_is_one_line() -> None:
    with pytest.raises(ValueError, match="unknown profile 'nope'; known: as-published"):
        cal.scenario_text("s1", "nope", duration_s=100, seeds=[1])
    with pytest.raises(ValueError, match="no after phase"):
        cal.scenario_text("s1", "router-500", duration_s=20, seeds=[1])


def test_winner_counts_only_outside_the_tie_band() -> None:
    s1_before, s1_after = cal.PAPER["s1"][1], cal.PAPER["s1"][2]
    assert cal.winner_ok(s1_before, 3.8) and not cal.winner_ok(s1_before, 0.15)
    assert cal.winner_ok(s1_after, 0.9) and cal.winner_ok(s1_after, 1.1)  # a tie in the paper


def _fake_run(root: Path, profile: str, key: str, phases: dict[str, tuple[float, float, float]]) -> None:
    d = root / profile / key / "seed-1" / "run-01-seed-1"
    d.mkdir(parents=True)
    with (d / "table.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["phase", "flow", "throughput_mbps"])
        for ph, (_, c1, c2) in phases.items():
            w.writerow([f"{ph} (x)", "C1", c1])
            w.writerow([f"{ph} (x)", "C2", c2])
    with (d / "fairness.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["phase", "flows", "jain", "thratio"])
        for ph, (jain, c1, c2) in phases.items():
            w.writerow([f"{ph} (x)", 2, jain, c1 / c2])
        w.writerow(["whole run (x)", 2, 0.9, 1.0])


def test_score_and_report_rank_the_profile_closest_to_the_paper(tmp_path: Path) -> None:
    res = tmp_path / "res"
    _fake_run(res, "close", "s1", {"before": (0.57, 79.0, 5.0), "after": (0.99, 40.0, 39.0)})
    _fake_run(res, "reversed", "s1", {"before": (0.57, 5.0, 79.0), "after": (0.80, 60.0, 20.0)})
    data = cal.collect(res)
    assert cal.score(data["close"])[:1] == (2,) and cal.score(data["close"])[2] == 2
    assert cal.score(data["reversed"])[0] == 0  # right Jain, wrong winner; then a Jain 0.2 off
    table = cal.report(res, tmp_path / "doc.md")
    rows = [r for r in table.splitlines() if r.startswith("| close") or r.startswith("| reversed")]
    assert rows[0].startswith("| close") and "2/2" in rows[0] and "0/2" in rows[1]
    assert (tmp_path / "calibration.png").stat().st_size > 10_000
    doc = (tmp_path / "doc.md").read_text()
    cal.report(res, tmp_path / "doc.md")  # idempotent: the block is replaced, not appended
    assert (tmp_path / "doc.md").read_text() == doc
