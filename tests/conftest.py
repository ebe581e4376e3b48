"""Shared pytest set-up.

``@pytest.mark.kernel`` tests need root, BPF (kernel BTF and bpffs at /sys/fs/bpf)
and named network namespaces.  When one of these is missing such a test is
*skipped* on a developer machine but *fails* when the environment variable
``CI=true`` (so CI can never silently skip the kernel tests).

Fixtures:

* ``bottleneck`` -- a fresh :class:`ccswitch.testbed.runs.netns.Bottleneck` (50 Mbit/s
  tbf by default; override with ``@pytest.mark.bottleneck(rate_mbit=10, ...)``).
* ``iperf3`` -- path of the iperf3 binary (skip/fail like ``kernel`` if absent).
* ``require`` -- ``require(ok, reason)`` skips (or fails under CI) unless *ok*.
* ``run_cleanup`` (autouse) -- after every kernel test, asserts that the test left
  no ``ccs-`` namespace behind (and removes any it finds).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator

import pytest

from ccswitch.testbed.runs import netns as tbnetns


def in_ci() -> bool:
    """True when running under CI (``CI=true``, as GitHub Actions and others set it)."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def skip_or_fail(reason: str) -> None:
    """Skip the current test, or fail it when running under CI."""
    if in_ci():
        pytest.fail(f"{reason} (CI=true: missing capabilities are failures)", pytrace=False)
    pytest.skip(reason)


def _bpffs_mounted(path: str = "/sys/fs/bpf") -> bool:
    try:
        with open("/proc/self/mounts") as f:
            return any(line.split()[1] == path and line.split()[2] == "bpf" for line in f if line.strip())
    except OSError:
        return False


@functools.cache
def kernel_missing() -> tuple[str, ...]:
    """What a ``kernel`` test needs but this machine lacks (empty if all there)."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root")
    if not os.path.exists("/sys/kernel/btf/vmlinux"):
        missing.append("kernel BTF (/sys/kernel/btf/vmlinux)")
    if not _bpffs_mounted():
        missing.append("bpffs mounted at /sys/fs/bpf (run scripts/setup.sh)")
    if shutil.which("ip") is None:
        missing.append("ip (iproute2)")
    else:
        cp = subprocess.run(["ip", "netns", "list"], capture_output=True, check=False)
        if cp.returncode != 0:
            missing.append("ip netns")
    missing += [f"{tool} in PATH" for tool in tbnetns.missing_tools()]
    return tuple(missing)


def require_kernel() -> None:
    missing = kernel_missing()
    if missing:
        skip_or_fail("kernel test needs: " + ", ".join(missing))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "bottleneck(**kwargs): keyword arguments for the `bottleneck` fixture's Bottleneck",
    )


KERNEL_RERUNS = 1
"""Kernel tests (real TCP stacks, linkemu, iperf3 in real time) get one more try after a failure, logged as
RERUN in the log and counted as "rerun" in the summary line; a test that fails twice fails the suite.  Why:
they measure real time on a shared 2-core VM, where a stalled scheduler (seen in CI: 6 ms pings through a
10 ms link, a PCC flow at 31 Mbit/s for a second) fails a bound that holds in every quiet run.  Unit tests
get no retry: they do not depend on the clock.  pytest-rerunfailures does the retry."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("kernel") is not None and item.get_closest_marker("flaky") is None:
            item.add_marker(pytest.mark.flaky(reruns=KERNEL_RERUNS, reruns_delay=2))


def pytest_sessionstart(session: pytest.Session) -> None:
    # Namespaces left by earlier runs that were SIGKILLed (their owner is dead).
    if os.geteuid() == 0:
        tbnetns.cleanup_leftovers()


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("kernel") is not None:
        require_kernel()


@pytest.fixture
def require() -> Callable[[bool, str], None]:
    """``require(ok, reason)``: skip (fail under CI) unless *ok*."""

    def _require(ok: bool, reason: str) -> None:
        if not ok:
            skip_or_fail(reason)

    return _require


@pytest.fixture
def iperf3() -> str:
    path = shutil.which("iperf3")
    if path is None:
        skip_or_fail("iperf3 is not installed (run scripts/setup.sh)")
    assert path is not None
    return path


@pytest.fixture
def bottleneck(request: pytest.FixtureRequest) -> Iterator[tbnetns.Bottleneck]:
    """A fresh sender/receiver namespace pair with a 50 Mbit/s tbf (by default)."""
    require_kernel()
    marker = request.node.get_closest_marker("bottleneck")
    kwargs = {"rate_mbit": 50.0, **(marker.kwargs if marker else {})}
    with tbnetns.Bottleneck(**kwargs) as bn:
        yield bn


def _ours_or_orphaned(name: str) -> bool:
    return tbnetns.owner_pid(name) == os.getpid() or not tbnetns.owner_alive(name)


@pytest.fixture(autouse=True)
def run_cleanup(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a kernel test that leaks ``ccs-`` namespaces (and remove them).

    Only namespaces that appeared during the test and are owned by this process
    (or by a dead process) count, so concurrent runs on the same machine do not
    interfere.
    """
    if request.node.get_closest_marker("kernel") is None or kernel_missing():
        yield
        return
    before = set(tbnetns.list_netns())
    yield
    leaked = [n for n in tbnetns.list_netns() if n not in before and _ours_or_orphaned(n)]
    for name in leaked:
        tbnetns.delete_netns(name)
    assert not leaked, f"test leaked network namespaces: {leaked}"
