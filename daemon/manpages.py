"""Man pages for `ccswitch` and `ccswitchd`, generated from the CLIs' own help.

`python -m ccswitch.daemon.manpages` (re)writes daemon/man/: ccswitch.1 and
one page per subcommand (ccswitch-flows.1, ccswitch-testbed-matrix-run.1, ...,
as git does; click-man), and ccswitchd.8 (argparse-manpage; section 8: a
system daemon).  `--check` only compares and exits 1 naming the stale pages.

The pages are committed (package data), so an installation needs neither
generator: they are dev dependencies (pyproject's `dev` extra).
`ccswitch daemon install` copies them to /usr/local/share/man (install.py);
tests/test_manpages.py fails when the committed pages no longer match the
CLIs' help.  Output is made reproducible: a fixed date (the package's
version stands in for it) and an 80-column layout whatever the terminal.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

MAN_DIR = Path(__file__).resolve().parent / "man"
DATE = "ccswitch 0.1"  # fixed: regenerating must not change a page whose help did not change
WIDTH = "80"


def generate(out: Path) -> list[Path]:
    """Write every page into *out*; the paths written."""
    import click_man.core
    from argparse_manpage.manpage import Manpage

    from ccswitch.cli import cli
    from ccswitch.daemon.main import build_parser

    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH  # argparse and click wrap help text to the terminal
    try:
        out.mkdir(parents=True, exist_ok=True)
        click_man.core.write_man_pages("ccswitch", cli, version="0.1", target_dir=str(out), date=DATE)
        page = Manpage(build_parser())
        page.date, page.source, page.manual, page.section = DATE, "ccswitch 0.1", "ccswitch", 8
        page.description = "the ccswitch congestion-control switching daemon"
        (out / "ccswitchd.8").write_text(str(page))
    finally:
        if saved is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = saved
    return sorted(out.glob("*.[18]"))


def stale(committed: Path = MAN_DIR) -> list[str]:
    """Pages that differ from, are missing from, or are extra in *committed* (vs a fresh generation)."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh = {p.name: p.read_text() for p in generate(Path(tmp))}
    have = {p.name: p.read_text() for p in committed.glob("*.[18]")}
    return sorted(n for n in set(fresh) | set(have) if fresh.get(n) != have.get(n))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m ccswitch.daemon.manpages", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=MAN_DIR, help=f"directory (default {MAN_DIR})")
    ap.add_argument("--check", action="store_true", help="compare only; exit 1 naming the stale pages")
    args = ap.parse_args(argv)
    try:
        if args.check:
            bad = stale(args.out)
            if bad:
                print(f"stale man pages in {args.out}: {', '.join(bad)}; regenerate with "
                      "`python -m ccswitch.daemon.manpages`", file=sys.stderr)
                sys.exit(1)
            print(f"man pages in {args.out} match the CLIs' help")
            return
        for old in args.out.glob("*.[18]"):
            old.unlink()
        paths = generate(args.out)
    except ImportError as e:
        print(f"ccswitch.daemon.manpages: error: {e}; install the dev extra: pip install -e '.[dev]'",
              file=sys.stderr)
        sys.exit(1)
    print(f"{len(paths)} man pages in {args.out}")


if __name__ == "__main__":
    main()
