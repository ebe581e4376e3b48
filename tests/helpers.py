"""Helpers shared by the kernel tests: sampling loops and ss(8) parsing."""

from __future__ import annotations

import re
import subprocess
import time

from ccswitch.dataplane import DataPlane
from ccswitch.testbed.runs.netns import nsenter_argv


def sample_for(dp: DataPlane, seconds: float, sport: int, interval: float = 1.0) -> list[dict]:
    """Sample every `interval` for `seconds`; keep the rows of the flow with local port sport."""
    rows = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(interval)
        rows += [r for r in dp.sample().to_pylist() if r["sport"] == sport]
    return rows


def ss_info(ns: str, sport: int) -> dict[str, str | float]:
    """`ss -tin` for the socket with local port sport: its CCA and rtt (ms)."""
    out = subprocess.run(nsenter_argv(ns, ["ss", "-tinH", "state", "established",
                                           "sport", f"= :{sport}"]),
                         capture_output=True, text=True, check=True).stdout
    info: dict[str, str | float] = {}
    m = re.search(r"\b(cubic|bbr|pcc|reno)\b", out)
    if m:
        info["cca"] = m.group(1)
    m = re.search(r"\brtt:([\d.]+)/([\d.]+)", out)
    if m:
        info["rtt_ms"] = float(m.group(1))
    m = re.search(r"\bminrtt:([\d.]+)", out)
    if m:
        info["minrtt_ms"] = float(m.group(1))
    m = re.search(r"\bcwnd:(\d+)", out)
    if m:
        info["cwnd"] = float(m.group(1))
    return info
