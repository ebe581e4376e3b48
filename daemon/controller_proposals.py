"""The Controller's proposals beyond the policy, made at each decision: exploration of CCAs the policy
cannot score (explore.py) and starvation escapes off a loss-based CCA (escape.py).  The guard judges
them like the policy's choices (Guard.explore).

A mixin of controller.Controller (explorer, escape, guard, decider).
"""

from __future__ import annotations

import numpy as np

from ccswitch.daemon.escape import LOSS_BASED
from ccswitch.daemon.explore import Proposal
from ccswitch.daemon.flowindex import Ccas
from ccswitch.daemon.unfairness import Fairness
from ccswitch.frame import FlowFrame


class ControllerProposals:
    def _explore(self, managed_rows: np.ndarray, ids: np.ndarray, ccas: Ccas, values: np.ndarray,
                 keep_cols: list[int], fair: Fairness, reverting: set[int], now: float) -> dict[int, Proposal]:
        """Exploration proposals (explore.py) for managed flows with an unscored allowed CCA or a round on."""
        ex = self.explorer
        if ex is None or not keep_cols or not len(managed_rows):
            return {}
        act = ex.active
        look = np.isnan(values[np.ix_(managed_rows, keep_cols)]).any(axis=1)
        if act:
            look |= np.isin(ids[managed_rows], np.fromiter(act, np.uint64, len(act)))
        acts = self.decider.actions
        out: dict[int, Proposal] = {}
        for i in managed_rows[look].tolist():
            fid = int(ids[i])
            if fid in reverting:
                continue
            fg = self.guard.flows[fid]
            sc = {acts[j]: float(values[i, j]) for j in keep_cols}
            p = ex.propose(fid, ccas[i], sc, float(fair.thratio[i]), [a for a, t in fg.holdoff.items() if t > now])
            if p is not None:
                out[fid] = p
        return out

    def _escapes(self, agg: FlowFrame, managed_rows: np.ndarray, mslots: np.ndarray, ccas: Ccas,
                 allowed: list[str], reverting: set[int], now: float) -> dict[int, Proposal]:
        """Starvation-escape proposals (escape.py) for managed flows stuck on a loss-based CCA."""
        esc = self.escape
        assert esc is not None
        if not len(managed_rows) or esc.cfg.to not in allowed:
            return {}
        codes, names = ccas.codes, ccas.names
        lb_codes = np.array([n in LOSS_BASED for n in names], dtype=bool)
        loss = agg.column("loss_rate")[managed_rows].astype(np.float64)
        cwnd = agg.column("cwnd_segs")[managed_rows].astype(np.float64)
        rr = agg.column("rtt_ratio")[managed_rows].astype(np.float64)
        due = esc.update(mslots, lb_codes[codes[managed_rows]], loss, cwnd, now, rr)
        ids = agg.column("flow_id")
        out: dict[int, Proposal] = {}
        for k in np.flatnonzero(due).tolist():
            fid = int(ids[managed_rows[k]])
            if fid not in reverting:
                out[fid] = Proposal("escape", esc.cfg.to, esc.reason(float(loss[k]), float(cwnd[k]),
                                                                     float(esc.since[mslots[k]]), now))
        return out
