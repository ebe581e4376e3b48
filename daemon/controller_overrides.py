"""The Controller's switches from outside the policy: manual overrides through the control socket (switch
at once and pin; "auto" releases the pin) and the stop actions on SIGTERM (stop.restore, stop.pcc_fallback).

A mixin of controller.Controller (dp, guard, history, stats, recorder, decider, inherit, last_table,
available, _log_decision, _row_of, save_state).
"""

from __future__ import annotations

import logging
from typing import Any


class ControllerOverrides:
    # -------------------------------------------------------------- manual
    def manual_switch(self, flow: int, cca: str, inherit: str | None = None) -> dict[str, Any]:
        """Switch and pin (cca == "auto": release the pin).  Raises ValueError with a clear message."""
        row = self._row_of(flow)
        if cca == "auto":
            if not self.guard.unpin(flow):
                raise ValueError(f"flow {flow} is not pinned")
            self._dirty = True
            self.save_state()
            rec = {"ts": self.clock(), "flow": flow, "from": row["cca"] if row else "", "to": "auto",
                   "action": "unpin", "reason": "manual: pin released", "q": {}, "verdict": "applied",
                   "policy": self.decider.kind}
            self._log_decision(rec, logging.INFO)
            self.recorder.flush()
            return {"flow_id": flow, "ok": True, "pinned": None}
        res = self.dp.switch_many([(flow, cca, inherit or self.inherit)])[0]
        if not res.ok:
            raise ValueError(res.error or f"switching flow {flow} to {cca} failed")
        self.guard.pin(flow, cca, res.cca_before)
        self.guard.applied(flow, res.cca_before, cca, "manual")
        self.stats.manual += 1
        now = self.clock()
        self.history.append({"ts": now, "flow": flow, "from": res.cca_before, "to": res.cca_after, "kind": "manual",
                             "reason": "manual override (pinned)", "verdict": "-"})
        rec = {"ts": now, "flow": flow, "from": res.cca_before, "to": res.cca_after, "action": "manual",
               "reason": "manual override: pinned until `ccswitch switch FLOW auto`", "q": {}, "verdict": "applied",
               "policy": self.decider.kind}
        self._log_decision(rec, logging.INFO)
        self.recorder.flush()
        self._dirty = True
        self.save_state()
        return {**res.as_dict(), "pinned": cca}

    # --------------------------------------------------------------- stop
    def stop_actions(self, pcc_fallback: str, own_pcc: bool) -> list[dict[str, Any]]:
        """SIGTERM: restore changed flows (stop.restore) and move sockets off our own PCC (stop.pcc_fallback)."""
        t = self.last_table
        if t is None or not t.num_rows:
            return []
        host = set(self.available())
        reqs: dict[int, tuple[str, str]] = {}
        ccas = dict(zip(t.column("flow_id").tolist(), t.column("cca").tolist(), strict=True))
        if self.cfg.stop["restore"]:
            for fid, fg in self.guard.flows.items():
                cur = ccas.get(fid)
                if cur and fg.changed_by_us and fg.original != cur and fg.original in host:
                    reqs[fid] = (fg.original, "restore")
        if pcc_fallback and own_pcc:
            for fid, cur in ccas.items():
                target = reqs.get(fid, (cur, ""))[0]
                if target == "pcc":
                    reqs[fid] = (pcc_fallback, "pcc-fallback")
        if not reqs:
            return []
        items = list(reqs.items())
        results = self.dp.switch_many([(fid, to, "limited") for fid, (to, _) in items])
        out = []
        for (fid, (to, why)), res in zip(items, results, strict=True):
            rec = {"ts": self.clock(), "flow": fid, "from": res.cca_before, "to": to, "action": why,
                   "reason": f"stop: {why}", "q": {}, "verdict": "applied" if res.ok else f"failed: {res.error}",
                   "policy": self.decider.kind}
            self._log_decision(rec, logging.INFO)
            out.append(rec)
        self.recorder.flush()
        return out
