"""Man pages (daemon/manpages.py): generated from the CLIs' help, committed, installed.

The committed pages must match a fresh generation (a changed option or help
text without regenerating fails here, naming the pages and the command that
fixes them); `ccswitch daemon install --root` places them where man finds
them, idempotently.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from ccswitch.daemon.install import MAN_DST, install
from ccswitch.daemon.manpages import MAN_DIR, generate, stale


def test_committed_man_pages_match_the_cli_help() -> None:
    assert stale() == [], "run `python -m ccswitch.daemon.manpages` and commit daemon/man"


def test_every_command_has_a_page_with_its_options(tmp_path: Path) -> None:
    names = {p.name for p in generate(tmp_path)}
    assert {"ccswitch.1", "ccswitchd.8", "ccswitch-flows.1", "ccswitch-top.1", "ccswitch-testbed-matrix-run.1",
            "ccswitch-daemon-install.1"} <= names
    flows = (tmp_path / "ccswitch-flows.1").read_text()
    assert flows.startswith(".TH") and r"\fB\-\-wide\fP" in flows and "Every column" in flows
    daemon = (tmp_path / "ccswitchd.8").read_text()
    assert '.TH CCSWITCHD "8"' in daemon and r"\-\-check\-config" in daemon


def test_stale_names_a_changed_page(tmp_path: Path) -> None:
    generate(tmp_path)
    (tmp_path / "ccswitch-top.1").write_text(".TH OLD\n")
    (tmp_path / "ccswitch-gone.1").write_text(".TH GONE\n")
    assert stale(tmp_path) == ["ccswitch-gone.1", "ccswitch-top.1"]


def test_daemon_install_places_man_pages_idempotently(tmp_path: Path) -> None:
    first = install(tmp_path, install_paths=[])
    man1, man8 = tmp_path / MAN_DST / "man1", tmp_path / MAN_DST / "man8"
    assert (man1 / "ccswitch.1").read_text() == (MAN_DIR / "ccswitch.1").read_text()
    assert (man8 / "ccswitchd.8").is_file() and not (man1 / "ccswitchd.8").exists()
    assert len(list(man1.glob("*.1"))) == len(list(MAN_DIR.glob("*.1")))
    assert any(line.startswith("man pages") and "installed or updated" in line for line in first)
    assert any(line.startswith("man pages") and "up to date" in line for line in install(tmp_path, install_paths=[]))
    if shutil.which("man") is None:
        pytest.skip("man(1) is not installed: rendering not checked")
    text = subprocess.run(["man", "-l", str(man1 / "ccswitch-top.1")], capture_output=True, text=True,
                          env={"MANWIDTH": "200", "PATH": "/usr/bin:/bin"}).stdout  # wide: no hyphenation
    assert "q or Ctrl-C quits" in text, text
