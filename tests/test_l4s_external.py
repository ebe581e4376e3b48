"""The runner's external mode on an L4S sender host: it registers Prague and makes it
the host's default CCA for the run, as the namespace testbed does (testbed/l4s/README.md).

Namespaces play the real hosts: the runner (the real CLI, `ccswitch testbed run
--server`) is started inside a sender namespace with nsenter, so "this host" is
that namespace; the server is an iperf3 in a receiver namespace behind a router
namespace (50 Mbit/s tbf).  Nothing leaves the machine.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from ccswitch.bpf.prague import default_cca
from ccswitch.testbed.runs.iperf import start_server
from ccswitch.testbed.runs.netns import nsenter_argv
from ccswitch.testbed.scenario import BASE_PORT

pytestmark = pytest.mark.kernel
CLI = [sys.executable, "-m", "ccswitch.cli"]
ECN_NONE = 0


def _scenario(path: Path, flows: list[tuple[int, str]], seconds: int = 4) -> Path:
    text = [f'name = "ext-prague"\nduration_s = {seconds}\nclients = {max(c for c, _ in flows)}\n'
            "seeds = [1]\nsample_interval_s = 1.0\ndaemon = false\n"
            "[link]\nemulator = \"kernel\"\n[link.uplink]\nrate_mbit = 50\n"
            "[capture]\ntshark = false\nemulator_per_packet = false\n"]
    text += [f'[[flows]]\nname = "F{i}"\nclient = {c}\ncca = "{cca}"\n' for i, (c, cca) in enumerate(flows)]
    path.write_text("\n".join(text))
    return path


def _run_here(ns: str, scenario: Path, server: str, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(nsenter_argv(ns, [*CLI, "testbed", "run", str(scenario), "--server", server,
                                            "--out", str(out), "--no-plots", "--quiet"]),
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.bottleneck(rate_mbit=50, router=True)
def test_external_l4s_host_runs_prague_with_ecn_and_restores_its_default(bottleneck, iperf3: str,
                                                                         tmp_path: Path) -> None:
    """A prague flow started by the runner in external mode negotiates ECN and stays on
    prague (without the host default, iperf3's -C after connect() would leave it on
    Reno without ECN); afterwards the host's default is what it was."""
    bn = bottleneck
    before = default_cca(bn.sender)
    sc = _scenario(tmp_path / "sc.toml", [(1, "prague")])
    with start_server(bn.receiver, BASE_PORT, bind=bn.receiver_addr):
        cp = _run_here(bn.sender, sc, bn.receiver_addr, tmp_path / "out")
    assert cp.returncode == 0, cp.stderr
    rows = pq.read_table(next((tmp_path / "out").glob("run-*")) / "samples.parquet").to_pylist()
    data = [r for r in rows if r["delivered_segs"] > 100]
    assert data, rows
    assert {r["cca"] for r in data} == {"prague"}, {r["cca"] for r in data}
    assert all(r["ecn_mode"] != ECN_NONE for r in data), [r["ecn_mode"] for r in data]
    assert default_cca(bn.sender) == before


@pytest.mark.bottleneck(rate_mbit=50, router=True)
def test_external_host_mixing_prague_and_cubic_is_refused_in_one_line(bottleneck, tmp_path: Path) -> None:
    """One default per host: prague and cubic flows on the same host are refused before
    anything starts, with the fix (--client), and the host's default is untouched."""
    bn = bottleneck
    before = default_cca(bn.sender)
    sc = _scenario(tmp_path / "sc.toml", [(1, "prague"), (1, "cubic")])
    cp = _run_here(bn.sender, sc, bn.receiver_addr, tmp_path / "out")
    assert cp.returncode != 0
    err = cp.stderr.strip()
    assert "\n" not in err and "--client" in err and "prague" in err, err
    assert default_cca(bn.sender) == before


@pytest.mark.bottleneck(rate_mbit=50)
def test_server_side_prague_holder_sets_and_restores_the_default(bottleneck) -> None:
    """`python -m ccswitch.bpf.prague --default` (the real server's step in
    testbed/l4s/README.md) makes prague the host's default while it runs and
    restores the old default when stopped with SIGTERM (exit 0)."""
    ns = bottleneck.receiver
    before = default_cca(ns)
    proc = subprocess.Popen(nsenter_argv(ns, [sys.executable, "-m", "ccswitch.bpf.prague", "--default"]),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "prague registered" in line, (line, proc.stderr.read() if proc.poll() is not None else "")
        assert default_cca(ns) == "prague"
    finally:
        proc.terminate()
        rc = proc.wait(timeout=10)
    assert rc == 0, proc.stderr.read() if proc.stderr else rc
    assert default_cca(ns) == before


@pytest.mark.bottleneck(rate_mbit=50)
def test_external_l4s_host_without_privileges_fails_in_one_line(bottleneck, require) -> None:
    """Not root: the run stops before any flow with one line naming the fix (run as root)."""
    import os
    import shutil
    import tempfile

    require(shutil.which("setpriv") is not None, "setpriv (util-linux) is not installed")
    shared = Path(tempfile.mkdtemp(prefix="ccs-ext-"))  # tmp_path is 0700: nobody cannot enter it
    try:
        os.chmod(shared, 0o777)
        sc = _scenario(shared / "sc.toml", [(1, "prague")])
        os.chmod(sc, 0o644)
        argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *CLI, "testbed", "run", str(sc),
                "--server", bottleneck.receiver_addr, "--out", str(shared / "out"), "--no-plots", "--quiet"]
        cp = subprocess.run(nsenter_argv(bottleneck.sender, argv), capture_output=True, text=True, timeout=60,
                            check=False)
    finally:
        shutil.rmtree(shared, ignore_errors=True)
    err = cp.stderr.strip()
    assert cp.returncode != 0
    assert "\n" not in err and "prague" in err and "run as root" in err, err
