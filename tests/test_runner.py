"""The scenario runner end to end (ccswitch testbed run / report / cleanup).

The end-to-end test runs a 20 s two-flow scenario through the CLI: the
paper 002 scenario 1 variant on linkemu when the emulator is built, else the
same flows through the kernel fallback link.  Afterwards no namespace and no
process of the run may be left.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from ccswitch.schema import FLOW_SAMPLE_SCHEMA
from ccswitch.testbed.runs import netns as tbnetns

REPO = Path(__file__).resolve().parent.parent
SCENARIOS = REPO / "testbed" / "scenarios"
LINKEMU = REPO / "testbed" / "linkemu" / "target" / "release" / "linkemu"
CLI = [sys.executable, "-m", "ccswitch.cli"]


def linkemu_ready() -> bool:
    return LINKEMU.is_file() and (REPO / "testbed" / "emulator.py").is_file()


def e2e_scenario() -> Path:
    if linkemu_ready():
        return SCENARIOS / "paper002-s1-cubic-vs-bbr-cubic-20s.toml"
    return SCENARIOS / "kernel-cubic-vs-bbr-cubic-20s.toml"


def _owned_by(pid: int) -> list[str]:
    return [n for n in tbnetns.list_netns() if tbnetns.owner_pid(n) == pid]


def _procs_mentioning(text: str) -> list[str]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmd:
            found.append(f"{entry}: {cmd.strip()}")
    return found


@pytest.mark.kernel
def test_monitor_thread_alone_runs_sched_fifo() -> None:
    """raise_to_fifo changes the calling thread only: the runner's other threads stay SCHED_OTHER."""
    import threading

    from ccswitch.testbed.runs.run_monitors import MONITOR_FIFO_PRIORITY, raise_to_fifo

    seen: dict[str, object] = {}

    def sampler() -> None:
        seen["result"] = raise_to_fifo(MONITOR_FIFO_PRIORITY)
        seen["policy"] = os.sched_getscheduler(0)
        seen["priority"] = os.sched_getparam(0).sched_priority

    t = threading.Thread(target=sampler)
    t.start()
    t.join()
    assert seen == {"result": "fifo:5", "policy": os.SCHED_FIFO, "priority": 5}
    assert os.sched_getscheduler(0) == os.SCHED_OTHER  # this thread, untouched
    assert raise_to_fifo(0) == "other" and os.sched_getscheduler(0) == os.SCHED_OTHER


def test_cli_bad_scenario_one_line_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('duration_s = 20\n[[flows]]\nclient = 1\ncca = "cubic"\n[[flows]]\nclient = 2\ncca = "vegas"\n')
    cp = subprocess.run([*CLI, "testbed", "run", str(bad)], capture_output=True, text=True, cwd=tmp_path,
                        check=False)
    assert cp.returncode == 1
    lines = cp.stderr.strip().splitlines()
    assert len(lines) == 1, cp.stderr
    assert lines[0].startswith("ccswitch: error: bad.toml: flows[1].cca: unknown congestion control 'vegas' "
                               "(available: "), lines[0]


@pytest.mark.kernel
def test_run_20s_two_flows_end_to_end(tmp_path: Path, iperf3: str) -> None:
    scenario = e2e_scenario()
    out = tmp_path / "out"
    proc = subprocess.Popen([*CLI, "testbed", "run", str(scenario), "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, f"stdout: {stdout}\nstderr: {stderr}"
    assert "ccswitch testbed:" in stderr and "Mbit/s" in stderr  # the progress line
    run = out / "run-01-seed-1"

    # raw outputs
    for name in ("scenario.toml", "emulator/config.json", "iperf/C1.json", "iperf/C2.json",
                 "capture.pcapng", "samples.parquet", "flows.parquet", "switches.json", "summary.json",
                 "table.md", "table.csv", "fairness.csv"):
        assert (run / name).is_file() and (run / name).stat().st_size > 0, name
    for metric in ("throughput", "rtt", "jitter", "loss"):
        png = run / "plots" / f"{metric}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png
    assert json.loads((run / "iperf" / "C1.json").read_text())["end"]["sum_received"]["bytes"] > 0

    # samples: exactly the FlowSample schema, both flows, about one row per second
    samples = pq.read_table(run / "samples.parquet")
    assert samples.schema.remove_metadata() == FLOW_SAMPLE_SCHEMA.remove_metadata()
    flows = {r["flow"]: r["flow_id"] for r in pq.read_table(run / "flows.parquet").to_pylist()}
    assert set(flows) == {"C1", "C2"}
    ids = samples.column("flow_id").to_pylist()
    for name, fid in flows.items():
        assert ids.count(fid) >= 15, f"{name}: {ids.count(fid)} samples"

    # the sampling threads ran SCHED_FIFO below linkemu (root here), and no sample came late
    summary = json.loads((run / "summary.json").read_text())
    assert summary["meta"]["monitor_sched"] == {"C1": "fifo:5", "C2": "fifo:5"}
    assert summary["metrics"]["last_half"]["monitor"]["scored"]

    # the scripted switch happened and shows in the samples
    (sw,) = summary["switches"]
    assert sw["ok"] and sw["cca_before"] == "bbr" and sw["cca_after"] == "cubic", sw
    assert abs(sw["t_s"] - 5.0) < 0.5
    c2 = [r for r in samples.to_pylist() if r["flow_id"] == flows["C2"]]
    t0 = summary["meta"]["t0_epoch"]
    assert {r["cca"] for r in c2 if r["ts_s"] - t0 < 4.5} == {"bbr"}
    assert {r["cca"] for r in c2 if r["ts_s"] - t0 > 6.5} == {"cubic"}

    # the table: before/after rows per client, fairness per phase
    rows = summary["metrics"]["per_flow_phase"]
    assert [(r["phase"].split(" ")[0], r["flow"], r["cca"]) for r in rows] == [
        ("before", "C1", "cubic"), ("before", "C2", "bbr"), ("after", "C1", "cubic"), ("after", "C2", "cubic")]
    for r in rows:
        assert r["throughput_mbps"] > 0.5 and r["rtt_ms"] > 0
    agg = sum(r["throughput_mbps"] for r in rows if r["phase"].startswith("after"))
    assert 50 < agg < 101, agg  # a 100 Mbit/s bottleneck, reasonably used
    fair = summary["metrics"]["fairness"]
    assert [f["phase"].split(" ")[0] for f in fair] == ["before", "after", "whole"]
    assert 0.5 <= fair[-1]["jain"] <= 1.0
    table = (run / "table.md").read_text()
    assert "| before (0-5 s) | BBR (C2) |" in table and "| after (5-20 s) | CUBIC (C2) |" in table

    # nothing left behind
    assert _owned_by(proc.pid) == []
    assert _procs_mentioning(str(tmp_path)) == []

    # report regenerates the same table from the folder
    cp = subprocess.run([*CLI, "testbed", "report", str(out), "--no-plots"], capture_output=True, text=True,
                        check=False)
    assert cp.returncode == 0, cp.stderr
    assert "| after (5-20 s) | CUBIC (C2) |" in cp.stdout


def _start_run(tmp_path: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([*CLI, "testbed", "run", str(e2e_scenario()), "--out", str(tmp_path / "out"),
                             "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_running(proc: subprocess.Popen[str], tmp_path: Path, timeout: float = 30.0) -> None:
    """Until the run's namespaces exist and its flows are going."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        if len(_owned_by(proc.pid)) >= 4 and (tmp_path / "out" / "run-01-seed-1" / "capture.log").exists():
            time.sleep(2.0)
            return
        time.sleep(0.1)
    raise AssertionError("the run did not start")


@pytest.mark.kernel
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "kill"])
def test_ctrl_c_removes_everything(tmp_path: Path, iperf3: str, sig: signal.Signals) -> None:
    """Ctrl-C, and SIGTERM (kill, systemd stop, a session's end: until 28 Nov it killed the runner at once and
    left its namespaces, linkemu and iperf3 behind), tear the run down."""
    proc = _start_run(tmp_path)
    try:
        _wait_running(proc, tmp_path)
        proc.send_signal(sig)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0
    assert _owned_by(proc.pid) == []
    assert _procs_mentioning(str(tmp_path)) == []


@pytest.mark.kernel
def test_sigterm_unwinds_run_once_called_from_a_driver(tmp_path: Path, iperf3: str) -> None:
    """The drivers (testbed/l4s/run_experiments.py, experiments.py, ...) call run_once without the CLI's signal
    handlers: until 28 Nov a SIGTERM killed them at once, leaving the run's namespaces, linkemu and iperf3."""
    code = ("import sys; from pathlib import Path; from ccswitch.testbed.runs.runner import run_once; "
            "from ccswitch.testbed.scenario import load_scenario; "
            "run_once(load_scenario(sys.argv[1]), Path(sys.argv[2]) / 'run-01-seed-1', progress=False)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(e2e_scenario()), str(tmp_path / "out")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_running(proc, tmp_path)
        proc.terminate()
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, err[-2000:]
    assert _owned_by(proc.pid) == [], "namespaces left behind"
    assert _procs_mentioning(str(tmp_path)) == [], "linkemu / iperf3 left running"
    assert not (tmp_path / "out" / "run-01-seed-1" / "summary.json").exists()


@pytest.mark.kernel
def test_cleanup_after_sigkill(tmp_path: Path, iperf3: str) -> None:
    proc = _start_run(tmp_path)
    try:
        _wait_running(proc, tmp_path)
        left = _owned_by(proc.pid)
        proc.kill()
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert len(left) >= 4  # router, server, 2 clients: still there after a SIGKILL
    cp = subprocess.run([*CLI, "testbed", "cleanup"], capture_output=True, text=True, check=False)
    assert cp.returncode == 0, cp.stderr
    assert all(name in cp.stdout for name in left), cp.stdout
    assert _owned_by(proc.pid) == []
    deadline = time.monotonic() + 5
    while _procs_mentioning(str(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _procs_mentioning(str(tmp_path)) == []
