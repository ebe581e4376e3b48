"""A scenario's [daemon] table -> ccswitchd's config (keys of daemon/config.py).

Part of the scenario contract: the parser checks a [daemon] table with the
daemon's own validator (:func:`check_settings`), and the runner writes
:func:`daemon_config` as each client's ``ccswitchd.toml`` (:func:`toml_text`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from .model import DaemonSettings, Flow


def daemon_config(settings: DaemonSettings, flows: Sequence[Flow]) -> dict[str, Any]:
    """The ccswitchd config (keys of daemon/config.py) for one client's *flows*.

    The daemon manages only the iperf3 data flows (their local ports; the
    iperf3 control connections go to the same server port) and logs every
    decision, also the keeps, so a run can be explained afterwards.
    """
    policy: dict[str, Any] = {"kind": settings.policy}
    if settings.policy == "static":
        own = dict(settings.cca_by_client).get(flows[0].client) if flows else None
        policy["static_cca"] = own or settings.cca
    if settings.policy_file is not None:
        policy["file"] = str(settings.policy_file)
    if (r := settings.remote) is not None and r.server:  # the runner has started the server
        policy.update(remote=r.server, remote_key=str(r.key_file), remote_deadline_s=r.effective_deadline_ms / 1000,
                      remote_l4s=r.l4s, remote_joint=r.joint)
    cfg: dict[str, Any] = {
        "daemon": {"tick_s": settings.tick_s, "inherit": settings.inherit, "watchdog": False},
        "policy": policy,
        "flows": {"local_ports": sorted(f.cport for f in flows)},
        "log": {"all_decisions": True},
    }
    if settings.guard:
        cfg["guard"] = dict(settings.guard)
    return cfg


def check_settings(settings: DaemonSettings) -> list[str]:
    """Problems the daemon's own validator (daemon/config.py) finds in the config of *settings*."""
    try:
        from ccswitch.daemon.config import ConfigError, parse_config
    except ImportError:  # a daemon without a config module: it checks at start
        return []
    try:
        parse_config(daemon_config(settings, []))
    except ConfigError as e:
        return list(e.problems)
    return []


def effective_guard(settings: DaemonSettings) -> dict[str, Any] | None:
    """The `[guard]` table the daemons of *settings* run with: the daemon's defaults plus overrides.

    None when the daemon's config module is not importable (then only the overrides are known).
    """
    try:
        from ccswitch.daemon.config import parse_config
    except ImportError:
        return None
    return dict(parse_config(daemon_config(settings, [])).values["guard"])


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a JSON string is a valid TOML basic string
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {type(v).__name__} {v!r} as a TOML value")


def toml_text(cfg: Mapping[str, Any], header: str = "") -> str:
    """Top-level scalars, then one ``[table]`` per dict (one level, as the config needs)."""
    lines = [f"# {h}" for h in header.splitlines()]
    for k, v in cfg.items():
        if not isinstance(v, Mapping):
            lines.append(f"{k} = {_toml_value(v)}")
    for k, v in cfg.items():
        if isinstance(v, Mapping):
            lines += ["", f"[{k}]", *(f"{kk} = {_toml_value(vv)}" for kk, vv in v.items())]
    return "\n".join(lines) + "\n"


