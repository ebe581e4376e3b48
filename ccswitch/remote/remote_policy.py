"""A DQN policy whose forward pass runs on the policy server: the daemon side of `[policy] remote`.

`RemotePolicy(policy, client)` stands in for a loaded `Policy`
(models/policy.py) wherever the daemon uses one: every attribute is the
local policy's, except `q_values(obs)`, which sends the normalised
observation rows to the server (CCA_REQ, tagged with the policy's id so a
server running another policy refuses them) and returns its Q-values.  Rows
that do not fit one datagram go in several, each with the client's
deadline; a chunk whose answer fails is computed locally by the same policy
(the client counts and logs it), so the daemon always gets Q-values for
every row, never an exception, and at worst one deadline per chunk late.

With `joint` (ccswitchd's `policy.remote_joint`) the rows go as CCA_JOINT_REQ with
each flow's id and path key (joint.py): the server answers with the mean Q-values
of every flow it knows on that path, from every client, so the daemons of a site
move the flows of one path together.  A chunk computed locally (fallback) gets
the flow's own Q-values.

Because the observation is built locally (the daemon's LiveObservations),
only the forward pass moves: the server needs no per-flow state, and local
and remote decisions are the same function of the same input (tested).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ccswitch.remote import protocol as p
from ccswitch.remote.agents import policy_id
from ccswitch.remote.client import PolicyClient


def rows_per_datagram(n_features: int) -> int:
    """How many observation rows fit one CCA_REQ (or CCA_JOINT_REQ, 8 bytes more a row) datagram."""
    room = p.MAX_DATAGRAM - p.HEADER.size - p.TAG_LEN - p.CCA_HEAD.size
    return max(1, min(p.MAX_RECORDS, room // (16 + 4 * n_features)))


class RemotePolicy:
    def __init__(self, policy: Any, client: PolicyClient, *, joint: bool = False) -> None:
        self._policy = policy
        self.client = client
        self.joint = joint
        self.policy_id = policy_id(policy.checksum)
        self.chunk = rows_per_datagram(policy.n_features)
        self.remote_rows = 0
        self.local_rows = 0

    def __getattr__(self, name: str) -> Any:  # everything but q_values is the local policy's
        return getattr(self._policy, name)

    def q_values(self, obs: np.ndarray, flows: np.ndarray | None = None,
                 paths: np.ndarray | None = None) -> np.ndarray:
        """Q-values of the rows of *obs*; with *flows* and *paths* (joint mode) their paths' means."""
        x = np.asarray(obs, dtype=np.float32)
        single = x.ndim == 1
        x = x[None] if single else x
        if x.shape[-1] != self._policy.n_features:  # the local policy's own error
            return self._policy.q_values(x)
        parts = []
        for start in range(0, len(x), self.chunk):
            rows = x[start:start + self.chunk]
            if flows is not None and paths is not None:
                q, remote = self.client.cca(self.policy_id, flows[start:start + len(rows)], rows,
                                            self._policy.q_values, paths[start:start + len(rows)])
            else:
                q, remote = self.client.cca(self.policy_id, np.arange(start, start + len(rows), dtype=np.uint64),
                                            rows, self._policy.q_values)
            if remote:
                self.remote_rows += len(rows)
            else:
                self.local_rows += len(rows)
            parts.append(np.asarray(q, dtype=np.float32))
        out = np.concatenate(parts) if parts else np.zeros((0, len(self._policy.actions)), np.float32)
        return out[0] if single else out

    def describe(self) -> dict[str, Any]:
        """Counters for `ccswitch status` (and the daemon's "stopped" log line)."""
        rtts = np.asarray(self.client.rtts_s, dtype=np.float64) * 1000
        return {"server": f"{self.client.server[0]}:{self.client.server[1]}", "joint": self.joint,
                "remote_rows": self.remote_rows,
                "local_rows": self.local_rows, "fallbacks": dict(self.client.fallbacks),
                "answer_ms_p50": round(float(np.percentile(rtts, 50)), 2) if len(rtts) else None,
                "answer_ms_p99": round(float(np.percentile(rtts, 99)), 2) if len(rtts) else None}
