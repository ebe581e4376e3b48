"""No BPF congestion control outlives the test (or testbed run) that used it.

A struct_ops congestion control (bpf/prague.bpf.c, bpf/pcc.bpf.c) stays in
the kernel after its link is closed for as long as anything references it
(net/ipv4/bpf_tcp_ca.c: every socket running it, and a namespace whose
default it is, hold a reference on its struct_ops map through
bpf_try_module_get()).  Two ways that went wrong here
(docs/l4s-kernel.md, "Leftover struct_ops maps"):

* processes killed mid-transfer at teardown leave orphaned FIN-WAIT-1
  sockets; with the path already gone they retransmit for ~2 minutes
  (tcp_orphan_retries), keeping the algorithm and their namespace alive.
  delete_netns() now aborts the namespace's TCP sockets (`ss -K`);
* `sysctl net.ipv4.tcp_congestion_control=X` in a non-initial namespace for an
  X without TCP_CONG_NON_RESTRICTED fails with EPERM but leaks a reference
  on X (tcp_set_default_congestion_control() on Linux 6.18): the map lives
  until reboot.  make_default() refuses such an X before the sysctl.

The tests register renamed builds of the shipped sources (the kernel allows
one algorithm per name, and other processes on a development machine may hold
`prague` or `pcc`), so the maps they check are theirs: only map ids created
here count; nothing of any other process is touched.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ccswitch.bpf.libbpf import BPF_F_LINK, BpfObject, _lib
from ccswitch.bpf.prague import ALLOWED_SYSCTL, default_cca, make_default
from ccswitch.testbed.runs.iperf import start_flow, start_server
from ccswitch.testbed.runs.netns import Bottleneck, nsenter_argv

pytestmark = pytest.mark.kernel
BPF_DIR = Path(__file__).resolve().parents[1] / "bpf"
# test builds: (source, struct_ops map, algorithm name, extra -D flags)
PRAGUE_T = ("prague.bpf.c", "ccs_prague", "ccst_prague", [])
PRAGUE_RESTRICTED_T = ("prague.bpf.c", "ccs_prague", "ccst_restricted",
                       ["-DPRAGUE_ECN_FLAGS=6"])  # NEEDS_ECN | NEEDS_ACCECN, no NON_RESTRICTED
PCC_T = ("pcc.bpf.c", "ccs_pcc", "ccst_pcc", [])
FREED_WITHIN_S = 10.0
"""How long a map may take to go after its last user: measured 0.05-0.11 s (an RCU
grace period and the netns cleanup work queue); 10 s leaves room for a loaded 2-core
machine and is still 10x below the ~110 s that orphaned sockets kept it."""


def _build(tmp: Path, spec: tuple[str, str, str, list[str]]) -> Path:
    src, _, name, extra = spec
    arch = {"x86_64": "x86", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    name_define = "PRAGUE_NAME" if src.startswith("prague") else "PCC_NAME"
    out = tmp / f"{name}.bpf.o"
    subprocess.run(["clang", "-g", "-O2", "-target", "bpf", f"-D__TARGET_ARCH_{arch}", "-Wall",
                    "-Wno-unused-function", f"-I{BPF_DIR}", f'-D{name_define}="{name}"', *extra,
                    "-c", str(BPF_DIR / src), "-o", str(out)], check=True, capture_output=True)
    return out


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("struct_ops")
    return {spec[2]: _build(tmp, spec) for spec in (PRAGUE_T, PRAGUE_RESTRICTED_T, PCC_T)}


def _map_id(fd: int) -> int:
    info = ctypes.create_string_buffer(256)
    ln = ctypes.c_uint32(len(info))
    assert _lib.bpf_obj_get_info_by_fd(fd, info, ctypes.byref(ln)) == 0
    return int.from_bytes(info.raw[4:8], "little")  # struct bpf_map_info: type, id, ...


def _map_alive(map_id: int) -> bool:
    fd = _lib.bpf_map_get_fd_by_id(map_id)
    if fd < 0:
        return False
    os.close(fd)
    return True


def _wait_freed(ids: list[int], timeout_s: float = FREED_WITHIN_S) -> tuple[list[int], float]:
    t0 = time.monotonic()
    while (alive := [i for i in ids if _map_alive(i)]) and time.monotonic() - t0 < timeout_s:
        time.sleep(0.05)
    return alive, time.monotonic() - t0


@contextlib.contextmanager
def registered(obj: Path, map_name: str) -> Iterator[int]:
    """Register a struct_ops build through a link (as ccswitch does); yields its map id."""
    with BpfObject(obj) as o:
        o.set_map_flags(map_name, BPF_F_LINK)
        o.load()
        o.attach_struct_ops(map_name)
        yield _map_id(o.map(map_name).fd)


def test_flows_killed_mid_transfer_leave_no_struct_ops(builds: dict[str, Path], iperf3: str) -> None:
    """Prague (the namespaces' default, as the testbed's L4S runs do) and PCC flows through
    a router, torn down while both still send (a failed or interrupted run).

    The maps created here must be gone within FREED_WITHIN_S of the teardown.
    Before delete_netns() aborted the sockets this took ~110 s: each killed
    iperf3 left FIN-WAIT-1 orphans retransmitting into the removed router.
    """
    with registered(builds["ccst_prague"], "ccs_prague") as prague_id, \
            registered(builds["ccst_pcc"], "ccs_pcc") as pcc_id, Bottleneck(rate_mbit=50, router=True) as bn:
        for ns in (bn.sender, bn.receiver):
            make_default(ns, name="ccst_prague")
        with start_server(bn.receiver, 5461, bind=bn.receiver_addr), \
                    start_server(bn.receiver, 5462, bind=bn.receiver_addr):
            flows = [start_flow(bn.sender, bn.receiver_addr, 5461, cca=None, seconds=30),
                     start_flow(bn.sender, bn.receiver_addr, 5462, cca="ccst_pcc", seconds=30)]
            time.sleep(2.0)
            assert all(f.returncode is None for f in flows)
            ss = subprocess.run(nsenter_argv(bn.sender, ["ss", "-tinH", "state", "established"]),
                                capture_output=True, text=True, check=True).stdout
            assert "ccst_prague" in ss and "ccst_pcc" in ss, ss  # both algorithms in use
            bn.close()  # the processes inside are killed mid-transfer
            for f in flows:
                f.close()
    alive, took = _wait_freed([prague_id, pcc_id])
    assert not alive, f"struct_ops maps {alive} still alive {took:.1f} s after teardown"


def test_make_default_refuses_a_restricted_algorithm_and_leaks_nothing(builds: dict[str, Path]) -> None:
    """A BPF algorithm without TCP_CONG_NON_RESTRICTED cannot be a namespace's default:
    make_default() says so in one line before the kernel would leak a reference,
    the namespace keeps its default, and the map goes with its registration."""
    with registered(builds["ccst_restricted"], "ccs_prague") as map_id:
        assert "ccst_restricted" not in Path(ALLOWED_SYSCTL).read_text().split()
        with Bottleneck(rate_mbit=50) as bn:
            before = default_cca(bn.sender)
            with pytest.raises(RuntimeError, match="lacks TCP_CONG_NON_RESTRICTED") as err:
                make_default(bn.sender, name="ccst_restricted")
            assert "\n" not in str(err.value)
            assert default_cca(bn.sender) == before
    alive, took = _wait_freed([map_id])
    assert not alive, f"struct_ops map {map_id} still alive {took:.1f} s after its link closed"
