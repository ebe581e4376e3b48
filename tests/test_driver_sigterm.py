"""Long testbed drivers stopped with ``kill`` leave nothing behind (testbed/runs/netns_lifecycle.sigterm_as_exit).

Paper 001's reproduction driver runs for an hour; stopping it with SIGTERM (kill, systemd, a session's end)
used to kill it at once and leave its namespaces and linkemu running (seen 27 Nov).  Now SIGTERM unwinds its
``with`` blocks like Ctrl-C: exit status 143, every namespace it owned deleted, its linkemu gone, and the run
it was in the middle of not recorded (a resumed driver redoes it).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ccswitch.testbed.runs import netns as tbnetns
from ccswitch.testbed.runs.emulator import binary_path

pytestmark = pytest.mark.kernel


def _owned_by(pid: int) -> list[str]:
    return [n for n in tbnetns.list_netns() if tbnetns.owner_pid(n) == pid]


def _linkemu_under(folder: Path) -> list[str]:
    cp = subprocess.run(["pgrep", "-af", "linkemu"], capture_output=True, text=True, check=False)
    return [line for line in cp.stdout.splitlines() if str(folder) in line]


def test_sigterm_mid_run_tears_the_topology_down(tmp_path: Path, require: Callable[[bool, str], None]) -> None:
    require(binary_path().is_file(), "linkemu is not built; run scripts/setup.sh")
    out = tmp_path / "repro"
    proc = subprocess.Popen([sys.executable, "-m", "ccswitch.testbed.lfq_reproduction", "run", "--runs", "1",
                             "--arms", "fq-100", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (_owned_by(proc.pid) and _linkemu_under(out)):
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.2)
        assert _owned_by(proc.pid) and _linkemu_under(out), "the driver never had its topology and linkemu up"
        time.sleep(1.0)  # inside the run (one run is ~5 s)
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 143, err
    assert _owned_by(proc.pid) == [], "namespaces left behind"
    assert _linkemu_under(out) == [], "linkemu left running"
    assert not list(out.glob("fq-100/run-*.json")), "an interrupted run was recorded"
