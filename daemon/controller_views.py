"""The Controller's queries for the control socket: status, flows, explain, a flow's last Q-values.

A mixin of controller.Controller: it reads the last monitor read (last_table), the last decision's
scores (_last_ids, _last_q, _last_obs) and fast-path sets (_last_fast, _last_margin), guard, decider,
stats and last_decision; it switches nothing and changes no flow's state.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ccswitch.daemon.unfairness import fairness


class ControllerViews:
    # ----------------------------------------------------------- queries
    def status(self) -> dict[str, Any]:
        t = self.last_table
        counts = t.value_counts("cca") if t is not None else {}
        return {"pid": os.getpid(), "uptime_s": self.clock() - self.started, "policy": _short(self.decider.describe()),
                "observe_only": self.observe_only, "tick_s": self.tick_s,
                "decision_interval_s": self.decision_interval_s, "inherit": self.inherit,
                "allowed": self.allowed(), "flows_per_cca": counts, "pinned": sum(
                    1 for f in self.guard.flows.values() if f.pin), **self.stats.as_dict(),
                "unfairness": self.last_fair.summary() if self.last_fair is not None else []}

    def flows(self) -> list[dict[str, Any]]:
        t = self.last_table
        if t is None:
            return []
        out = []
        acts = self.decider.actions
        fair = {}
        if t.num_rows:
            f = fairness(t, self.cfg.unfairness["group_by"])
            fair = dict(zip(t.column("flow_id").tolist(), f.thratio.tolist(), strict=True))
        for r in t.to_pylist():
            fid = r["flow_id"]
            q = self.last_q(fid)
            fg = self.guard.flows.get(fid)
            d = self.last_decision.get(fid)
            if fid in self._last_fast:
                d = {"action": "keep", "reason": "policy prefers the current CCA"}
            elif fid in self._last_margin:
                d = {"action": "keep", "reason": "another CCA preferred, by less than the margin"}
            out.append({**r, "q": {a: float(q[j]) for j, a in enumerate(acts)} if q is not None else None,
                        "thratio": fair.get(fid), "managed": fg is not None, "pinned": fg.pin if fg else None,
                        "last_action": d["action"] if d else None, "last_reason": d["reason"] if d else None})
        return out

    def explain_flow(self, flow: int) -> dict[str, Any]:
        row = self._row_of(flow)
        if row is None:
            raise ValueError(f"flow {flow} not found among this namespace's TCP sockets (closed, or in another "
                             "namespace); list flows with `ccswitch flows`")
        q = self.last_q(flow)
        if q is None:
            raise ValueError(f"flow {flow} has no decision yet (not managed, younger than flows.min_age_s, or "
                             "waiting for the next decision interval)")
        acts = self.decider.actions
        allowed = self.allowed()
        sc = {a: float(q[j]) for j, a in enumerate(acts) if a in allowed}
        i = self._last_row(flow)
        feats = self._last_obs[i] if self._last_obs is not None and i is not None else None
        names = getattr(getattr(self.decider, "policy", None), "feature_names", None) or getattr(
            getattr(getattr(self.decider, "inner", None), "policy", None), "feature_names", None)
        features = dict(zip(names, map(float, feats), strict=True)) if feats is not None and names else None
        return {"flow": flow, "cca": row["cca"], "q": {a: float(q[j]) for j, a in enumerate(acts)},
                "features": features, "guard": self.guard.would(flow, row["cca"], sc).as_dict(),
                "last_decision": self.last_decision.get(flow)}

    def last_q(self, flow: int) -> np.ndarray | None:
        i = self._last_row(flow)
        return self._last_q[i] if self._last_q is not None and i is not None else None

    def _row_of(self, flow: int) -> dict[str, Any] | None:
        t = self.last_table
        if t is None or not t.num_rows:
            return None
        ids = t.column("flow_id")
        hit = np.flatnonzero(ids == np.uint64(flow))
        return t.row(int(hit[0])) if len(hit) else None

    def _last_row(self, flow: int) -> int | None:
        if self._last_ids is None:
            return None
        hit = np.flatnonzero(self._last_ids == np.uint64(flow))
        return int(hit[0]) if len(hit) else None


def _short(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if k in ("kind", "actions", "file", "checksum", "decides_with", "cca",
                                                "interval_s")}
