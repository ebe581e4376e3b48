"""`ccswitch doctor`: is this host able to run ccswitch, and if not, what to fix."""

from __future__ import annotations

import os
import platform
import shutil
from dataclasses import dataclass
from pathlib import Path

from ccswitch import host

BPF_DIR = Path(__file__).resolve().parent.parent / "bpf"
# CAP_NET_ADMIN 12, CAP_SYS_ADMIN 21, CAP_PERFMON 38, CAP_BPF 39
NEEDED_CAPS = {"CAP_BPF": 39, "CAP_NET_ADMIN": 12, "CAP_PERFMON": 38}
MIN_KERNEL = (6, 10)  # RTT samples in BPF_SOCK_OPS_RTT_CB; 6.13 adds TCP_BPF_SOCK_OPS_CB_FLAGS


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    required: bool = True


def _kernel_version() -> tuple[int, int]:
    parts = platform.release().split(".")
    return int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or 0)


def _effective_caps() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16)
    return 0


def run_checks() -> list[Check]:
    checks: list[Check] = []
    kv = _kernel_version()
    checks.append(Check("kernel", kv >= MIN_KERNEL, f"Linux {platform.release()}",
                        f"use Linux >= {MIN_KERNEL[0]}.{MIN_KERNEL[1]} (per-ACK RTT in sockops)"))
    checks.append(Check("BTF", host.BTF_VMLINUX.exists(), str(host.BTF_VMLINUX),
                        "boot a kernel built with CONFIG_DEBUG_INFO_BTF=y"))
    checks.append(Check("bpffs", host.bpffs_mounted(), str(host.BPFFS),
                        f"mount -t bpf bpf {host.BPFFS}"))
    try:
        cg = host.cgroup2_root()
        checks.append(Check("cgroup v2", True, cg))
    except host.HostError as exc:
        checks.append(Check("cgroup v2", False, "not mounted", str(exc).split("; ", 1)[-1]))
    caps = _effective_caps()
    missing = [n for n, bit in NEEDED_CAPS.items() if not caps & (1 << bit)]
    checks.append(Check("capabilities", not missing,
                        "all present" if not missing else "missing " + ", ".join(missing),
                        "run as root, or grant CAP_BPF CAP_NET_ADMIN CAP_PERFMON"))
    avail = host.available_ccas()
    checks.append(Check("CCAs available", {"cubic", "bbr"} <= set(avail), " ".join(avail),
                        "build the kernel with CONFIG_TCP_CONG_CUBIC and CONFIG_TCP_CONG_BBR"))
    pcc_detail = "kernel module" if "pcc" in avail else "ccswitch's BPF struct_ops (loaded on demand)"
    checks.append(Check("PCC", True, pcc_detail, required=False))
    prague_detail = ("registered" if "prague" in avail else
                     "ccswitch's BPF struct_ops (loaded on demand; needs ECN, see docs/l4s-kernel.md)")
    checks.append(Check("Prague", True, prague_detail, required=False))
    objs = [BPF_DIR / f"{n}.bpf.o" for n in ("monitor", "switcher", "pcc", "prague", "cemark")]
    absent = [o.name for o in objs if not o.exists()]
    checks.append(Check("BPF objects", not absent,
                        "built" if not absent else "missing " + ", ".join(absent),
                        "run `make -C bpf` (scripts/setup.sh does it)"))
    for tool, pkg in (("iperf3", "iperf3"), ("tshark", "tshark")):
        checks.append(Check(tool, shutil.which(tool) is not None, shutil.which(tool) or "absent",
                            f"apt-get install {pkg}", required=False))
    checks.append(Check("root", os.geteuid() == 0, f"euid {os.geteuid()}", "rerun with sudo"))
    return checks
