"""Paper 001's Figure 8 sweep (``lfq_reproduction sweep`` / ``report-sweep``; testbed/reports/lfq_sweep.py).

The sweep's draws hold one variable still while the other covers the paper's range; the report's
correlations and Table II ratio are checked on synthetic run files whose answer is known; a bad command
line is one error naming the problem.  (The sweep's real runs are an experiment, not a test: lfq.md.)
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ccswitch.testbed.lfq_reproduction import SWEEP_FIXED, SWEEP_GRID, sweep_draws
from ccswitch.testbed.reports.lfq_sweep import report_sweep


def test_each_sweep_moves_one_variable_over_the_papers_range() -> None:
    d = sweep_draws(2)
    assert len(d) == 2 * 2 * 2 * len(SWEEP_GRID) and len({x["i"] for x in d}) == len(d)
    for var, other in (("bandwidth_mbit", "rtt_ms"), ("rtt_ms", "bandwidth_mbit")):
        for cca in ("reno", "cubic"):
            mine = [x for x in d if x["sweep"] == var and x["cca"] == cca and x["rep"] == 1]
            assert [x[var] for x in mine] == list(SWEEP_GRID) and SWEEP_GRID[0] == 5 and SWEEP_GRID[-1] == 25
            assert {x[other] for x in mine} == {SWEEP_FIXED[other]}


def _write(folder: Path, limit_of: dict[str, object], reps: int = 3) -> None:
    rng = np.random.default_rng(0)
    (folder / "lfq").mkdir(parents=True)
    for d in sweep_draws(reps):
        cca = "bic" if d["cca"] == "cubic" else "reno"
        lim = limit_of[cca](d["bandwidth_mbit"], d["rtt_ms"]) + rng.normal(0, 0.5)  # type: ignore[operator]
        r = {**d, "cca": cca, "sender": "no-sack-reno-bic", "arm": "lfq", "throughput_mbit": 0.9 * d["bandwidth_mbit"],
             "avg_queue_pkts": 3.0, "max_queue_pkts": 10, "limit_late": lim}
        (folder / "lfq" / f"run-{d['i']:05d}.json").write_text(json.dumps(r) + "\n")


def test_a_limit_that_follows_the_bdp_meets_both_correlations_and_the_ratio(tmp_path: Path) -> None:
    # Reno: one BDP (b x RTT / 12 kbit); BIC: a quarter of it.  Both vary with each swept variable.
    _write(tmp_path, {"reno": lambda b, t: b * t / 12, "bic": lambda b, t: b * t / 48})
    s = report_sweep(tmp_path, tmp_path / "sweep.md")
    reno = s["per_cca"]["reno"]
    assert reno["bandwidth_mbit"]["corr_points"] > 0.99 and reno["rtt_ms"]["corr_points"] > 0.99
    assert s["ccas"] == ["reno", "bic"] and s["ratio"] == pytest.approx(4.0, rel=0.05)
    for var in ("bandwidth_mbit", "rtt_ms"):  # noise s.d. 0.5 packet: the slopes within 5 %
        assert reno[var]["slope_vs_bdp"] == pytest.approx(1.0, rel=0.05)
        assert s["per_cca"]["bic"][var]["slope_vs_bdp"] == pytest.approx(0.25, rel=0.1)
    assert [p["n"] for p in reno["rtt_ms"]["points"]] == [3] * len(SWEEP_GRID)
    text = (tmp_path / "sweep.md").read_text()
    assert "with the bandwidth 1.00 (met); with the delay 1.00 (met)" in text and "Reno:bic mean limit 4.0" in text
    assert (tmp_path / "sweep.png").stat().st_size > 0


def test_a_limit_blind_to_the_rtt_fails_the_delay_target(tmp_path: Path) -> None:
    # a limit of the bandwidth alone (what this repo's actor learns, lfq.md): the delay correlation is noise
    _write(tmp_path, {"reno": lambda b, t: 8 + b / 5, "bic": lambda b, t: 8 + b / 5})
    s = report_sweep(tmp_path, tmp_path / "sweep.md")
    reno = s["per_cca"]["reno"]
    assert reno["bandwidth_mbit"]["corr_points"] > 0.9 and abs(reno["rtt_ms"]["corr_points"]) < 0.9
    assert s["ratio"] == pytest.approx(1.0, abs=0.05)
    text = (tmp_path / "sweep.md").read_text()
    assert "with the bandwidth" in text and "(met); with the delay" in text and "**not met**" in text
    assert "the LFQ actor, 3 flow(s) per point" in text  # runs without a checksum: no actor named


def test_the_sweep_page_names_the_actor_of_its_runs(tmp_path: Path) -> None:
    _write(tmp_path, {"reno": lambda b, t: 8 + b / 5, "bic": lambda b, t: 8 + b / 5})
    for f in (tmp_path / "lfq").glob("run-*.json"):
        f.write_text(json.dumps({**json.loads(f.read_text()), "actor_checksum": "sha256:0123456789abcdef"}))
    report_sweep(tmp_path, tmp_path / "sweep.md")
    assert "LFQ actor sha256:01234567…, 3 flow(s)" in (tmp_path / "sweep.md").read_text()


def test_sweep_command_line_errors_are_one_line(tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "ccswitch.testbed.lfq_reproduction", *args],
                              capture_output=True, text=True, check=False)

    cp = run("report-sweep", "--results", str(tmp_path / "nope"))
    assert cp.returncode == 2 and "no runs in" in cp.stderr and str(tmp_path / "nope") in cp.stderr
    cp = run("sweep", "--reps", "0", "--out", str(tmp_path / "x"))
    assert cp.returncode == 2 and "--reps 0" in cp.stderr
    _write(tmp_path / "held", {"reno": lambda b, t: 1.0, "bic": lambda b, t: 1.0}, reps=1)
    cp = run("sweep", "--sender", "linux", "--out", str(tmp_path / "held"))
    assert cp.returncode == 2 and "holds runs with sender no-sack-reno-bic" in cp.stderr
