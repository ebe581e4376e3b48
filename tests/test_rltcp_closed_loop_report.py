"""bench/rltcp_closed_loop.py without the kernel: each arm's bottleneck queue, and the report of a paper-set-up
run folder (paper 003 Table 2's ratio from the controlled flow's RTT over the run, the figure)."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

from helpers import load_bench


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_bench("rltcp_closed_loop")


def test_arm_queues(bench: ModuleType) -> None:
    # the default set-up classifies by ECN (only the control requests are ECT(1)); the paper's by DSCP 40,
    # which its controlled flow's data carries
    assert bench.uplink_queue("l4s", "testbed") == {"kind": "dualpi2"}
    assert bench.uplink_queue("l4s", "paper") == {"kind": "dualpi2", "classifier": "dscp", "l_dscp": [40]}
    assert bench.uplink_queue("fqcodel", "paper") == {"kind": "fq_codel", "ecn": True}
    assert bench.uplink_queue("fifo", "paper") == {"kind": "pfifo", "limit_pkts": 100}
    assert bench.L4S_DSCP_TOS >> 2 == 40


def run(arm: str, seed: int, rtt_run: float) -> dict[str, object]:
    return {"agent": "rl-tcp", "label": "rl-tcp", "arm": arm, "seed": seed, "setup": "paper", "seconds": 200,
            "remote_mbit": 1.0, "cubic_mbit": 8.5, "share": 0.1, "jain": 0.6, "remote_rtt_ms": rtt_run + 1,
            "cubic_rtt_ms": 60.0, "remote_rtt_run_ms": rtt_run, "loop_p50_ms": 45.0, "loop_p99_ms": 90.0,
            "remote_steps": 1.0, "step_period_p50_ms": 100.0, "kernel_fallbacks": 0}


def test_paper_report(bench: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for seed, (l4s, fq, fifo) in enumerate([(44.0, 50.0, 160.0), (46.0, 52.0, 164.0)], start=1):
        for arm, rtt in (("l4s", l4s), ("fqcodel", fq), ("fifo", fifo)):
            (tmp_path / f"rl-tcp-{arm}-{seed}.json").write_text(json.dumps(run(arm, seed, rtt)))
    png = tmp_path / "fig.png"
    bench.report(tmp_path, png)
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| rl-tcp |")]
    assert [r.split(" | ")[1] for r in rows] == ["L queue (DualPI2)", "FIFO", "FQ-CoDel + ECN"]
    # 45 / 162 = 0.28 and 51 / 162 = 0.31, beside the paper's 65 / 105
    assert "L queue (DualPI2) 45.0 ms (/ FIFO 0.28)" in out and "FQ-CoDel + ECN 51.0 ms (/ FIFO 0.31)" in out
    assert "paper 003: L4S 65 ms / FIFO 105 ms = 0.62" in out and "| agent | queue (flow and control) |" in out
    assert png.stat().st_size > 10_000
