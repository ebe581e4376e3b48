"""`ccswitch policy explain --state k=v,...`: the DQN's view of a hypothetical steady state.

The state describes one flow whose last WINDOW intervals all looked the
same; keys (units in the names, defaults in STATE_KEYS):

    throughput_mbps  rtt_ms  min_rtt_ms  loss  jitter_ms  sending_rate_mbps
    cca              others (competing active flows on the path)
    share            (this flow's share of the path's throughput, 0..1)
    jain             (Jain's index over the path's flows, 0..1)

It is turned into FlowSample columns, then into the observation with the
same functions as live flows (envs/features.py: base_features, assemble),
so the Q-values are exactly what the daemon would compute.  Works without
a daemon: only the policy file is needed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ccswitch.envs.competition import MAX_OTHERS
from ccswitch.envs.features import CONTEXT_FEATURES, assemble, base_features
from ccswitch.models.policy import Policy

STATE_KEYS: dict[str, tuple[object, str]] = {
    "throughput_mbps": (10.0, "throughput incl. headers, Mbit/s"),
    "rtt_ms": (20.0, "smoothed RTT, ms"),
    "min_rtt_ms": (0.0, "minimum RTT, ms (0 = rtt_ms)"),
    "loss": (0.0, "retransmitted / sent segments, 0..1"),
    "jitter_ms": (1.0, "RTT jitter, ms"),
    "sending_rate_mbps": (0.0, "sending rate, Mbit/s (0 = throughput_mbps)"),
    "cca": ("cubic", "the flow's current algorithm"),
    "others": (1, "other active flows on the same path"),
    "share": (-1.0, "this flow's share of the path's throughput (negative = 1 / (others + 1))"),
    "jain": (1.0, "Jain's index over the path's flows"),
}


def parse_state(text: str) -> dict[str, Any]:
    """'throughput_mbps=5,rtt_ms=40,cca=bbr' -> typed dict (ValueError names the bad key)."""
    raw: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        k, sep, v = part.partition("=")
        if not sep:
            raise ValueError(f"--state: {part!r} is not KEY=VALUE")
        raw[k.strip()] = v.strip()
    return validate_state(raw, where="--state")


STATE_RANGES: dict[str, tuple[float, float]] = {
    "throughput_mbps": (0.0, 1e6), "rtt_ms": (1e-3, 1e6), "min_rtt_ms": (0.0, 1e6), "loss": (0.0, 1.0),
    "jitter_ms": (0.0, 1e6), "sending_rate_mbps": (0.0, 1e6), "others": (0, 1e6), "share": (-1.0, 1.0),
    "jain": (0.0, 1.0),
}
"""Accepted values per numeric key (inclusive).  rtt_ms must be positive: the RTT ratio divides by it."""


def validate_state(state: Mapping[str, Any], where: str = "state") -> dict[str, Any]:
    """A hypothetical state from the CLI or the control socket -> typed dict; ValueError names the bad key."""
    out: dict[str, Any] = {}
    for k, v in state.items():
        if k not in STATE_KEYS:
            raise ValueError(f"{where}: unknown key {k!r} (known: {', '.join(STATE_KEYS)})")
        default = STATE_KEYS[k][0]
        if isinstance(default, str):
            if not isinstance(v, str):
                raise ValueError(f"{where}: {k} must be a string, got {v!r}")
            out[k] = v
            continue
        if isinstance(v, bool) or not isinstance(v, int | float | str):
            raise ValueError(f"{where}: {k} must be a number, got {v!r}")
        try:
            x = float(v)
        except ValueError:
            raise ValueError(f"{where}: {k} must be a number, got {v!r}") from None
        lo, hi = STATE_RANGES[k]
        if not lo <= x <= hi:  # also refuses NaN
            raise ValueError(f"{where}: {k} = {v!r} is out of range; give a value in [{lo:g}, {hi:g}]")
        out[k] = int(x) if isinstance(default, int) else x
    return out


def observation(policy: Policy, state: Mapping[str, Any]) -> np.ndarray:
    s = {k: v[0] for k, v in STATE_KEYS.items()} | validate_state(state)
    thr = float(s["throughput_mbps"]) * 1e6
    rtt = float(s["rtt_ms"]) * 1e3
    min_rtt = float(s["min_rtt_ms"]) * 1e3 or rtt
    snd = float(s["sending_rate_mbps"]) * 1e6 or thr
    cols = {"throughput_bps": np.array([thr]), "rtt_us": np.array([rtt]), "rtt_ratio": np.array([rtt / min_rtt]),
            "loss_rate": np.array([float(s["loss"])]), "jitter_us": np.array([float(s["jitter_ms"]) * 1e3]),
            "sending_rate_bps": np.array([snd])}
    raw = base_features(cols)  # [1, 6]
    window = np.repeat(raw[:, None, :], policy.window, axis=1)
    others = int(s["others"])
    share = float(s["share"]) if float(s["share"]) >= 0 else 1.0 / (others + 1)
    ctx = np.array([[min(others / MAX_OTHERS, 1.0), share, float(s["jain"])]])
    assert ctx.shape[1] == len(CONTEXT_FEATURES)
    idx = policy.actions.index(s["cca"]) if s["cca"] in policy.actions else -1
    return assemble(window, np.array([idx]), ctx, policy.normalisation, len(policy.actions))[0]


def explain_state(policy: Policy, state: Mapping[str, Any]) -> dict[str, Any]:
    obs = observation(policy, state)
    q = policy.q_values(obs)
    cca = str(dict(state).get("cca", STATE_KEYS["cca"][0]))
    return {"state": dict(state), "cca": cca, "q": {a: float(q[i]) for i, a in enumerate(policy.actions)},
            "best": policy.actions[int(np.argmax(q))],
            "features": {n: float(v) for n, v in zip(policy.feature_names, obs, strict=True)}}
