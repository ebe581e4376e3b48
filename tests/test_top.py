"""`ccswitch top` (ccswitch/top.py): a live view that refreshes and quits cleanly.

The real CLI in a tmux pane on a live flow, as a user runs it: the frame
shows the flow and refreshes; `q` and Ctrl-C both quit with status 0 and
leave the terminal as they found it (canonical mode and echo back on).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ccswitch.testbed.runs.iperf import start_flow, start_server
from ccswitch.top import daemon_frame, frame_text

from helpers import TmuxPane

CLI = [sys.executable, "-m", "ccswitch.cli"]
REPO = Path(__file__).resolve().parent.parent
AFTER = "echo EXITED $?; stty -a | grep -o -- '-*icanon' | head -1; stty -a | grep -o -- ' -*echo ' | head -1; sleep 60"


def test_daemon_frame_shows_policy_counts_and_q_values() -> None:
    status = {"pid": 42, "policy": {"kind": "dqn"}, "flows_per_cca": {"cubic": 1}, "switches": 3, "reverts": 0,
              "tick_ms_p50": 0.8}
    row = {"flow_id": 9, "dst": "10.0.0.2", "dport": 5201, "cca": "cubic", "throughput_bps": 20e6,
           "rtt_us": 15000.0, "jitter_us": 900.0, "loss_rate": 0.0, "thratio": 1.0, "sent_segs": 10,
           "delivered_segs": 10, "sndq_bytes": 0, "q": {"cubic": -1.0, "bbr": -2.5}, "pinned": None,
           "last_action": "keep", "last_reason": "dwell"}
    idle = {**row, "flow_id": 10, "sent_segs": 0, "delivered_segs": 0}
    text = frame_text(daemon_frame(status, [row, idle], show_all=False), 100)
    assert "ccswitchd pid 42  policy dqn  flows 1 (cubic 1)  switches 3" in text
    assert "Q bbr" in text and "-2.50" in text and "keep: dwell" in text
    assert "\n  10 " not in text  # the idle flow is left out without --all
    assert all(len(line) <= 100 for line in text.splitlines())


def test_top_refuses_a_pipe_in_one_line() -> None:
    cp = subprocess.run([*CLI, "top"], capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60)
    assert cp.returncode == 1 and cp.stderr.count("\n") == 1
    assert "needs a terminal" in cp.stderr and "ccswitch flows --count 0" in cp.stderr


@pytest.mark.kernel
@pytest.mark.parametrize("quit_key", ["q", "C-c"])
def test_top_refreshes_and_quits_cleanly(bottleneck, iperf3, require, quit_key: str) -> None:
    require(shutil.which("tmux") is not None, "tmux is not installed (run scripts/setup.sh)")
    port, cport = 5491, 45491
    argv = [*CLI, "--netns", bottleneck.sender, "top", "--interval", "0.5"]
    with start_server(bottleneck.receiver, port, bind=bottleneck.receiver_addr):
        flow = start_flow(bottleneck.sender, bottleneck.receiver_addr, port, cca="cubic", seconds=10, cport=cport)
        try:
            with TmuxPane(argv, 100, then=AFTER, cwd=REPO) as pane:
                first = pane.wait_for(" cubic ", timeout_s=30)
                stamp = re.search(r"^(\d\d:\d\d:\d\d)", first, re.M)
                assert stamp, first
                assert "q or Ctrl-C quits" in first and "goodput Mb/s" in first
                # it refreshes: the clock in the header moves on
                pane.wait_for("", timeout_s=1)
                later = pane.wait_for(" cubic ", settle_s=1.5)
                assert re.search(r"^(\d\d:\d\d:\d\d)", later, re.M).group(1) != stamp.group(1), later
                pane.keys(quit_key)
                done = pane.wait_for("EXITED", timeout_s=15, settle_s=0.8)
        finally:
            flow.wait(timeout=30)
    assert "EXITED 0" in done, done
    # the terminal is back in canonical mode with echo (cbreak undone)
    assert re.search(r"^icanon$", done, re.M) and re.search(r"^ echo\s*$", done, re.M), done
    assert "q or Ctrl-C quits" not in done  # the alternate screen is gone
