"""One decision per path: the policy server's memory of every managed flow on a path (issue 11).

Why.  ccswitchd runs on each client and decides for its own flows; the daemons
on clients that share a bottleneck never talk.  The commonest coordination
failure on the generated dev split is two daemons pulling apart: one flow moves
to BBR while its neighbour stays on CUBIC (or the flow that is ahead gives way
and the starved one keeps its CCA), and the unfairness just changes sides
(docs/learning.md; the shipped policy's daemons agree on a CCA 77-92 % of the
time).  A policy server that answers every daemon of a site already sees all
their flows (docs/remote-control.md); with `policy.remote_joint = true` it
decides once per path instead of once per flow.

Rule.  A CCA_JOINT_REQ row carries the flow's features, its flow id and a path
key (:func:`path_keys`: a hash of the remote address, so flows of different
clients to the same server share it).  The server computes each row's Q-values
with the DQN as for a plain request, remembers them per (client, flow) with the
time, forgets entries older than ``horizon_s`` (flows that ended, clients that
stopped asking), and answers each row with the **mean Q-vector of every flow
remembered on its path**, frozen for an epoch of ``epoch_s``: the first request
on a path after an epoch ends computes the mean, every request within the next
``epoch_s`` gets that same vector.  Every managed flow on the path then sees the
same preference, so each daemon's guard (margin, its 3-decision hysteresis,
desynchronisation jitter) moves its flows towards the same CCA, and no two
daemons pull apart.  Why frozen: a flow's own Q-values change as soon as it
switches, and the daemons act at different moments (the guard's 0-3 s jitter),
so a mean recomputed on every request moved under them; unfrozen, the first dev
run (26 Nov, docs/learning.md) had one daemon move its flow to BBR and another
to CUBIC on the same path.  8 s covers three 1 s decisions and the jitter.  The mean
of the per-flow Q-values is a vote weighted by how strongly each flow's state
prefers each CCA; it is not the value of the joint action (the DQN was trained
on single flows), which is why it is measured end to end, not argued.

What it cannot do: see flows of hosts that do not run ccswitchd (unmanaged
competitors, whose CCA no one chooses), or tell two paths to the same address
apart.  Bounded: at most ``max_flows`` remembered (the oldest go first).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict

import numpy as np

HORIZON_S = 2.5
"""A flow's Q-values count for its path this long after its daemon last asked (its decision
interval is 1 s; a daemon that missed two decisions is taken to be gone)."""
MAX_FLOWS = 65536
EPOCH_S = 8.0
NO_PATH = 0
"""Path key of a row that is on no shared path (a flow the daemon does not manage): answered with
its own Q-values, never remembered, so idle control connections do not dilute a path's vote."""


def path_keys(dst: np.ndarray | list[str]) -> np.ndarray:
    """u64 path key of each remote address: the first 8 bytes of its BLAKE2b (the same on every client;
    never NO_PATH)."""
    cache: dict[str, int] = {}
    out = np.empty(len(dst), dtype=np.uint64)
    for i, d in enumerate(dst):
        k = cache.get(d)
        if k is None:
            k = cache[d] = int.from_bytes(hashlib.blake2b(str(d).encode(), digest_size=8).digest(), "little") or 1
        out[i] = k
    return out


class PathBoard:
    """The latest Q-values of every flow on every path, and their mean per path."""

    def __init__(self, horizon_s: float = HORIZON_S, max_flows: int = MAX_FLOWS, epoch_s: float = EPOCH_S) -> None:
        self.horizon_s = horizon_s
        self.max_flows = max_flows
        self.epoch_s = epoch_s  # 0: a fresh mean on every request
        self._flows: OrderedDict[tuple[int, int], tuple[int, np.ndarray, float]] = OrderedDict()
        self._frozen: dict[int, tuple[np.ndarray, float]] = {}  # path -> (its mean, when computed)

    def __len__(self) -> int:
        return len(self._flows)

    def record(self, client: int, flows: np.ndarray, paths: np.ndarray, q: np.ndarray, now: float) -> None:
        """Remember rows (flow, path, Q-vector) of *client* as seen at *now* (rows on NO_PATH are not)."""
        for f, p, row in zip(flows.tolist(), paths.tolist(), np.asarray(q, dtype=np.float64), strict=True):
            if p == NO_PATH:
                continue
            key = (client, f)
            self._flows.pop(key, None)
            self._flows[key] = (p, row, now)
        while len(self._flows) > self.max_flows:
            self._flows.popitem(last=False)

    def expire(self, now: float) -> None:
        """Forget flows not asked about within the horizon (the dict is in order of last update), and
        the frozen means of paths whose epoch ended."""
        self._frozen = {p: v for p, v in self._frozen.items() if now - v[1] < self.epoch_s}
        while self._flows:
            key, (_, _, t) = next(iter(self._flows.items()))
            if now - t <= self.horizon_s:
                return
            del self._flows[key]

    def means(self, paths: np.ndarray, own: np.ndarray, now: float = 0.0) -> np.ndarray:
        """The mean Q-vector over the remembered flows of each path in *paths* [N] -> [N, A], as frozen
        for the path's epoch (computed now if none runs); rows on NO_PATH (or a path with nothing
        remembered) keep their *own* Q-values."""
        out = np.array(own, dtype=np.float64, copy=True)
        frozen = {p: v for p, v in self._frozen.items() if now - v[1] < self.epoch_s}
        want = set(paths.tolist()) - set(frozen)
        sums: dict[int, np.ndarray] = {}
        counts: dict[int, int] = {}
        for p, row, _ in self._flows.values():
            if p in want:
                sums[p] = sums[p] + row if p in sums else row.copy()
                counts[p] = counts.get(p, 0) + 1
        if self.epoch_s > 0:
            for p in sums:
                self._frozen[p] = (sums[p] / counts[p], now)
        for i, p in enumerate(paths.tolist()):
            if p in frozen:
                out[i] = frozen[p][0]
            elif p in sums:
                out[i] = sums[p] / counts[p]
        return out
