"""The daemon's deciders: a score per CCA for every flow, batched.

* ``dqn``       The shipped policy file (models/policy.py, numpy only): the
                observation of envs/features.py's ObservationBuilder (the
                features the DQN was trained on), Q-values in one forward pass
                over all flows.  Scores = Q-values.
* ``heuristic`` Paper 002's evaluation function (envs/reward.py eval_scores:
                70 % throughput, 20 % latency, 10 % loss, each relative to
                the best candidate).  The function needs each CCA's interval;
                live, a flow only shows the one it runs, so each candidate is
                scored on the flow's own most recent interval under that CCA
                (within policy.heuristic_memory_s), else on the mean of the
                active flows of the same path running it now, else it is unscored
                (NaN: the guard does not consider it).  Exploration
                (explore.py, policy.explore) measures the unscored ones: it
                tries each for an evaluation window, then picks by score.
* ``static``    Score 1 for policy.static_cca, 0 for the others.
* ``observe``   Decides with policy.observe_with; the controller never switches.

Every decider takes the interval's FlowFrame (ccswitch/frame.py; a pyarrow.Table
is converted) and only scores the CCAs it is given as allowed (policy actions ∩
flows.ccas ∩ the host's tcp_available_congestion_control); others are NaN.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ccswitch.daemon.flowindex import FlowIndex
from ccswitch.daemon.observations import LiveObservations
from ccswitch.envs.features import ACTIONS, BASE_COLUMNS, feature_names, is_active
from ccswitch.envs.reward import EVAL_WEIGHTS
from ccswitch.frame import FlowFrame, as_frame
from ccswitch.models.policy import DEFAULT_POLICY, Policy, PolicyError, load_policy

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger("ccswitchd")


@dataclass
class Scores:
    ids: np.ndarray  # uint64 flow ids, aligned with rows of the input table
    values: np.ndarray  # float [N, A] (NaN = unscored)
    features: np.ndarray | None = None  # normalised observations [N, D] (dqn)
    extra: dict[str, Any] = field(default_factory=dict)


class Decider:
    kind = ""
    actions: tuple[str, ...] = ACTIONS
    interval_s = 1.0  # default decision interval
    explores = False  # unscored CCAs (NaN) are measured by trying them (explore.py)

    def scores(self, table: FlowFrame | pa.Table, group: np.ndarray, now: float,
               managed: np.ndarray | None = None) -> Scores:
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "actions": list(self.actions)}

    def reset(self) -> None:
        pass


class DqnDecider(Decider):
    kind = "dqn"

    def __init__(self, policy: Policy):
        self.policy = policy
        self.actions = tuple(policy.actions)
        self.interval_s = float(policy.interval_s)
        self.reset()
        policy.q_values(np.zeros((2, policy.n_features), np.float32))  # BLAS set-up before the first tick

    def reset(self) -> None:
        self.builder = LiveObservations(self.policy.normalisation, window=self.policy.window,
                                        actions=self.policy.actions)

    def scores(self, table: FlowFrame | pa.Table, group: np.ndarray, now: float,
               managed: np.ndarray | None = None) -> Scores:
        table = as_frame(table)
        cols = {c: table.column(c) for c in (*BASE_COLUMNS, "flow_id", "sndq_bytes")}
        cols["netns_cookie"] = group
        ids, obs = self.builder.update(cols, *table.codes("cca"))
        if getattr(self.policy, "joint", False):  # policy.remote_joint: one decision per path, across clients
            from ccswitch.remote.joint import path_keys

            inv, keys = table.codes("dst")
            paths = path_keys(keys)[inv] if len(keys) else np.zeros(len(ids), np.uint64)
            if managed is not None:  # flows the daemon does not manage (iperf3's control connection,
                paths = np.where(managed, paths, np.uint64(0))  # ...) get their own Q-values: NO_PATH
            q = self.policy.q_values(obs, np.asarray(ids, dtype=np.uint64), paths)
        else:
            q = self.policy.q_values(obs)
        return Scores(ids, q.astype(np.float64), obs)

    def describe(self) -> dict[str, Any]:
        p = self.policy
        out = {"kind": self.kind, "actions": list(p.actions), "file": str(p.path), "checksum": p.checksum,
               "window": p.window, "interval_s": p.interval_s, "features": list(p.feature_names),
               "n_features": p.n_features, "activation": p.activation,
               "layers": [list(k.shape) for k in p.kernels],
               "normalisation": p.normalisation.as_dict(), "training": p.training,
               "evaluation": p.evaluation}
        if hasattr(p, "client"):  # policy.remote: the server and how many rows it answered
            out["remote"] = p.describe()
        return out


class HeuristicDecider(Decider):
    kind = "heuristic"
    explores = True

    def __init__(self, actions: Sequence[str] = ACTIONS, memory_s: float = 30.0):
        self.actions = tuple(actions)
        self.memory_s = memory_s
        self.reset()

    def reset(self) -> None:
        self._index = FlowIndex()
        self._mem = np.full((64, len(self.actions), 4), np.nan)  # thr Mb/s, rtt ms, loss, time

    def _slots(self, ids: np.ndarray) -> np.ndarray:
        slots, new = self._index.slots_for(ids)
        if self._index.size > len(self._mem):
            grow = max(self._index.size, 2 * len(self._mem)) - len(self._mem)
            self._mem = np.concatenate([self._mem, np.full((grow, *self._mem.shape[1:]), np.nan)])
        self._mem[slots[new]] = np.nan  # a reused slot starts empty
        return slots

    def forget(self, alive: set[int]) -> None:
        if len(self._index) > 2 * max(len(alive), 32):  # drop the memories of closed flows
            self._index.retain(np.fromiter(alive, np.uint64, len(alive)))

    def scores(self, table: FlowFrame | pa.Table, group: np.ndarray, now: float,
               managed: np.ndarray | None = None) -> Scores:
        table = as_frame(table)
        n, a = table.num_rows, len(self.actions)
        ids = table.column("flow_id")
        slots = self._slots(ids)
        codes, values = table.codes("cca")
        lut = np.array([self.actions.index(v) if v in self.actions else -1 for v in values] or [-1], dtype=np.int64)
        cca = lut[codes] if n else np.empty(0, dtype=np.int64)
        thr = np.nan_to_num(table.column("throughput_bps"), nan=0.0) / 1e6
        rtt = table.column("rtt_us") / 1e3
        loss = np.nan_to_num(table.column("loss_rate"), nan=0.0)
        known = cca >= 0
        self._mem[slots[known], cca[known]] = np.stack([thr, rtt, loss, np.full(n, now)], axis=1)[known]
        mem = self._mem[slots].copy()  # [N, A, 4]
        stale = ~(now - mem[..., 3] <= self.memory_s)
        mem[stale] = np.nan
        # path-level fallback: the mean over active flows of the same group running each CCA now (an
        # idle connection, e.g. iperf3's control connection, says nothing about what its CCA achieves)
        active = is_active(table.column("throughput_bps"), table.column("sndq_bytes"))
        for j in range(a):
            on = known & (cca == j) & active
            if not on.any():
                continue
            g = np.bincount(group[on], minlength=group.max() + 1 if n else 0)
            miss = np.isnan(mem[:, j, 0])
            for k, v in enumerate((thr, rtt, loss)):
                s = np.bincount(group[on], weights=np.nan_to_num(v[on], nan=0.0), minlength=len(g))
                with np.errstate(invalid="ignore", divide="ignore"):
                    mean = np.where(g > 0, s / np.maximum(g, 1), np.nan)[group]
                mem[miss, j, k] = mean[miss]
        return Scores(ids, eval_scores_batch(mem[..., 0], mem[..., 1], mem[..., 2]))

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "actions": list(self.actions), "weights": dict(zip(
            ("throughput", "latency", "loss"), EVAL_WEIGHTS, strict=True)), "memory_s": self.memory_s}


def eval_scores_batch(thr: np.ndarray, rtt: np.ndarray, loss: np.ndarray,
                      weights: Sequence[float] = EVAL_WEIGHTS) -> np.ndarray:
    """envs.reward.eval_scores for every row of [N, A] arrays; NaN candidates score NaN."""
    ok = ~(np.isnan(thr) | np.isnan(loss))
    t_ = np.where(ok, thr, -np.inf)
    r_ = np.maximum(np.where(ok & ~np.isnan(rtt), rtt, np.inf), 1.0)
    l_ = np.where(ok, loss, np.inf)
    with np.errstate(invalid="ignore", divide="ignore"):
        tmax = np.max(t_, axis=1, keepdims=True)
        t = np.where(tmax > 0, t_ / tmax, 1.0)
        r = np.min(r_, axis=1, keepdims=True) / r_
        lfin = np.where(np.isfinite(l_), l_, -np.inf)
        lmax = np.max(lfin, axis=1, keepdims=True)
        lo = np.where(lmax > 0, 1.0 - l_ / lmax, 1.0)
    s = weights[0] * t + weights[1] * r + weights[2] * lo
    return np.where(ok, s, np.nan)


class StaticDecider(Decider):
    kind = "static"
    interval_s = 0.0

    def __init__(self, cca: str, actions: Sequence[str] = ACTIONS):
        self.cca = cca
        self.actions = tuple(dict.fromkeys([*actions, cca]))

    def scores(self, table: FlowFrame | pa.Table, group: np.ndarray, now: float,
               managed: np.ndarray | None = None) -> Scores:
        table = as_frame(table)
        v = np.zeros((table.num_rows, len(self.actions)))
        v[:, self.actions.index(self.cca)] = 1.0
        return Scores(table.column("flow_id"), v)

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "actions": list(self.actions), "cca": self.cca}


class ObserveDecider(Decider):
    kind = "observe"

    def __init__(self, inner: Decider):
        self.inner = inner
        self.actions = inner.actions
        self.interval_s = inner.interval_s

    def scores(self, table: FlowFrame | pa.Table, group: np.ndarray, now: float,
               managed: np.ndarray | None = None) -> Scores:
        return self.inner.scores(table, group, now, managed)

    def reset(self) -> None:
        self.inner.reset()

    def describe(self) -> dict[str, Any]:
        return {**self.inner.describe(), "kind": "observe", "decides_with": self.inner.kind}


def policy_path(cfg_file: str) -> Path:
    return Path(cfg_file) if cfg_file else DEFAULT_POLICY


def build_decider(policy_cfg: dict[str, Any], *, kind: str | None = None) -> tuple[Decider, str | None]:
    """The configured decider; (decider, warning) -- the warning says when the fallback replaced it.

    Raises PolicyError naming the file when the DQN's file is missing or
    corrupt and no policy.fallback is configured.
    """
    kind = kind or policy_cfg["kind"]
    memory = float(policy_cfg["heuristic_memory_s"])
    if kind == "static":
        return StaticDecider(policy_cfg["static_cca"]), None
    if kind == "heuristic":
        return HeuristicDecider(memory_s=memory), None
    if kind == "observe" and policy_cfg["observe_with"] == "heuristic":
        return ObserveDecider(HeuristicDecider(memory_s=memory)), None
    path = policy_path(policy_cfg["file"])
    try:
        policy = load_policy(path)
    except PolicyError as e:
        fb = policy_cfg["fallback"]
        if not fb:
            raise PolicyError(f"{e}; fix or replace the policy file, or set policy.fallback "
                              "(\"heuristic\", \"static\" or \"observe\") to start without it") from None
        fb_kind = "observe" if fb == "observe" else fb
        if fb_kind == "observe":
            dec: Decider = ObserveDecider(HeuristicDecider(memory_s=memory))
        else:
            dec, _ = build_decider(policy_cfg, kind=fb_kind)
        return dec, f"policy file unusable ({e}); running the fallback policy {fb!r}"
    if policy_cfg.get("remote"):
        policy = _remote(policy, policy_cfg)
    dqn = DqnDecider(policy)
    return (ObserveDecider(dqn) if kind == "observe" else dqn), None


def remote_policy(decider: Decider) -> Any | None:
    """The decider's RemotePolicy (policy.remote: it holds the client and its counters), else None."""
    inner = getattr(decider, "inner", decider)
    policy = getattr(inner, "policy", None)
    return policy if getattr(policy, "client", None) is not None else None


def remote_counters(decider: Decider) -> dict[str, Any]:
    """policy.remote's counters (rows answered remotely and locally, fallbacks by reason, answer time
    p50/p99 in ms) as flat log fields; {} for a decider without a policy server."""
    policy = remote_policy(decider)
    if policy is None:
        return {}
    d = policy.describe()
    return {"remote_rows": d["remote_rows"], "remote_local_rows": d["local_rows"],
            "remote_fallbacks": sum(d["fallbacks"].values()),
            **{f"remote_fallbacks_{k}": v for k, v in sorted(d["fallbacks"].items())},
            "remote_answer_ms_p50": d["answer_ms_p50"], "remote_answer_ms_p99": d["answer_ms_p99"]}


def close_decider(decider: Decider) -> None:
    """Release what a decider holds outside the process (policy.remote's UDP socket); others hold nothing."""
    inner = getattr(decider, "inner", decider)
    client = getattr(getattr(inner, "policy", None), "client", None)
    if client is not None:
        client.close()


def _remote(policy: Policy, policy_cfg: dict[str, Any]) -> Any:
    """The policy with its forward pass on the policy server of policy.remote (ccswitch/remote/)."""
    from ccswitch.remote.client import L4S_TOS, PolicyClient
    from ccswitch.remote.protocol import load_key
    from ccswitch.remote.remote_policy import RemotePolicy
    from ccswitch.remote.server import parse_hostport

    try:
        server = parse_hostport(policy_cfg["remote"])
        key = load_key(policy_cfg["remote_key"])
    except ValueError as e:
        raise PolicyError(f"policy.remote: {e}") from None
    client = PolicyClient(server, key, deadline_s=float(policy_cfg["remote_deadline_s"]),
                          tos=L4S_TOS if policy_cfg["remote_l4s"] else 0)
    return RemotePolicy(policy, client, joint=bool(policy_cfg["remote_joint"]))


def explain_features(policy: Policy, obs: np.ndarray) -> dict[str, float]:
    return {n: float(v) for n, v in zip(policy.feature_names, obs, strict=True)}


def feature_list(window: int, actions: Sequence[str]) -> list[str]:
    return feature_names(window, actions)
