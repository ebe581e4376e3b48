"""`ccswitch top`: a live, refreshing view of the flows and the policy's view of them.

From a running ccswitchd (its control socket): every flow with its CCA,
throughput, RTT, loss, Q-values per CCA, pin and the guard's last decision,
under a header with the policy, switch counts and tick time.  Without a
daemon: the monitor's own numbers (loaded for the view, detached on exit).

The frame is the same table as `ccswitch flows` (ccswitch/tables.py: the
columns that fit the terminal, none cut), redrawn every --interval seconds in
the terminal's alternate screen by rich's Live.  `q` quits; Ctrl-C quits the
same way (exit 0); either way the terminal is restored and, without a
daemon, the monitor's BPF programs are detached.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import sys
import termios
import time
import tty
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ccswitch.tables import Column, render

Frame = tuple[str, list[Column], list[dict[str, Any]]]  # header, columns, rows
QUIT_KEYS = {"q", "Q"}


@contextlib.contextmanager
def keys_unbuffered() -> Iterator[Callable[[float], str]]:
    """stdin in cbreak mode (one key at a time, no echo); yields wait(timeout) -> key or ''."""
    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    tty.setcbreak(fd)

    def wait(timeout: float) -> str:
        ready, _, _ = select.select([fd], [], [], max(0.0, timeout))
        return os.read(fd, 1).decode(errors="replace") if ready else ""

    try:
        yield wait
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def daemon_frame(status: dict[str, Any], rows: list[dict[str, Any]], show_all: bool) -> Frame:
    """The header and table of one refresh from the daemon's `status` and `flows` answers."""
    from ccswitch.daemon.commands import daemon_flow_columns

    shown = rows if show_all else [r for r in rows if r["sent_segs"] or r["delivered_segs"] or r["sndq_bytes"]]
    actions = next((list(r["q"]) for r in shown if r.get("q")), [])
    pol = status.get("policy", {})
    per = ", ".join(f"{k} {v}" for k, v in sorted(status.get("flows_per_cca", {}).items())) or "none"
    header = (f"ccswitchd pid {status.get('pid')}  policy {pol.get('kind')}  flows {len(shown)} ({per})  "
              f"switches {status.get('switches', 0)}  reverts {status.get('reverts', 0)}  "
              f"tick p50 {status.get('tick_ms_p50', float('nan')):.2f} ms")
    return header, daemon_flow_columns(actions), sorted(shown, key=lambda r: r["flow_id"])


def monitor_frame(rows: list[dict[str, Any]], interval: float, show_all: bool) -> Frame:
    from ccswitch.cli import FLOW_COLUMNS

    shown = rows if show_all else [r for r in rows if r["sent_segs"] or r["delivered_segs"] or r["sndq_bytes"]]
    header = f"ccswitch monitor (no daemon: no Q-values)  flows {len(shown)}  every {interval:g} s"
    return header, list(FLOW_COLUMNS), sorted(shown, key=lambda r: r["flow_id"])


def frame_text(frame: Frame, width: int, *, wide: bool = False, names: Sequence[str] | None = None) -> str:
    header, columns, rows = frame
    stamp = time.strftime("%H:%M:%S")
    body = render(columns, rows, width=width, wide=wide, names=names) if rows else "(no active flows)"
    return f"{stamp}  {header}\n{body}\n\nq or Ctrl-C quits"


def run_top(next_frame: Callable[[], Frame], interval: float, *, wide: bool = False,
            names: Sequence[str] | None = None) -> None:
    """Redraw next_frame() every `interval` s until q or Ctrl-C (--wide / -o as in `ccswitch flows`)."""
    from rich.console import Console
    from rich.live import Live
    from rich.text import Text

    console = Console()
    with keys_unbuffered() as wait_key, Live(console=console, screen=True, auto_refresh=False) as live, \
            contextlib.suppress(KeyboardInterrupt):
        while True:
            width = shutil.get_terminal_size((80, 24)).columns
            text = frame_text(next_frame(), width, wide=wide, names=names)
            live.update(Text(text, no_wrap=True, overflow="crop"), refresh=True)
            deadline = time.monotonic() + interval
            while (left := deadline - time.monotonic()) > 0:
                if wait_key(left) in QUIT_KEYS:
                    return
