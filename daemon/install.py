"""`ccswitch daemon install` / `ccswitchd --install`: place the systemd unit and the default config.

Idempotent: the unit (daemon/ccswitchd.service with ExecStart pointing at
this installation's ccswitchd) and the man pages (daemon/man, to
/usr/local/share/man) are written when missing or different; the
config (daemon/ccswitch.toml, the schema's defaults) only when missing.
A config that differs from the default is the administrator's and is never
overwritten; a previous default is left as it is too.  Runs
`systemctl daemon-reload` when systemd is the init system (and --root is /).

An installation under /tmp or /var/tmp (a checkout tried out there, a CI
clone) would be invisible to the service: the unit's PrivateTmp=yes gives it
an empty /tmp.  Then a drop-in binds that directory back, read-only, and the
hardening stays; the drop-in goes again when the installation moves.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from ccswitch.daemon.config import render_default

HERE = Path(__file__).resolve().parent
UNIT_SRC = HERE / "ccswitchd.service"
UNIT_DST = Path("etc/systemd/system/ccswitchd.service")
TMP_DROPIN_DST = Path("etc/systemd/system/ccswitchd.service.d/10-installation-in-tmp.conf")
PRIVATE_TMP_DIRS = (Path("/tmp"), Path("/var/tmp"))
"""Replaced by empty directories for the service (PrivateTmp=yes in the unit)."""
CONFIG_DST = Path("etc/ccswitch/ccswitch.toml")
MAN_SRC = HERE / "man"
MAN_DST = Path("usr/local/share/man")
"""man1/ccswitch*.1 and man8/ccswitchd.8 go here (daemon/manpages.py generates them)."""


def ccswitchd_path() -> str:
    exe = Path(sys.executable).with_name("ccswitchd")
    if exe.exists():
        return str(exe)
    found = shutil.which("ccswitchd")
    if found:
        return found
    return f"{sys.executable} -m ccswitch.daemon.main"


def unit_text() -> str:
    return UNIT_SRC.read_text().replace("@CCSWITCHD@", ccswitchd_path())


def hidden_install_dirs(paths: list[Path]) -> list[Path]:
    """The top directories under /tmp or /var/tmp holding any of *paths* (what PrivateTmp hides)."""
    out: list[Path] = []
    for p in paths:
        for tmp in PRIVATE_TMP_DIRS:
            if p.is_relative_to(tmp) and p != tmp:
                top = tmp / p.relative_to(tmp).parts[0]
                if top not in out:
                    out.append(top)
    return out


def tmp_dropin_text(dirs: list[Path]) -> str:
    return ("# Written by `ccswitch daemon install`: this installation lives under a directory the\n"
            "# unit's PrivateTmp=yes replaces with an empty one; bind it back, read-only.\n"
            "[Service]\n" + "".join(f"BindReadOnlyPaths={d}\n" for d in dirs))


def _install_paths() -> list[Path]:
    """Where this installation's code lives: ccswitchd, the package, the interpreter."""
    exe = ccswitchd_path().split()[0]
    return [Path(exe).absolute(), HERE.parent, Path(sys.prefix), Path(sys.base_prefix)]


def install_man_pages(root: Path) -> str:
    """Copy the committed man pages (replacing ours, nothing else); one line saying what changed."""
    pages = sorted(MAN_SRC.glob("*.[18]"))
    if not pages:
        return f"man pages: none in {MAN_SRC} (regenerate with `python -m ccswitch.daemon.manpages`)"
    changed = 0
    for page in pages:
        dst = root / MAN_DST / f"man{page.suffix[1:]}" / page.name
        text = page.read_text()
        if dst.exists() and dst.read_text() == text:
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_text(text)
        dst.chmod(0o644)
        changed += 1
    where = root / MAN_DST
    return (f"man pages {where}: {changed} of {len(pages)} installed or updated (`man ccswitch`, `man ccswitchd`)"
            if changed else f"man pages {where}: up to date ({len(pages)})")


def install(root: Path = Path("/"), install_paths: list[Path] | None = None) -> list[str]:
    out = []
    hidden = hidden_install_dirs(install_paths if install_paths is not None else _install_paths())
    dropin = root / TMP_DROPIN_DST
    if hidden:
        text = tmp_dropin_text(hidden)
        if not (dropin.exists() and dropin.read_text() == text):
            dropin.parent.mkdir(parents=True, exist_ok=True)
            dropin.write_text(text)
            dropin.chmod(0o644)
            out.append(f"drop-in {dropin}: installed ({', '.join(map(str, hidden))} is hidden by the unit's "
                       "PrivateTmp=yes; bound back read-only)")
    elif dropin.exists():
        dropin.unlink()
        out.append(f"drop-in {dropin}: removed (the installation is no longer under /tmp or /var/tmp)")
    unit = root / UNIT_DST
    want = unit_text()
    if unit.exists() and unit.read_text() == want:
        out.append(f"unit {unit}: up to date")
    else:
        unit.parent.mkdir(parents=True, exist_ok=True)
        verb = "updated" if unit.exists() else "installed"
        unit.write_text(want)
        unit.chmod(0o644)
        out.append(f"unit {unit}: {verb}")
    cfg = root / CONFIG_DST
    default = render_default()
    if not cfg.exists():
        cfg.parent.mkdir(parents=True, exist_ok=True)
        cfg.write_text(default)
        cfg.chmod(0o644)
        out.append(f"config {cfg}: installed (defaults)")
    elif cfg.read_text() == default:
        out.append(f"config {cfg}: up to date")
    else:
        out.append(f"config {cfg}: modified by the administrator, left as it is "
                   f"(the default is {HERE / 'ccswitch.toml'})")
    out.append(install_man_pages(root))
    if root == Path("/") and Path("/run/systemd/system").is_dir():
        subprocess.run(["systemctl", "daemon-reload"], check=False)
        out.append("systemctl daemon-reload: done; start with `systemctl enable --now ccswitchd`")
    else:
        out.append("systemd is not the init system here (or --root is set): no daemon-reload")
    return out
