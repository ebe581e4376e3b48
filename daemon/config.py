"""ccswitchd's configuration: the one definition of every key, its default and its meaning.

The file is TOML (default /etc/ccswitch/ccswitch.toml), one table per
section below.  Every key is optional; a missing file means all defaults.
:func:`load_config` validates the whole file and raises :class:`ConfigError`
carrying one line per problem, each naming the key (``guard.min_dwell_s:
must be >= 0, got -1``), so ``ccswitchd --check-config`` can print them all.
The shipped default file (daemon/ccswitch.toml) is :func:`render_default`'s
output; a test keeps the two identical.
"""

from __future__ import annotations

import ipaddress
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_PATH = Path("/etc/ccswitch/ccswitch.toml")
POLICY_KINDS = ("dqn", "heuristic", "static", "observe")
FALLBACK_KINDS = ("", "heuristic", "static", "observe")
OBSERVE_WITH = ("dqn", "heuristic")
INHERIT = ("limited", "full")
GROUP_BY = ("dst", "host")
LOG_FORMATS = ("logfmt", "json")
LOG_LEVELS = ("debug", "info", "warning", "error")


class ConfigError(ValueError):
    """One or more problems in a config file; ``problems`` holds one line each."""

    def __init__(self, problems: list[str], path: Path | None = None):
        self.problems = problems
        self.path = path
        where = f"{path}: " if path else ""
        super().__init__("; ".join(where + p for p in problems))


@dataclass(frozen=True)
class Key:
    section: str
    name: str
    default: Any
    doc: str
    check: Callable[[Any], str | None] | None = None

    @property
    def dotted(self) -> str:
        return f"{self.section}.{self.name}"


def _ge(lo: float) -> Callable[[Any], str | None]:
    return lambda v: None if v >= lo else f"must be >= {lo:g}, got {v}"


def _gt(lo: float) -> Callable[[Any], str | None]:
    return lambda v: None if v > lo else f"must be > {lo:g}, got {v}"


def _one_of(choices: tuple[str, ...]) -> Callable[[Any], str | None]:
    return lambda v: None if v in choices else f"must be one of {', '.join(repr(c) for c in choices)}, got {v!r}"


def _ports(v: list[Any]) -> str | None:
    bad = [p for p in v if not isinstance(p, int) or isinstance(p, bool) or not 0 < p < 65536]
    return f"ports must be integers 1..65535, got {bad[0]!r}" if bad else None


def _prefixes(v: list[Any]) -> str | None:
    for p in v:
        try:
            ipaddress.ip_network(str(p), strict=False)
        except ValueError:
            return f"{p!r} is not an address prefix (e.g. \"10.0.0.0/8\" or \"fd00::/8\")"
    return None


def _cgroups(v: list[Any]) -> str | None:
    for c in v:
        if isinstance(c, bool) or not isinstance(c, int | str) or (isinstance(c, int) and c <= 0):
            return f"cgroups entries are paths (strings) or cgroup ids (positive integers), got {c!r}"
    return None


def _strings(v: list[Any]) -> str | None:
    bad = [s for s in v if not isinstance(s, str) or not s]
    return f"entries must be non-empty strings, got {bad[0]!r}" if bad else None


def _listen(v: str) -> str | None:
    if not v:
        return None
    host, _, port = v.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        return f"must be \"HOST:PORT\" (e.g. \"127.0.0.1:9101\") or \"\" to disable, got {v!r}"
    return None


KEYS: tuple[Key, ...] = (
    # -- daemon
    Key("daemon", "tick_s", 0.2,
        "Control loop period, s (>= 0.1): watchdog, and the monitor read when daemon.sample_every_tick or --record "
        "asks for one per tick; the policy decides every policy.decision_interval_s.", _ge(0.1)),
    Key("daemon", "sample_every_tick", False,
        "Read the monitor on every tick.  false = once per decision interval, which gives the policy the same "
        "interval (the kernel counters are differenced) at a fraction of the CPU: each read walks the kernel's TCP "
        "hash table.  --record always reads every tick (its rows are tick samples)."),
    Key("daemon", "socket", "/run/ccswitch/ccswitchd.sock",
        "Control socket of the CLI (root only, mode 0600, unless daemon.read_group); `ccswitchd --socket` "
        "overrides it."),
    Key("daemon", "read_group", "",
        "Members of this group may use the read-only commands (status, flows, history, policy show/explain) "
        "through the control socket (then mode 0660, group-owned); switching and pins stay root-only.  "
        "\"\" = root only."),
    Key("daemon", "state_file", "",
        "Guard state kept across restarts (pins, last switches, hold-offs); \"\" = next to the socket (SOCKET.state)."),
    Key("daemon", "inherit", "limited", "State carried into the new algorithm on a switch: \"limited\" or \"full\".",
        _one_of(INHERIT)),
    Key("daemon", "history", 2000, "Switch and revert records kept in memory for `ccswitch history`.", _ge(1)),
    Key("daemon", "watchdog", True, "Send WATCHDOG=1 to systemd every tick when the unit sets WatchdogSec."),
    # -- policy
    Key("policy", "kind", "dqn",
        "Who decides: \"dqn\" (the trained policy file), \"heuristic\" (paper 002's evaluation function: 70 % "
        "throughput, 20 % latency, 10 % loss), \"static\" (always policy.static_cca), \"observe\" (decide with "
        "policy.observe_with and log, never switch).", _one_of(POLICY_KINDS)),
    Key("policy", "file", "", "Policy file of the DQN; \"\" = the shipped models/policy.json."),
    Key("policy", "fallback", "",
        "Used when the policy file is missing or corrupt: \"heuristic\", \"static\", \"observe\"; \"\" = refuse to "
        "start.", _one_of(FALLBACK_KINDS)),
    Key("policy", "static_cca", "cubic", "The algorithm of policy.kind = \"static\"."),
    Key("policy", "observe_with", "dqn", "What policy.kind = \"observe\" decides with: \"dqn\" or \"heuristic\".",
        _one_of(OBSERVE_WITH)),
    Key("policy", "decision_interval_s", 0.0,
        "How often the policy decides, s; 0 = the DQN's training interval (its features are built from intervals "
        "of that length), 1 s for the heuristic, every tick for static.", _ge(0.0)),
    Key("policy", "heuristic_memory_s", 30.0,
        "Heuristic: how long a flow's measurement under a CCA stays a candidate's score, s.", _gt(0.0)),
    Key("policy", "explore", True,
        "Heuristic: try each allowed CCA that has no score (no measurement within heuristic_memory_s) for an "
        "evaluation window, then keep the best-scoring one (daemon/explore.py); false = only ever compare CCAs "
        "already measured, so a lone flow keeps its first CCA.  Dwell, cap, hold-offs and pins still apply."),
    Key("policy", "explore_every_s", 60.0,
        "Heuristic: a flow starts an exploration round at most this often (its first one when it becomes "
        "managed), s.", _gt(0.0)),
    Key("policy", "explore_thratio", 0.5,
        "Heuristic: start a round early when the flow's Thratio on its path is below this (0 = never).", _ge(0.0)),
    Key("policy", "remote", "",
        "DQN only: run the policy's forward pass on a policy server (`ccswitch policy serve`, "
        "docs/remote-control.md), \"HOST:PORT\"; \"\" = locally.  The local policy file stays required: it "
        "defines the features and answers whenever the server is late, unreachable or wrong (counted in "
        "`ccswitch status`, logged once per outage).", _listen),
    Key("policy", "remote_key", "",
        "With policy.remote: the shared HMAC key file (mode 600, >= 16 bytes), the same as the server's --key."),
    Key("policy", "remote_deadline_s", 0.05,
        "With policy.remote: how long a decision waits for the server before the local policy answers, s "
        "(the tick waits that long at most).", _gt(0.0)),
    Key("policy", "remote_l4s", False,
        "With policy.remote: send the requests as L4S (DSCP 40 + ECT(1)) so an L4S bottleneck keeps their "
        "queueing delay low; false = classic."),
    Key("policy", "remote_joint", False,
        "With policy.remote: one decision per path.  The server answers every managed flow with the mean "
        "Q-values of all flows it knows to the same remote address, from every client that asks it, so the "
        "daemons of a site move a path's flows together instead of pulling apart (ccswitch/remote/joint.py; "
        "measured in docs/learning.md)."),
    # -- guard
    Key("guard", "min_dwell_s", 5.0, "No switch of a socket within this time after its last switch, s.", _ge(0.0)),
    Key("guard", "margin", 0.05,
        "Hysteresis: the new choice must beat the current CCA by this much (Q-value or heuristic score).",
        _ge(0.0)),
    Key("guard", "margin_rel", 0.1,
        "Hysteresis, relative (DQN only): the new choice must also beat the current CCA by this fraction of "
        "the current CCA's |Q-value| (Q-values vary in scale with the state; 0 = off; 0.1 chosen on the dev "
        "split, docs/learning.md).", _ge(0.0)),
    Key("guard", "consecutive", 3, "Hysteresis: ... on this many consecutive decisions.", _ge(1)),
    Key("guard", "max_switches_per_min", 4, "Cap on switches of one socket in any 60 s (reverts included).",
        _ge(1)),
    Key("guard", "eval_window_s", 0.0,
        "Post-switch evaluation: the flow's mean reward over this window after a switch is compared with the "
        "same window before it, s (0 = no evaluation: the default, measured better end to end with daemons "
        "on several clients; 3 = paper 002's step 8).", _ge(0.0)),
    Key("guard", "revert_threshold", 0.1,
        "Revert when the reward after the switch is worse by more than this (reward units: 0.1 ~ a 22 % "
        "throughput loss).", _ge(0.0)),
    Key("guard", "holdoff_s", 60.0, "After a revert, the reverted-from choice is not taken again for this long, s.",
        _ge(0.0)),
    Key("guard", "return_holdoff_s", 0.0,
        "Flap damping: after a confirmed policy switch, going back to the CCA it left is blocked this long, s "
        "(0 = off).", _ge(0.0)),
    Key("guard", "jitter_s", 3.0,
        "Desynchronisation: each flow waits a random 0..jitter_s s (drawn at first sight and at each switch) "
        "on top of min_dwell_s before a policy switch, so daemons on different clients do not move together, "
        "s (0 = off).", _ge(0.0)),
    Key("guard", "escape_loss", 0.0,
        "Starvation escape: a managed flow on CUBIC/Reno whose interval loss rate is at least this (fraction) "
        "at a cwnd of at most escape_cwnd_segs for escape_after_s moves to escape_to, the other CCAs held off "
        "for holdoff_s (a loss-limited flow cannot grow on a loss-based CCA; docs/learning.md); 0 = off.",
        lambda v: None if 0 <= v < 1 else f"must be a fraction in [0, 1), got {v}"),
    Key("guard", "escape_cwnd_segs", 10.0, "Starvation escape: the cwnd, segments, at or below which a lossy flow "
        "counts as loss-limited.", _gt(0.0)),
    Key("guard", "escape_after_s", 3.0, "Starvation escape: how long a flow stays loss-limited before it moves, s.",
        _ge(0.0)),
    Key("guard", "escape_max_rtt_ratio", float("inf"), "Starvation escape: only a flow whose RTT is below this "
        "multiple of its minimum RTT counts as loss-limited (loss without a standing queue: the medium's, not a "
        "competitor's; inf = no such gate).", _gt(1.0)),
    Key("guard", "escape_to", "bbr", "Starvation escape: the CCA a loss-limited flow moves to (one the policy "
        "may choose; a CCA that does not back off on loss).",
        lambda v: None if v and v not in ("cubic", "reno") else f"must be a CCA that does not back off on loss "
            f"(e.g. \"bbr\" or \"pcc\"), got {v!r}"),
    # -- flows
    Key("flows", "min_age_s", 2.0, "Flows younger than this are left alone, s.", _ge(0.0)),
    Key("flows", "cgroups", [],
        "Manage only sockets of these cgroups (v2 paths, absolute or relative to the hierarchy root, or numeric "
        "ids; descendants included); [] = any.", _cgroups),
    Key("flows", "comms", [],
        "Manage only sockets owned by these process names (/proc/PID/comm); [] = any.", _strings),
    Key("flows", "ports", [], "Manage only flows to these remote ports; [] = any.", _ports),
    Key("flows", "local_ports", [], "Manage only flows from these local ports; [] = any.", _ports),
    Key("flows", "dst_prefixes", [], "Manage only flows to these address prefixes; [] = any.", _prefixes),
    Key("flows", "ccas", [],
        "Algorithms the daemon may choose (intersected with the policy's actions and the host's "
        "tcp_available_congestion_control); [] = all of those.", _strings),
    # -- unfairness
    Key("unfairness", "group_by", "dst",
        "Flows that share a path, for Thratio and the competition features: \"dst\" (same remote address) or "
        "\"host\" (all flows of this namespace).", _one_of(GROUP_BY)),
    # -- stop
    Key("stop", "restore", False,
        "On SIGTERM, switch every flow the daemon changed back to the algorithm it had when first seen."),
    Key("stop", "pcc_fallback", "",
        "On SIGTERM, when this daemon registered PCC (BPF struct_ops), move sockets on it to this algorithm; "
        "\"\" = leave them on the unregistered PCC, which keeps running until they close."),
    # -- log
    Key("log", "format", "logfmt", "Structured log lines: \"logfmt\" or \"json\" (journald when under systemd).",
        _one_of(LOG_FORMATS)),
    Key("log", "level", "info", "\"debug\" logs every decision, \"info\" switches, reverts and blocked changes.",
        _one_of(LOG_LEVELS)),
    Key("log", "all_decisions", False,
        "Write every decision (also 'keep: the policy prefers the current CCA') to --decisions, not only changes "
        "and blocked changes."),
    # -- metrics
    Key("metrics", "listen", "", "Prometheus metrics on this HOST:PORT (e.g. \"127.0.0.1:9101\"); \"\" = off.",
        _listen),
)

SECTIONS: dict[str, str] = {
    "daemon": "The service itself",
    "policy": "Who decides",
    "guard": "Guard between the policy and the sockets (paper 002, Algorithm 1, steps 6-8)",
    "flows": "Which flows are managed (all filters must match)",
    "unfairness": "Unfairness monitor (paper 002, section 4: Thratio = throughput / average)",
    "stop": "What SIGTERM leaves behind",
    "log": "Logging",
    "metrics": "Prometheus metrics",
}


@dataclass(frozen=True)
class Config:
    """Validated configuration: ``cfg.get("guard.margin")`` or ``cfg.guard["margin"]``."""

    values: Mapping[str, Mapping[str, Any]]
    path: Path | None = None
    text: str = field(default="", repr=False)

    def get(self, dotted: str) -> Any:
        section, name = dotted.split(".", 1)
        return self.values[section][name]

    def __getattr__(self, section: str) -> Mapping[str, Any]:
        try:
            return self.values[section]
        except KeyError:
            raise AttributeError(section) from None

    def as_dict(self) -> dict[str, dict[str, Any]]:
        return {s: dict(v) for s, v in self.values.items()}

    def with_overrides(self, **dotted: Any) -> Config:
        vals = self.as_dict()
        for k, v in dotted.items():
            s, n = k.split("__", 1) if "__" in k else k.split(".", 1)
            vals[s][n] = v
        return Config(vals, self.path, self.text)


def _type_ok(default: Any, value: Any) -> bool:
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, float):
        return isinstance(value, int | float) and not isinstance(value, bool)
    if isinstance(default, int):
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(default, str):
        return isinstance(value, str)
    if isinstance(default, list):
        return isinstance(value, list)
    return True


def _type_name(default: Any) -> str:
    return {bool: "true or false", float: "a number", int: "an integer", str: "a string",
            list: "a list"}[type(default)]


def defaults() -> Config:
    vals: dict[str, dict[str, Any]] = {}
    for k in KEYS:
        vals.setdefault(k.section, {})[k.name] = k.default
    return Config(vals)


def parse_config(doc: Mapping[str, Any], path: Path | None = None, text: str = "") -> Config:
    """Validate a parsed TOML document; every problem is collected before raising."""
    problems: list[str] = []
    by_section: dict[str, dict[str, Key]] = {}
    for k in KEYS:
        by_section.setdefault(k.section, {})[k.name] = k
    vals = defaults().as_dict()
    for section, table in doc.items():
        if section not in by_section:
            problems.append(f"{section}: unknown section (known: {', '.join(by_section)})")
            continue
        if not isinstance(table, dict):
            problems.append(f"{section}: must be a table ([{section}])")
            continue
        for name, value in table.items():
            key = by_section[section].get(name)
            if key is None:
                problems.append(f"{section}.{name}: unknown key (known in [{section}]: "
                                f"{', '.join(by_section[section])})")
                continue
            if not _type_ok(key.default, value):
                problems.append(f"{key.dotted}: must be {_type_name(key.default)}, got {value!r}")
                continue
            if isinstance(key.default, float):
                value = float(value)
            msg = key.check(value) if key.check else None
            if msg:
                problems.append(f"{key.dotted}: {msg}")
                continue
            vals[section][name] = value
    if vals["policy"]["remote"] and not vals["policy"]["remote_key"]:
        problems.append("policy.remote_key: must name the shared key file when policy.remote is set")
    if vals["policy"]["kind"] == "static" and not vals["policy"]["static_cca"]:
        problems.append("policy.static_cca: must name an algorithm when policy.kind = \"static\"")
    if problems:
        raise ConfigError(problems, path)
    return Config(vals, path, text)


def load_config(path: str | Path | None = None, *, missing_ok: bool | None = None) -> Config:
    """Read and validate a config file.  The default path may be absent (defaults); an explicit one must exist."""
    p = Path(path) if path is not None else DEFAULT_PATH
    if missing_ok is None:
        missing_ok = path is None
    try:
        text = p.read_text()
    except FileNotFoundError:
        if missing_ok:
            return defaults()
        raise ConfigError(["no such file; create it (`ccswitch daemon install` writes the default) or pass "
                           "another --config"], p) from None
    except OSError as e:
        raise ConfigError([f"cannot read it ({e.strerror})"], p) from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError([f"not valid TOML ({e})"], p) from None
    return parse_config(doc, p, text)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, float):
        return repr(v)
    return str(v)


def render_default() -> str:
    """The default config file, every key with its documentation (daemon/ccswitch.toml)."""
    import textwrap

    out = ["# ccswitchd configuration (/etc/ccswitch/ccswitch.toml).",
           "# Every key is optional; the values below are the defaults.",
           "# Check a file with: ccswitchd --check-config --config FILE",
           "# Reload a running daemon with: systemctl reload ccswitchd (SIGHUP)."]
    section = ""
    for k in KEYS:
        if k.section != section:
            section = k.section
            out += ["", f"[{section}]", f"# {SECTIONS[section]}"]
        out += ["# " + line for line in textwrap.wrap(k.doc, 100)]
        out.append(f"{k.name} = {_toml_value(k.default)}")
    return "\n".join(out) + "\n"
