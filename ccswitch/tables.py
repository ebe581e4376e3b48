"""Tables the CLI prints, laid out like `ss`: columns chosen to fit, no cell cut.

Every table of the CLI (`ccswitch flows`, `history`, the demo's summary) is a
list of `Column`s and a list of row dicts, rendered by `render()`:

* A cell is never truncated or wrapped mid-value.  When the terminal is
  narrower than the table, whole columns are left out, least important first
  (`Column.rank`: 0 = always shown, then 1, 2, ... dropped from the highest);
  a line at the end names what was left out and how to see it.
* The one free-text column a table may have (`Column.text`, e.g. the guard's
  last decision) takes the width that is left and is cut with an ellipsis
  (a reason, not a number); with less than `MIN_TEXT` columns left it is
  dropped like any other.
* `--wide` shows every column whatever the width; `-o/--columns a,b,c` shows
  exactly those, in that order (unknown names: one error line listing the
  valid ones).
* The width is the terminal's, or $COLUMNS when exported (as `ls` reads it).
* Output that is not a terminal (a pipe, a file) gets every column and no
  width limit, like `ss`: scripts see the same columns whatever window ran
  them.  Plain text everywhere: columns separated by two spaces, no box
  drawing; on a terminal the header is bold.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

GAP = 2  # spaces between columns
MIN_TEXT = 12  # narrowest a free-text column is worth showing


@dataclass(frozen=True)
class Column:
    """One column: its header (also its `-o` name), how a row becomes a cell, its importance."""

    name: str  # the `-o` name: one word
    cell: Callable[[dict[str, Any]], str]
    rank: int = 0  # 0: always shown; higher ranks are left out first when narrow
    right: bool = True  # numbers align right, names and text left
    text: bool = False  # free text: may be cut to the width left (at most one per table)
    header: str = ""  # what the header says when not just the name (e.g. with a unit)

    @property
    def heading(self) -> str:
        return self.header or self.name

    @property
    def min_width(self) -> int:
        """Narrowest a free-text column is shown (its header is never cut)."""
        return max(MIN_TEXT, len(self.heading))


def parse_columns(spec: str | None) -> list[str] | None:
    """`-o flow,cca,rtt` -> ["flow", "cca", "rtt"]; None/empty -> None (the default choice)."""
    if not spec:
        return None
    return [c.strip() for c in spec.split(",") if c.strip()]


def select(columns: Sequence[Column], names: Sequence[str] | None) -> list[Column]:
    """The columns `-o` asked for, in its order; ValueError naming the valid ones."""
    if names is None:
        return list(columns)
    by_name = {c.name: c for c in columns}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        valid = ", ".join(c.name for c in columns)
        raise ValueError(f"unknown column {', '.join(repr(n) for n in unknown)}; "
                         f"pass -o with names from: {valid}")
    return [by_name[n] for n in names]


def fit(columns: Sequence[Column], widths: Sequence[int], width: int) -> list[int]:
    """Indices of the columns to show in `width` characters (original order kept).

    Rank-0 columns always stay; then ranks 1, 2, ... are added while they fit.
    A free-text column counts as its `min_width` (it takes what is left).
    """
    def need(idx: Sequence[int]) -> int:
        cells = sum(min(widths[i], columns[i].min_width) if columns[i].text else widths[i] for i in idx)
        return cells + GAP * max(0, len(idx) - 1)

    keep = [i for i, c in enumerate(columns) if c.rank == 0]
    for rank in sorted({c.rank for c in columns if c.rank > 0}):
        trial = sorted(keep + [i for i, c in enumerate(columns) if c.rank == rank])
        if need(trial) > width:
            # this rank does not fit whole: add its columns one by one, left to right
            for i in (i for i, c in enumerate(columns) if c.rank == rank):
                if need(sorted([*keep, i])) <= width:
                    keep = sorted([*keep, i])
            break
        keep = trial
    return keep


def _cut(s: str, n: int) -> str:
    return s if len(s) <= n else s[: max(0, n - 1)] + "…"


def render(columns: Sequence[Column], rows: Sequence[dict[str, Any]], *, title: str = "",
           width: int | None = None, wide: bool = False, names: Sequence[str] | None = None,
           bold_header: bool = False) -> str:
    """The table as text.  `width` None: no limit (every column, nothing cut)."""
    cols = select(columns, names)
    cells = [[c.cell(r) for c in cols] for r in rows]
    widths = [max([len(c.heading)] + [len(row[j]) for row in cells]) for j, c in enumerate(cols)]
    shown = list(range(len(cols)))
    if width is not None and not wide and names is None:
        shown = fit(cols, widths, width)
    hidden = [cols[j].name for j in range(len(cols)) if j not in shown]
    if width is not None and not wide:  # the free-text column takes what is left
        fixed = sum(widths[j] for j in shown if not cols[j].text) + GAP * max(0, len(shown) - 1)
        for j in shown:
            if cols[j].text:
                widths[j] = min(widths[j], max(cols[j].min_width, width - fixed))

    def line(values: Sequence[str]) -> str:
        out = []
        for j in shown:
            v = _cut(values[j], widths[j])
            out.append(v.rjust(widths[j]) if cols[j].right else v.ljust(widths[j]))
        return (" " * GAP).join(out).rstrip()

    header = line([c.heading for c in cols])
    if bold_header:
        header = f"\x1b[1m{header}\x1b[0m"
    lines = ([title] if title else []) + [header] + [line(row) for row in cells]
    if hidden:
        lines.append(f"({len(hidden)} more column{'s' if len(hidden) > 1 else ''}: {', '.join(hidden)}; "
                     "--wide shows all, -o picks)")
    return "\n".join(lines)


def print_table(columns: Sequence[Column], rows: Sequence[dict[str, Any]], *, title: str = "",
                wide: bool = False, names: Sequence[str] | None = None, out: TextIO | None = None) -> None:
    """Render for `out` (stdout): fit a terminal's width, everything when piped."""
    out = out or sys.stdout
    tty = out.isatty()
    width = shutil.get_terminal_size((80, 24)).columns if tty else None
    out.write(render(columns, rows, title=title, width=width, wide=wide, names=names, bold_header=tty) + "\n")
    out.flush()


def wrap_fields(label: str, items: Sequence[str], width: int | None, sep: str = ", ", indent: int = 2) -> str:
    """`label: a, b, c` wrapped at *width* between items (never inside one), continuation lines indented.

    width None (piped output) keeps one line per label, for grep.  An item longer than the width gets a line
    of its own rather than being cut.
    """
    if width is None or not items:
        return f"{label}: " + sep.join(items)
    pieces = [item + sep.rstrip() for item in items[:-1]] + [items[-1]]
    lines = [f"{label}:"]
    for piece in pieces:
        if len(lines[-1]) + 1 + len(piece) <= width:
            lines[-1] += " " + piece
        else:
            lines.append(" " * indent + piece)
    return "\n".join(lines)


def terminal_width(out: TextIO | None = None) -> int | None:
    """The terminal's columns when *out* (stdout) is one, else None (piped: do not wrap)."""
    out = out or sys.stdout
    return shutil.get_terminal_size((80, 24)).columns if out.isatty() else None


def num(value: float | None, nd: int = 2) -> str:
    """A number for a cell: fixed decimals, '-' for missing or NaN."""
    if value is None or value != value:
        return "-"
    return f"{value:.{nd}f}"
