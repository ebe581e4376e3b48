"""Paper 001's reproduction report over several seeds (testbed/reports/lfq_reproduction.py, ``report-seeds``).

Synthetic run files (the driver's format) in two seed folders: the pooled numbers are those of the draws taken
together, each seed's are its own, and a bad command line is one error naming the problem.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ccswitch.testbed.reports.lfq_reproduction import ARMS, report_seeds


def _write_seed(folder: Path, n: int, lfq_tput: float, bw: float) -> None:
    for i in range(n):
        for arm in ARMS:
            tput = lfq_tput if arm == "lfq" else 10.0
            r = {"i": i, "bandwidth_mbit": bw, "rtt_ms": 10.0 + i, "cca": "reno" if i % 2 else "cubic",
                 "duration_s": 5.0, "arm": arm, "throughput_mbit": tput,
                 "avg_queue_pkts": 4.0 if arm == "lfq" else 10.0,
                 "max_queue_pkts": 10 if arm == "lfq" else 100}
            if arm == "lfq":
                r |= {"limit_late": 5.0 + i, "agent": {"cpu_ms_per_step": 0.5, "error": None}}
            (folder / arm).mkdir(parents=True, exist_ok=True)
            (folder / arm / f"run-{i:04d}.json").write_text(json.dumps(r) + "\n")


def test_pooled_is_the_draws_taken_together(tmp_path: Path) -> None:
    _write_seed(tmp_path / "s1", 4, lfq_tput=9.0, bw=10.0)
    _write_seed(tmp_path / "s2", 6, lfq_tput=10.0, bw=12.0)
    (tmp_path / "s2" / "fq_codel" / "run-0005.json").unlink()  # a draw one arm lacks is left out of all arms
    doc = tmp_path / "seeds.md"
    out = report_seeds({"seed 1": tmp_path / "s1", "seed 2": tmp_path / "s2"}, doc)
    assert out["per_seed"]["seed 1"]["n"] == 4 and out["per_seed"]["seed 2"]["n"] == 5
    assert out["pooled"]["n"] == 9
    # LFQ / FQ-CoDel throughput: 9/10 in seed 1, 10/10 in seed 2; pooled (4 x 9 + 5 x 10) / (9 x 10)
    assert out["per_seed"]["seed 1"]["ratios"]["throughput"]["ratio"] == pytest.approx(0.9)
    assert out["pooled"]["ratios"]["throughput"]["ratio"] == pytest.approx((4 * 9 + 5 * 10) / 90)
    text = doc.read_text()
    assert "seed 1 **4**, seed 2 **5**; pooled **9**" in text
    assert "| LFQ / FQ-CoDel throughput >= 0.95 | 0.900 (" in text and doc.with_suffix(".png").stat().st_size > 0


def test_report_seeds_command_line_errors_are_one_line(tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "ccswitch.testbed.lfq_reproduction", "report-seeds", *args],
                              capture_output=True, text=True, check=False)

    cp = run("--results", str(tmp_path / "nope"))
    assert cp.returncode == 2 and "no run folder" in cp.stderr and str(tmp_path / "nope") in cp.stderr
    (tmp_path / "a").mkdir()
    cp = run("--results", str(tmp_path / "a"), "--labels", "x,y")
    assert cp.returncode == 2 and "2 labels for 1 folders" in cp.stderr
