"""bench/remote_added_latency.py's options (no kernel): --agent / --agent-file as `ccswitch policy serve`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from helpers import load_bench

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench" / "remote_added_latency.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_bench("remote_added_latency")


def test_defaults_unchanged(bench: ModuleType) -> None:
    a = bench.parse_args([])
    assert (a.seconds, a.seeds, a.added, a.agent, a.agent_file, a.label) == \
        (30, 1, [0.0, 65.0, 105.0], "delay-aimd", None, "delay-aimd")


def test_rl_tcp_agent_and_file(bench: ModuleType) -> None:
    a = bench.parse_args(["--agent", "rl-tcp", "--seeds", "3", "--added", "0,65,105"])
    assert (a.agent, a.agent_file, a.seeds) == ("rl-tcp", None, 3)
    assert a.label == "rl-tcp, delay reward, rltcp_agent_delay.json"  # serve's default rl-tcp file
    a = bench.parse_args(["--agent", "rl-tcp", "--agent-file", str(REPO / "models" / "rltcp_agent_paper.json")])
    assert a.agent_file.is_absolute() and a.label == "rl-tcp, paper reward, rltcp_agent_paper.json"


@pytest.mark.parametrize(("argv", "message"), [
    (["--agent", "nope"], "unknown cwnd agent 'nope' (known: delay-aimd, rl-tcp)"),
    (["--agent-file", "models/rltcp_agent_delay.json"], "cwnd agent 'delay-aimd' takes no agent file"),
    (["--agent", "rl-tcp", "--agent-file", "/no/such/agent.json"], "no such RL-TCP agent file"),
    (["--added", "0,x"], "--added '0,x'"),
])
def test_bad_values_one_line(argv: list[str], message: str) -> None:
    cp = subprocess.run([sys.executable, str(BENCH), *argv], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert cp.returncode == 2 and cp.stdout == "", cp
    assert cp.stderr.count("\n") == 1 and cp.stderr.startswith("remote_added_latency.py: error: "), cp.stderr
    assert message in cp.stderr, cp.stderr
