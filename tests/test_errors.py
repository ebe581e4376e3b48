"""Bad input and missing prerequisites: one clear line, non-zero exit, nothing left behind.

Each case runs the real CLI in a subprocess; afterwards bpftool must show no
ccswitch program, link or struct_ops, and bpffs no pin.  Missing BTF and
missing bpffs are produced for real inside a private mount namespace.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from ccswitch.host import available_ccas
from ccswitch.testbed.runs.netns import nsenter_argv

from helpers import unregistered_within

pytestmark = pytest.mark.kernel
CLI = [sys.executable, "-m", "ccswitch.cli"]


def bpf_objects() -> set[str]:
    """ccswitch's programs (by id), struct_ops registrations and pins, host-wide."""
    out = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True)
    progs = {f"prog {p['id']} {p.get('name')}" for p in json.loads(out.stdout or "[]")
             if str(p.get("name", "")).startswith("ccs_")}
    so = subprocess.run(["bpftool", "struct_ops", "list"], capture_output=True, text=True).stdout
    ops = {f"struct_ops {line.split(':')[0]}" for line in so.splitlines() if "ccs_pcc" in line}
    pins = {f"pin {p}" for p in os.listdir("/sys/fs/bpf") if "ccs" in p}
    return progs | ops | pins


@pytest.fixture(autouse=True)
def bpf_baseline() -> Iterator[None]:
    """What existed before the test (other tests' sockets, concurrent runs) is not a leak."""
    global _baseline
    _baseline = bpf_objects()
    yield


_baseline: set[str] = set()


def bpf_leftovers(grace_s: float = 3.0) -> list[str]:
    """Objects this test created that are still there; the kernel frees programs
    asynchronously (RCU) after the last fd closes, hence the grace period."""
    deadline = time.monotonic() + grace_s
    while True:
        new = sorted(bpf_objects() - _baseline)
        if not new or time.monotonic() > deadline:
            return new
        time.sleep(0.1)


def run_cli(*args: str, ns: str | None = None, wrap: list[str] | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
    argv = [*CLI, *args]
    if ns:
        argv = nsenter_argv(ns, argv)
    if wrap:
        argv = [*wrap, *argv]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


def assert_one_line_error(proc: subprocess.CompletedProcess[str], needle: str) -> None:
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("ccswitch: error:") and needle in lines[0], lines[0]
    assert not bpf_leftovers()


def test_unknown_cca(bottleneck) -> None:
    cp = run_cli("switch", "1", "vegas", ns=bottleneck.sender)
    assert_one_line_error(cp, "unknown congestion control 'vegas'")
    # every CCA ccswitch can load is named: registered already (another process) or loadable
    avail, _, loadable = cp.stderr.partition("; ccswitch loads on request: ")
    for cca in ("pcc", "prague"):
        assert cca in avail.split("available here: ")[1].split() or cca in loadable.split(), cp.stderr


def test_unknown_or_closed_flow(bottleneck) -> None:
    assert_one_line_error(run_cli("switch", "987654321", "cubic", ns=bottleneck.sender),
                          "flow 987654321 not found")


def test_pcc_switch_of_unknown_flow_unregisters_pcc(bottleneck) -> None:
    ours = "pcc" not in available_ccas()  # else another process owns the registration
    assert_one_line_error(run_cli("switch", "987654321", "pcc", ns=bottleneck.sender),
                          "not found")
    if ours:
        assert unregistered_within("pcc")


def test_non_root_user(bottleneck) -> None:
    # drop to nobody after the imports (the interpreter may live under /root).  The socket is one no daemon
    # listens on: with a ccswitchd on the default socket (another test's, running beside this one) the CLI
    # would ask it instead, and the error would be that socket's (root-only), not the monitor's.
    code = ("import os, sys, ccswitch.cli, ccswitch.dataplane, ccswitch.sampler;"
            "os.setgroups([]); os.setgid(65534); os.setuid(65534);"
            "sys.argv = ['ccswitch', 'flows']; ccswitch.cli.main()")
    # (in /tmp itself: nobody may not look into pytest's root-only tmp_path, which reads as a denied socket)
    env = {**os.environ, "CCSWITCH_SOCKET": f"/tmp/ccswitch-test-no-daemon-{os.getpid()}.sock"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert_one_line_error(proc, "needs root")


def test_missing_btf() -> None:
    hide = ["unshare", "-m", "--propagation", "private", "sh", "-c",
            'mount -t tmpfs none /sys/kernel/btf && exec "$@"', "sh"]
    assert_one_line_error(run_cli("flows", wrap=hide), "/sys/kernel/btf/vmlinux is missing")


def test_missing_bpffs() -> None:
    hide = ["unshare", "-m", "--propagation", "private", "sh", "-c",
            'umount /sys/fs/bpf && exec "$@"', "sh"]
    assert_one_line_error(run_cli("flows", wrap=hide), "bpffs is not mounted")


def test_bad_interval(bottleneck) -> None:
    assert_one_line_error(run_cli("flows", "--interval", "0.01", ns=bottleneck.sender),
                          "below the minimum 0.1 s")


def test_second_instance_refused(bottleneck) -> None:
    first = subprocess.Popen(nsenter_argv(bottleneck.sender, [*CLI, "flows", "--count", "0",
                                                              "--json"]),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert first.stdout is not None
        first.stdout.readline()  # the first table: the instance is fully up
        second = run_cli("flows", ns=bottleneck.sender)
        assert second.returncode != 0
        assert "another ccswitch instance is already running" in second.stderr
        assert len(second.stderr.strip().splitlines()) == 1
        # a monitor in a *different* namespace is allowed
        other = run_cli("flows", "--interval", "0.2", ns=bottleneck.receiver)
        assert other.returncode == 0, other.stderr
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=20)
    assert first.returncode == 128 + signal.SIGTERM
    assert not bpf_leftovers()


def test_doctor_passes_here_and_names_the_fix_when_bpffs_is_missing() -> None:
    ok = run_cli("doctor", "--json")
    assert ok.returncode == 0, ok.stdout
    checks = {c["name"]: c for c in json.loads(ok.stdout)}
    assert checks["BTF"]["ok"] and checks["cgroup v2"]["ok"] and checks["BPF objects"]["ok"]
    hide = ["unshare", "-m", "--propagation", "private", "sh", "-c",
            'umount /sys/fs/bpf && exec "$@"', "sh"]
    bad = run_cli("doctor", wrap=hide)
    assert bad.returncode == 1
    line = next(ln for ln in bad.stdout.splitlines() if "bpffs" in ln)
    assert line.startswith("[FAIL]") and "mount -t bpf bpf /sys/fs/bpf" in line
