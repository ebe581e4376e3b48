"""`ccswitch daemon install` / `ccswitchd --install`: place the systemd unit and the default config.

Idempotent: the unit (daemon/ccswitchd.service with ExecStart pointing at
this installation's ccswitchd) is written when missing or different; the
config (daemon/ccswitch.toml, the schema's defaults) only when missing.
A config that differs from the default is the administrator's and is never
overwritten; a previous default is left as it is too.  Runs
`systemctl daemon-reload` when systemd is the init system (and --root is /).
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
CONFIG_DST = Path("etc/ccswitch/ccswitch.toml")


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


def install(root: Path = Path("/")) -> list[str]:
    out = []
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
    if root == Path("/") and Path("/run/systemd/system").is_dir():
        subprocess.run(["systemctl", "daemon-reload"], check=False)
        out.append("systemctl daemon-reload: done; start with `systemctl enable --now ccswitchd`")
    else:
        out.append("systemd is not the init system here (or --root is set): no daemon-reload")
    return out
