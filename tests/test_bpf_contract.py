"""The Python mirrors of kernel/user structs match the objects' BTF.

These need only the built objects (no root): they catch a field added to
monitor.h or switcher.h without the matching change in the Python mirror.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from ccswitch.bpf.monitor import FLOW_RECORD_DTYPE
from ccswitch.bpf.switcher import REQUEST, RESULT_DTYPE

BPF_DIR = Path(__file__).resolve().parent.parent / "bpf"


def btf_struct(obj: str, name: str) -> tuple[int, list[tuple[str, int]]]:
    path = BPF_DIR / obj
    if not path.exists():
        pytest.fail(f"{path} is not built; run `make -C bpf`")
    out = subprocess.run(["bpftool", "btf", "dump", "file", str(path)],
                         check=True, capture_output=True, text=True).stdout
    m = re.search(rf"STRUCT '{name}' size=(\d+) vlen=(\d+)\n((?:\t.*\n)+)", out)
    assert m, f"struct {name} not in the BTF of {obj}"
    members = re.findall(r"'(\w+)' type_id=\d+ bits_offset=(\d+)", m.group(3))
    return int(m.group(1)), [(n, int(off) // 8) for n, off in members]


def dtype_layout(dt: np.dtype) -> list[tuple[str, int]]:
    return [(n, dt.fields[n][1]) for n in dt.names]


def test_flow_record_mirror_matches_btf() -> None:
    size, members = btf_struct("monitor.bpf.o", "flow_record")
    assert dtype_layout(FLOW_RECORD_DTYPE) == members
    assert FLOW_RECORD_DTYPE.itemsize == size


def test_switch_result_mirror_matches_btf() -> None:
    size, members = btf_struct("switcher.bpf.o", "switch_result")
    # the C struct groups before/after pairs on one line; BTF lists them in order
    assert dtype_layout(RESULT_DTYPE) == members
    assert RESULT_DTYPE.itemsize == size


def test_switch_request_mirror_matches_btf() -> None:
    size, members = btf_struct("switcher.bpf.o", "switch_request")
    assert [n for n, _ in members] == ["cca", "inherit", "_pad"]
    assert REQUEST.size == size


def test_cemark_mirrors_match_btf() -> None:
    from ccswitch.bpf.cemark import STATS

    size, members = btf_struct("cemark.bpf.o", "cemark_stats")
    assert [n for n, _ in members] == ["segs", "marked_segs"] and STATS.size == size
    size, members = btf_struct("cemark.bpf.o", "cemark_cfg")
    assert [n for n, _ in members] == ["prob_u32", "_pad"] and size == 8  # cemark.py packs "<II"


def test_prague_constants_match_header() -> None:
    """prague.py's copies of prague.h's name and DSCP (the DualPI2 DSCP classifier relies on it)."""
    from ccswitch.bpf import prague

    header = (BPF_DIR / "prague.h").read_text()
    assert re.search(rf"#define PRAGUE_DSCP {prague.PRAGUE_DSCP}\b", header)
    assert re.search(rf'#define PRAGUE_NAME "{prague.NAME}"', header)


def test_prague_tunables_mirror_matches_btf_and_header() -> None:
    """PragueTunables.pack() is struct prague_tunables (three u32 in that order), its defaults
    and mode numbers are prague.h's, and the object's .data.tunables holds only that struct."""
    from ccswitch.bpf import prague

    size, members = btf_struct("prague.bpf.o", "prague_tunables")
    assert members == [("rtt_scaling", 0), ("rtt_target_us", 4), ("rtt_transition", 8)]
    assert size == len(prague.PragueTunables().pack()) == 12
    header = (BPF_DIR / "prague.h").read_text()
    for name, value in prague.RTT_SCALING.items():
        assert re.search(rf"#define PRAGUE_RTT_SCALING_{name.upper()}\s+{value}\b", header), name
    t = prague.PragueTunables()
    assert re.search(rf"#define PRAGUE_RTT_TARGET_US\s+{t.rtt_target_us}\b", header)
    assert re.search(rf"#define PRAGUE_RTT_TRANSITION\s+{t.rtt_transition}\b", header)
    assert t.rtt_scaling == "rate" and "PRAGUE_RTT_SCALING_RATE," in (BPF_DIR / "prague.bpf.c").read_text()
    out = subprocess.run(["bpftool", "btf", "dump", "file", str(BPF_DIR / "prague.bpf.o")],
                         check=True, capture_output=True, text=True).stdout
    sec = re.search(r"DATASEC '\.data\.tunables' size=\d+ vlen=(\d+)\n"
                    r"\t.* offset=(\d+) size=(\d+) \(VAR '(\w+)'\)", out)
    assert sec and sec.groups() == ("1", "0", "12", "prague_cfg"), sec and sec.groups()
