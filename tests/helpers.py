"""Helpers shared by the tests: sampling loops, ss(8) parsing, a tmux pane for CLI views."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import time
import uuid
from pathlib import Path
from types import ModuleType

from ccswitch.dataplane import DataPlane
from ccswitch.testbed.runs.netns import nsenter_argv


def load_bench(name: str) -> ModuleType:
    """bench/NAME.py as a module (the benches are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parents[1] / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def unregistered_within(name: str, timeout_s: float = 2.0) -> bool:
    """Whether congestion control `name` leaves the kernel within timeout_s (bpf/holder.py's wait: its
    holder unregisters it within a poll, 0.25 s, of its last user's end)."""
    from ccswitch.bpf.holder import unregistered_within as within

    return within(name, timeout_s)


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


class TmuxPane:
    """A command in a detached tmux pane of a given width: what a user sees (capture-pane).

    A private tmux server per pane (-L): no user's server is touched, and no new
    session races a server that is exiting after the previous kill.  COLUMNS
    and LINES are unset for the command: tmux started from under pytest
    exports COLUMNS=80 to the pane, which a user's shell does not.
    """

    def __init__(self, argv: list[str], width: int, height: int = 40, then: str = "sleep 60",
                 cwd: Path | None = None):
        self.tmux = ["tmux", "-L", f"ccs-test-{uuid.uuid4().hex[:8]}"]
        cmd = subprocess.list2cmdline(["env", "-u", "COLUMNS", "-u", "LINES", *argv]) + f"; {then}"
        start = [*self.tmux, "new-session", "-d", "-x", str(width), "-y", str(height)]
        if cwd:
            start += ["-c", str(cwd)]
        subprocess.run([*start, cmd], check=True)

    def text(self) -> str:
        return subprocess.run([*self.tmux, "capture-pane", "-p"], capture_output=True, text=True,
                              check=True).stdout

    def wait_for(self, needle: str, timeout_s: float = 30.0, settle_s: float = 0.3) -> str:
        """The pane's text once `needle` shows (then `settle_s` more for the rest of the frame)."""
        deadline = time.monotonic() + timeout_s
        text = ""
        while time.monotonic() < deadline:
            text = self.text()
            if needle in text:
                time.sleep(settle_s)
                return self.text()
            time.sleep(0.2)
        raise AssertionError(f"{needle!r} did not appear within {timeout_s} s; the pane:\n{text}")

    def keys(self, *keys: str) -> None:
        subprocess.run([*self.tmux, "send-keys", *keys], check=True)

    def close(self) -> None:
        subprocess.run([*self.tmux, "kill-server"], capture_output=True)

    def __enter__(self) -> TmuxPane:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
