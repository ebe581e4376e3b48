"""The CLI's tables read well anywhere (ccswitch/tables.py).

Unit tests of the layout (which columns fit, what is cut), then the real
`ccswitch flows` on a live flow: in tmux panes of 80 and 200 columns
(capture-pane: what a user sees) and piped.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ccswitch.cli import FLOW_COLUMNS
from ccswitch.daemon.commands import HISTORY_COLUMNS, daemon_flow_columns
from ccswitch.tables import Column, fit, render, select, wrap_fields
from ccswitch.testbed.runs.iperf import start_flow, start_server

from helpers import TmuxPane

CLI = [sys.executable, "-m", "ccswitch.cli"]
REPO = Path(__file__).resolve().parent.parent
BOX = set("─│┃━┏┓┗┛┡┩╇╭╮╰╯├┤┼")

FLOW = {"flow_id": 123456789, "src": "10.200.17.2", "sport": 43211, "dst": "10.200.17.1", "dport": 5201,
        "cca": "cubic", "goodput_bps": 48.31e6, "rtt_us": 21346.0, "min_rtt_us": 20012.0, "jitter_us": 1534.0,
        "loss_rate": 0.0123, "cwnd_segs": 87, "sndq_bytes": 2_500_000}


def test_narrow_terminal_drops_whole_columns_least_important_first() -> None:
    """80 columns: rank-0 columns stay, the widest-ranked go, every kept cell is whole."""
    out = render(FLOW_COLUMNS, [FLOW], width=80)
    lines = out.splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    header, row, note = lines
    for kept in ("flow", "cca", "goodput Mb/s", "rtt ms"):  # rank 0
        assert kept in header
    assert "local" not in header and "sndq" not in header  # ranks 2 and 3 do not fit
    assert note.startswith("(") and "local" in note and "--wide" in note
    for value in ("123456789", "cubic", "48.31", "21.35"):  # no number cut or wrapped
        assert re.search(rf"(^|\s){re.escape(value)}(\s|$)", row), (value, row)
    assert "…" not in out


def test_wide_and_piped_show_every_column() -> None:
    for out in (render(FLOW_COLUMNS, [FLOW], width=80, wide=True), render(FLOW_COLUMNS, [FLOW], width=None)):
        header = out.splitlines()[0]
        assert all(c.heading in header for c in FLOW_COLUMNS), header
        assert "10.200.17.2:43211" in out and "2500" in out and "more column" not in out


def test_columns_option_picks_and_orders_and_rejects_unknown_names() -> None:
    out = render(FLOW_COLUMNS, [FLOW], width=40, names=["cca", "loss", "flow"])
    header, row = out.splitlines()
    assert header.split() == ["cca", "loss", "%", "flow"]
    assert row.split() == ["cubic", "1.23", "123456789"]
    with pytest.raises(ValueError, match=r"unknown column 'rttt'; pass -o with names from: flow, local"):
        select(FLOW_COLUMNS, ["rttt"])


def test_free_text_is_cut_to_the_width_left_and_numbers_never() -> None:
    """The daemon table's last decision takes what is left; Q-values stay whole."""
    row = {**FLOW, "throughput_bps": 50.1e6, "thratio": 0.93, "q": {"cubic": -1.234, "bbr": -0.5, "pcc": -12.75},
           "pinned": None, "last_action": "keep", "last_reason": "policy prefers current by 0.12 < margin 0.3"}
    cols = daemon_flow_columns(["cubic", "bbr", "pcc"])
    out = render(cols, [row], width=80)
    lines = out.splitlines()
    assert all(len(line) <= 80 for line in lines)
    assert "Q pcc" in lines[0] and "last decision" in lines[0]
    assert "-12.75" in lines[1] and "-1.23" in lines[1]
    assert "…" in lines[1] and lines[1].rstrip().endswith("…")
    full = render(cols, [row], width=None)
    assert "policy prefers current by 0.12 < margin 0.3" in full


def test_fit_adds_a_rank_column_by_column_when_the_whole_rank_does_not_fit() -> None:
    cols = [Column("a", str), Column("b", str, rank=1), Column("c", str, rank=1), Column("d", str, rank=2)]
    assert fit(cols, [10, 10, 10, 1], 22) == [0, 1]  # b fits, then c does not; rank 2 not tried
    assert fit(cols, [10, 10, 10, 1], 100) == [0, 1, 2, 3]
    assert fit(cols, [10, 10, 10, 1], 5) == [0]  # rank 0 stays even when too wide


ITEM = st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=40).map(
    lambda t: t.replace(",", ";"))


@given(st.lists(ITEM, min_size=1, max_size=25), st.integers(20, 120))
def test_wrapped_fields_fit_the_width_and_keep_every_item_whole(items: list[str], width: int) -> None:
    out = wrap_fields("label", items, width)
    lines = out.split("\n")
    for line in lines:  # too long only when one item alone does not fit
        assert len(line) <= width or (line.startswith("  ") and line.strip().rstrip(",") in items), (line, width)
    assert lines[0].startswith("label:") and all(line.startswith("  ") for line in lines[1:])
    assert [t.strip() for t in " ".join(lines)[len("label:"):].split(", ")] == items  # order kept, none cut
    assert wrap_fields("label", items, None) == "label: " + ", ".join(items)  # piped: one line


def test_policy_show_in_tmux_at_80_columns_wraps_between_fields() -> None:
    with TmuxPane([*CLI, "policy", "show", "--file", str(REPO / "models" / "policy.json")], width=80,
                  height=120, cwd=REPO) as pane:
        text = pane.wait_for("end to end, test split", timeout_s=60, settle_s=1.0)
    lines = text.rstrip("\n").split("\n")
    assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
    assert any(line.startswith("hyperparameters: ") for line in lines)
    assert any(line.startswith("  ") and "n_step=3" in line for line in lines)  # continuation, not mid-word
    assert not any(re.match(r"^[a-z0-9_]+=?[0-9.]*,", line) for line in lines), text  # no line starts mid-item


def test_history_at_40_columns_keeps_time_flow_from_to() -> None:
    row = {"ts": 1_764_000_000.5, "flow": 7, "from": "cubic", "to": "bbr", "kind": "policy", "verdict": "kept",
           "reason": "Q bbr -0.50 > Q cubic -1.23 by 0.73"}
    header = render(HISTORY_COLUMNS, [row], width=40).splitlines()[0]
    assert header.split() == ["time", "flow", "from", "to", "kind"]


def test_bad_columns_option_is_one_line_error() -> None:
    cp = subprocess.run([*CLI, "flows", "-o", "flow,speed"], capture_output=True, text=True, timeout=60)
    assert cp.returncode == 1
    assert cp.stderr.strip().count("\n") == 0, cp.stderr
    assert "unknown column 'speed'" in cp.stderr and "goodput" in cp.stderr


# ---------------------------------------------------------------- the real CLI
def _tmux_capture(argv: list[str], width: int, until: str) -> str:
    with TmuxPane(argv, width, cwd=REPO) as pane:
        return pane.wait_for(until)


@pytest.mark.kernel
def test_flows_in_tmux_at_80_and_200_columns_and_piped(bottleneck, iperf3, require) -> None:
    """A live flow seen by `ccswitch flows` as a user would: a narrow pane, a wide pane, a pipe."""
    require(shutil.which("tmux") is not None, "tmux is not installed (run scripts/setup.sh)")
    port, cport = 5481, 45481
    argv = [*CLI, "--netns", bottleneck.sender, "flows", "--interval", "0.5"]
    with start_server(bottleneck.receiver, port, bind=bottleneck.receiver_addr):
        flow = start_flow(bottleneck.sender, bottleneck.receiver_addr, port, cca="cubic", seconds=12, cport=cport)
        try:
            time.sleep(1.0)
            narrow = _tmux_capture(argv, 80, "more column")
            wide = _tmux_capture(argv, 200, f":{cport}")
            piped = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        finally:
            flow.wait(timeout=30)
    local = f"{bottleneck.sender_addr}:{cport}"
    lines = [line for line in narrow.splitlines() if line.strip()]
    assert all(len(line) <= 80 for line in lines), narrow
    header = next(line for line in lines if line.lstrip().startswith("flow"))
    assert "cca" in header and "goodput Mb/s" in header and "rtt ms" in header
    row = next(line for line in lines if " cubic " in line)
    assert re.search(r"\s\d+\.\d\d\s", row), row  # goodput / rtt whole
    # the least important columns are left out and named under the table
    assert "sndq KB" not in narrow and "sndq" in lines[-1] and "--wide" in lines[-1]
    assert local in wide and "more column" not in wide and "sndq KB" in wide
    assert piped.returncode == 0, piped.stderr
    assert local in piped.stdout and "sndq KB" in piped.stdout and "more column" not in piped.stdout
    assert "\x1b" not in piped.stdout and not (BOX & set(piped.stdout)), piped.stdout
