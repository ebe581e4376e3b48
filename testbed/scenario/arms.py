"""Arms: the variants of one scenario that an experiment compares.

    static              the file without its daemon: the flows keep their initial CCA
    dqn                 ccswitchd on every managed client with the shipped DQN policy
                        (or a candidate policy file)
    heuristic           ccswitchd with paper 002's evaluation function
    daemon-static-CCA   ccswitchd with policy "static": every managed flow put on CCA
                        (what a policy that always picks CCA would reach)

Part of the scenario contract: an arm turns a :class:`Scenario` into another
one; the runner and the reports only see scenarios.
"""

from __future__ import annotations

import tomllib
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from .model import DaemonSettings, Scenario

ARMS = ("static", "dqn", "heuristic", "daemon-static-cubic", "daemon-static-bbr", "daemon-static-pcc")
DEFAULT_ARMS = ("static", "dqn")


def check_arms(arms: Sequence[str]) -> list[str]:
    """*arms* as given, or ValueError naming the first unknown one and the choices."""
    out = [a.strip() for a in arms if a.strip()]
    for a in out:
        if a not in ARMS:
            raise ValueError(f"unknown arm {a!r} (use {', '.join(ARMS)})")
    if not out:
        raise ValueError(f"no arm given (use {', '.join(ARMS)})")
    return out


def arm_scenario(sc: Scenario, arm: str, policy_file: Path | None = None,
                 guard: Sequence[tuple[str, Any]] = ()) -> Scenario:
    """*sc* for one arm: no daemon (static), or its [daemon] table with the arm's policy.

    *policy_file* replaces the dqn arm's policy (a candidate, without touching
    models/policy.json); *guard* adds or overrides [daemon] guard keys in every daemon arm."""
    if arm == "static":
        return replace(sc, daemon=None)
    base = sc.daemon or DaemonSettings()
    if guard:
        keys = {k for k, _ in guard}
        base = replace(base, guard=tuple((k, v) for k, v in base.guard if k not in keys) + tuple(guard))
    if arm.startswith("daemon-static-"):
        return replace(sc, daemon=replace(base, policy="static", cca=arm.removeprefix("daemon-static-"),
                                          policy_file=None))
    if arm == "dqn" and policy_file is not None:
        return replace(sc, daemon=replace(base, policy=arm, cca=None, policy_file=policy_file.resolve()))
    return replace(sc, daemon=replace(base, policy=arm, cca=None, policy_file=None))


def guard_setting(text: str) -> tuple[str, Any]:
    """KEY=VALUE of --guard: the value as TOML would read it (number, boolean or string)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"--guard {text!r}: expected KEY=VALUE, e.g. return_holdoff_s=20")
    try:
        parsed = tomllib.loads(f"v = {value.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        parsed = value.strip()
    return key.strip(), parsed
