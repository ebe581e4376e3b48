"""Arms: the variants of one scenario that an experiment compares.

    static              the file without its daemon: the flows keep their initial CCA
    dqn                 ccswitchd on every managed client with the shipped DQN policy
                        (or a candidate policy file)
    heuristic           ccswitchd with paper 002's evaluation function
    daemon-static-CCA   ccswitchd with policy "static": every managed flow put on CCA
                        (what a policy that always picks CCA would reach)
    daemon-deviate-K-CCA  the same with every managed flow on CUBIC except those of the
                        K-th managed client (by client number), put on CCA (bbr or pcc):
                        one client deviating alone, for the unilateral counterfactuals of
                        the training corpus (datasets/from_matrix.py); ``daemon-deviate``
                        stands for all of them, and a scenario with fewer than K managed
                        clients has no such run
    dqn-remote[-MS]     the dqn arm with the DQN's forward pass on a policy server in the
                        server namespace ([daemon.remote]), every answer held MS ms (default
                        0): the remote decisions of issue 15
    dqn-joint[-MS]      the same with one decision per path (joint = true): every managed
                        flow gets the mean Q-values of all managed flows on its path, from
                        every client (ccswitch/remote/joint.py, issue 11's coordination)
    dqn-remote-l4s[-MS], dqn-joint-l4s[-MS]
                        the same with the requests and answers sent as L4S (l4s = true:
                        DSCP 40 + ECT(1), DualPI2's L queue), the others classic

Part of the scenario contract: an arm turns a :class:`Scenario` into another
one; the runner and the reports only see scenarios.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from .model import DaemonSettings, RemoteDecisions, Scenario

ARMS = ("static", "dqn", "heuristic", "daemon-static-cubic", "daemon-static-bbr", "daemon-static-pcc")
DEFAULT_ARMS = ("static", "dqn")
DEVIATE = "daemon-deviate"
DEVIATION_BASE = "cubic"
"""The CCA of the managed clients that do not deviate (the shipped policy's usual choice)."""
DEVIATIONS = ("bbr", "pcc")
MAX_CLIENTS = 6
"""The scenario space's most clients (testbed/scenarios/space.toml)."""
DEVIATE_ARMS = tuple(f"{DEVIATE}-{k}-{x}" for k in range(1, MAX_CLIENTS + 1) for x in DEVIATIONS)
_DEVIATE = re.compile(rf"^{DEVIATE}-([1-9]\d*)-({'|'.join(DEVIATIONS)})$")
REMOTE_ARMS = ("dqn-remote", "dqn-joint")
_REMOTE = re.compile(r"^(dqn-remote|dqn-joint)(-l4s)?(?:-(\d{1,5}))?$")
_REMOTE_FORMS = "dqn-remote[-l4s][-MS], dqn-joint[-l4s][-MS]"


def remote_arm(arm: str) -> RemoteDecisions | None:
    """The [daemon.remote] settings of a dqn-remote[-l4s][-MS] or dqn-joint[-l4s][-MS] arm, else None."""
    m = _REMOTE.match(arm)
    if not m:
        return None
    return RemoteDecisions(latency_ms=float(m.group(3) or 0), joint=m.group(1) == "dqn-joint",
                           l4s=m.group(2) is not None)


def deviation(arm: str) -> tuple[int, str] | None:
    """(K, CCA) of a daemon-deviate-K-CCA arm, else None."""
    m = _DEVIATE.match(arm)
    return (int(m.group(1)), m.group(2)) if m else None


def managed_clients(sc: Scenario) -> list[int]:
    """Clients with a bulk flow whose daemon the arms control, by number (none without a [daemon] table)."""
    if sc.daemon is None:
        return []
    return sorted({f.client for f in sc.flows if f.kind == "bulk" and sc.daemon.runs_on(f.client)})


def arm_applies(sc: Scenario, arm: str) -> bool:
    """False for a deviation of a K-th managed client *sc* does not have."""
    dev = deviation(arm)
    return dev is None or dev[0] <= len(managed_clients(sc))


def check_arms(arms: Sequence[str]) -> list[str]:
    """*arms* as given, or ValueError naming the first unknown one and the choices."""
    out: list[str] = []
    for a in (a.strip() for a in arms if a.strip()):
        if a == DEVIATE:
            out += DEVIATE_ARMS
        elif a in ARMS or deviation(a) or remote_arm(a):
            out.append(a)
        else:
            raise ValueError(f"unknown arm {a!r} (use {', '.join(ARMS)}, {DEVIATE}[-K-CCA], {_REMOTE_FORMS})")
    if not out:
        raise ValueError(f"no arm given (use {', '.join(ARMS)}, {DEVIATE}[-K-CCA], {_REMOTE_FORMS})")
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
    if dev := deviation(arm):
        clients = managed_clients(replace(sc, daemon=base))
        if dev[0] > len(clients):
            raise ValueError(f"arm {arm}: scenario {sc.name} has {len(clients)} managed clients")
        return replace(sc, daemon=replace(base, policy="static", cca=DEVIATION_BASE,
                                          cca_by_client=((clients[dev[0] - 1], dev[1]),), policy_file=None))
    if arm.startswith("daemon-static-"):
        return replace(sc, daemon=replace(base, policy="static", cca=arm.removeprefix("daemon-static-"),
                                          policy_file=None))
    if (remote := remote_arm(arm)) is not None:
        pf = policy_file.resolve() if policy_file is not None else None
        return replace(sc, daemon=replace(base, policy="dqn", cca=None, policy_file=pf, remote=remote))
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
