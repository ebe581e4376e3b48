"""The control loop of one tick: monitor -> features -> policy -> guard -> switch.

Every tick (daemon.tick_s):

1. read the monitor (DataPlane.sample_frame: one FlowSample row per socket
   of this namespace, as a FlowFrame of numpy columns, ccswitch/frame.py; no
   pyarrow on the decision path) and append it to --record;
2. pick the managed flows: ESTABLISHED or CLOSE_WAIT, admitted by the flow
   filters (selection.py), and at least flows.min_age_s old;
3. add the tick to the aggregator; when the decision interval is due
   (policy.decision_interval_s, by default the DQN's training interval):
   a. aggregate the ticks since the last decision (aggregate.py), so the
      features mean what they meant in training;
   b. unfairness monitor over flows sharing a path (unfairness.py): Thratio,
      Jain, the reward of each flow's interval; the groups are the DQN's
      competition groups;
   c. feed each managed flow's reward to the guard (post-switch evaluation:
      may produce reverts), then score all flows in one batch (policies.py)
      and ask the guard for each managed flow (guard.py), over the CCAs
      allowed here: the policy's actions ∩ flows.ccas ∩ the host's
      tcp_available_congestion_control (re-read every decision);
4. apply switches and reverts in one switch_many pass (not in observe-only
   mode), tell the guard, log and record every decision with its reason.

Manual overrides (`ccswitch switch` through the control socket) switch at
once and pin the flow; the guard then keeps it.  The guard state is saved
to the state file whenever it changes, so a restarted daemon neither
forgets nor repeats a switch.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ccswitch.bpf.switcher import SwitchResult
from ccswitch.daemon.aggregate import Aggregator
from ccswitch.daemon.config import Config
from ccswitch.daemon.escape import LOSS_BASED, EscapeConfig, StarvationDetector
from ccswitch.daemon.explore import ExploreConfig, Explorer, Proposal
from ccswitch.daemon.flowindex import FlowIndex
from ccswitch.daemon.guard import Guard, GuardConfig, Verdict
from ccswitch.daemon.policies import Decider, HeuristicDecider, ObserveDecider
from ccswitch.daemon.recorder import Recorder
from ccswitch.daemon.selection import FlowSelector
from ccswitch.daemon.unfairness import Fairness, fairness, rewards
from ccswitch.envs.reward import RewardConfig
from ccswitch.frame import FlowFrame, as_frame
from ccswitch.host import available_ccas

log = logging.getLogger("ccswitchd")
MANAGED_STATES = (1, 8)  # TCP_ESTABLISHED, TCP_CLOSE_WAIT (still sending)


class DataPlaneLike(Protocol):
    """DataPlane, or a stand-in.  The controller reads sample_frame() when the plane has it (DataPlane),
    else sample(), whose pyarrow.Table it converts (test fakes)."""

    def sample(self) -> Any: ...

    def switch_many(self, requests: list[tuple[int, str, str]]) -> list[SwitchResult]: ...


@dataclass
class TickStats:
    n: int = 0
    last_ms: float = 0.0
    max_ms: float = 0.0
    sum_ms: float = 0.0
    flows: int = 0
    managed: int = 0
    decisions: int = 0
    switches: int = 0
    reverts: int = 0
    manual: int = 0
    failed: int = 0
    explores: int = 0
    escapes: int = 0  # starvation escapes (escape.py)
    idle: int = 0  # ticks without a monitor read (daemon.sample_every_tick = false, no --record)
    recent_ms: deque[float] = field(default_factory=lambda: deque(maxlen=300))
    recent_sample_ms: deque[float] = field(default_factory=lambda: deque(maxlen=300))

    def add(self, ms: float, sample_ms: float = 0.0) -> None:
        self.recent_sample_ms.append(sample_ms)
        self.n += 1
        self.last_ms = ms
        self.max_ms = max(self.max_ms, ms)
        self.sum_ms += ms
        self.recent_ms.append(ms)

    def as_dict(self) -> dict[str, Any]:
        def pct(values: Iterable[float], q: float) -> float:
            r = sorted(values)
            return r[min(len(r) - 1, int(q * len(r)))] if r else 0.0

        own = [a - b for a, b in zip(self.recent_ms, self.recent_sample_ms, strict=True)]
        return {"ticks": self.n, "tick_ms_last": self.last_ms, "tick_ms_mean": self.sum_ms / max(self.n, 1),
                "tick_ms_p50": pct(self.recent_ms, 0.5), "tick_ms_p99": pct(self.recent_ms, 0.99),
                "tick_ms_max": self.max_ms, "sample_ms_p50": pct(self.recent_sample_ms, 0.5),
                "sample_ms_p99": pct(self.recent_sample_ms, 0.99), "own_ms_p50": pct(own, 0.5),
                "own_ms_p99": pct(own, 0.99), "flows": self.flows,
                "managed": self.managed, "decisions": self.decisions, "switches": self.switches,
                "reverts": self.reverts, "manual": self.manual, "failed": self.failed,
                "explores": self.explores, "escapes": self.escapes, "idle_ticks": self.idle}


class Controller:
    def __init__(self, cfg: Config, decider: Decider, dp: DataPlaneLike, *, recorder: Recorder | None = None,
                 clock: Callable[[], float] = time.time, available: Callable[[], list[str]] = available_ccas,
                 state_path: Path | None = None, metrics: Any = None):
        self.dp = dp
        self.clock = clock
        self.available = available
        self.recorder = recorder or Recorder()
        self.state_path = state_path
        self.metrics = metrics
        self.guard = Guard(GuardConfig.from_mapping(_guard_settings(cfg.guard, decider)), clock=clock)
        self.history: deque[dict[str, Any]] = deque(maxlen=int(cfg.daemon["history"]))
        self._pending_hist: dict[int, dict[str, Any]] = {}
        self.stats = TickStats()
        self._refusing: dict[str, str] = {}  # CCA -> the kernel's last refusal, until a switch to it works
        self._allowed_seen: tuple[str, ...] | None = None  # the policy's choices at the last decision
        self.started = clock()
        self.last_table: FlowFrame | None = None  # the last monitor read
        self.last_decision: dict[int, dict[str, Any]] = {}
        self._flows = FlowIndex()  # managed-candidate flows -> slots of the arrays below
        self._first = np.zeros(64)  # first seen (guard clock)
        self._ravg = np.full(64, np.nan)  # running mean reward (the post-switch evaluation's "before")
        self._last_ids: np.ndarray | None = None  # flow ids of the rows of _last_q / _last_obs
        self._last_q: np.ndarray | None = None
        self._last_obs: np.ndarray | None = None
        self._last_fast: set[int] = set()
        self._last_margin: set[int] = set()
        self.last_fair: Fairness | None = None
        self._dirty = False
        self._aggregator = Aggregator()
        self.configure(cfg, decider)
        self.load_state()

    # ------------------------------------------------------------- set-up
    def configure(self, cfg: Config, decider: Decider) -> None:
        """Apply a (new) config and decider; keeps guard state, history and pins."""
        self.cfg = cfg
        self.decider = decider
        self.observe_only = isinstance(decider, ObserveDecider)
        self.guard.cfg = GuardConfig.from_mapping(_guard_settings(cfg.guard, decider))
        self.selector = FlowSelector(cfg.flows)
        self.tick_s = float(cfg.daemon["tick_s"])
        di = float(cfg.policy["decision_interval_s"]) or decider.interval_s
        self.decide_every = max(1, round(di / self.tick_s)) if di else 1
        self.decision_interval_s = self.decide_every * self.tick_s
        self.inherit = cfg.daemon["inherit"]
        # one monitor read per decision interval gives the policy the same interval aggregate
        # (the sampler differences cumulative kernel counters); --record wants every tick
        self.read_every_tick = bool(cfg.daemon["sample_every_tick"]) or self.recorder.recording
        self.reward_cfg = RewardConfig()
        ecfg = ExploreConfig.from_config(cfg.policy, cfg.guard)
        self.explorer = (Explorer(ecfg, clock=self.clock) if ecfg.enabled and decider.explores
                         and not self.observe_only else None)
        scfg = EscapeConfig.from_guard(cfg.guard)
        self.escape = StarvationDetector(scfg) if scfg.enabled and not self.observe_only else None
        self._props: dict[int, Proposal] = {}
        self._ticks_since_decision = 0
        self._aggregator = Aggregator()
        decider.reset()

    def allowed(self) -> list[str]:
        host = set(self.available())
        conf = set(self.cfg.flows["ccas"])
        out = [a for a in self.decider.actions if a in host and (not conf or a in conf)]
        self._note_allowed(out)
        return out

    def _note_allowed(self, now: list[str]) -> None:
        """One log line when the policy's choices change under the daemon (a CCA module unloaded,
        PCC unregistered by another tool, or either coming back)."""
        prev, self._allowed_seen = self._allowed_seen, tuple(now)
        if prev is None or prev == self._allowed_seen:
            return
        gone, back = sorted(set(prev) - set(now)), sorted(set(now) - set(prev))
        if gone:
            log.warning("congestion control gone from the kernel", extra={"fields": {
                "ccas": ",".join(gone), "allowed": ",".join(now) or "none",
                "action": "not chosen until it is back; flows on it move to the policy's best available choice"}})
        if back:
            log.info("congestion control available again", extra={"fields": {"ccas": ",".join(back)}})

    # ---------------------------------------------------------------- tick
    def tick(self) -> None:
        self._ticks_since_decision += 1
        due = self._ticks_since_decision >= self.decide_every
        if not due and not self.read_every_tick:
            self.stats.idle += 1  # nothing to read: the decision's read covers the whole interval
            return
        t0 = time.perf_counter()
        read = getattr(self.dp, "sample_frame", None)
        table = read() if read is not None else as_frame(self.dp.sample())
        sample_ms = (time.perf_counter() - t0) * 1e3
        self.recorder.samples(table)
        self.last_table = table
        self._aggregator.add(table, self.tick_s)
        requests: list[tuple[int, str, str, Verdict, dict[str, Any]]] = []
        if due:
            self._ticks_since_decision = 0
            requests = self._decide(self._aggregator.take())
        if requests:
            self._apply(requests)
        self.recorder.flush()
        if self._dirty:
            self.save_state()
        ms = (time.perf_counter() - t0) * 1e3
        self.stats.add(ms, sample_ms)
        if self.metrics is not None:
            self.metrics.tick(self, ms)

    def _decide(self, agg: FlowFrame) -> list[tuple[int, str, str, Verdict, dict[str, Any]]]:
        """One decision over the interval's aggregate *agg*; returns the switches and reverts to apply.

        Per-flow numbers (first seen, running reward) live in arrays indexed through a
        FlowIndex; Python steps are taken only for new flows, flows the guard is busy
        with (guard.busy()), flows whose best CCA is not the current one, and exploration.
        """
        now = self.clock()
        n = agg.num_rows
        ids = agg.column("flow_id")
        alive = set(ids.tolist())
        gone = self.guard.forget(alive)
        for f in gone:
            self.last_decision.pop(f, None)
            self._pending_hist.pop(f, None)
        if gone:
            self._dirty = True
        if gone:  # every flow of the index is one the guard tracks
            self._flows.remove(np.array(gone, dtype=np.uint64))
        self.selector.forget(alive)
        if isinstance(self.decider, HeuristicDecider):
            self.decider.forget(alive)
        if self.explorer is not None:
            self.explorer.forget(alive)
            self.explorer.pending.clear()
        self._props = {}
        self.stats.flows = n
        if n == 0:
            self.stats.managed = 0
            return []
        fair = fairness(agg, self.cfg.unfairness["group_by"])
        self.last_fair = fair
        rew = rewards(self.reward_cfg, agg, fair)
        state = agg.column("state")
        mask = np.isin(state, MANAGED_STATES) & self.selector.select(agg)
        codes, names = agg.codes("cca")
        ccas = _Ccas(codes, names)
        rows = np.flatnonzero(mask)
        out: list[tuple[int, str, str, Verdict, dict[str, Any]]] = []
        min_age = float(self.cfg.flows["min_age_s"])
        g = self.guard
        slots, new = self._flows.slots_for(ids[rows])
        if self._flows.size > len(self._first):
            grow = max(self._flows.size, 2 * len(self._first)) - len(self._first)
            self._first = np.concatenate([self._first, np.zeros(grow)])
            self._ravg = np.concatenate([self._ravg, np.full(grow, np.nan)])
        for k in np.flatnonzero(new).tolist():  # new flows: first seen now (or when a restored state says)
            i = int(rows[k])
            self._first[slots[k]] = g.track(int(ids[i]), ccas[i]).first_seen
            self._ravg[slots[k]] = np.nan
        if self.escape is not None:
            self.escape.grow(self._flows.size)
            self.escape.reset(slots[new])
        # the flow's reward before a switch: an exponential mean over guard.eval_window_s
        r_m = rew[rows]
        prev = self._ravg[slots]
        a = min(1.0, self.decision_interval_s / max(g.cfg.eval_window_s, 1e-9))
        self._ravg[slots] = np.where(np.isnan(prev), r_m, prev + a * (r_m - prev))
        # post-switch evaluation: only flows with a switch under evaluation
        find = _RowFinder(ids)
        busy = g.busy()
        evaluating = [f for f in busy if g.flows[f].evaluation is not None]
        for i in find.rows(evaluating, mask):
            fid = int(ids[i])
            v = g.observe(fid, ccas[i], float(rew[i]))
            if v is not None:
                self._evaluated(fid, ccas[i], v, out)
        aged = now - self._first[slots] >= min_age
        managed_rows = rows[aged]
        self.stats.managed = len(managed_rows)
        scores = self.decider.scores(agg, fair.group, now, mask)
        self._last_ids = ids
        self._last_q = scores.values
        self._last_obs = scores.features
        allowed = self.allowed()
        acts = self.decider.actions
        keep_cols = [j for j, a_ in enumerate(acts) if a_ in allowed]
        log_all = self.cfg.log["all_decisions"] or log.isEnabledFor(logging.DEBUG)
        reverting = {r[0] for r in out}
        # fast path: the policy prefers the current CCA and the guard has nothing going on for the flow
        special = {f for f in busy if g.is_busy(f)} if evaluating else busy
        col_of = {acts[j]: k for k, j in enumerate(keep_cols)}
        if keep_cols and len(managed_rows):
            # float64 as the guard computes (Python floats), so the vectorised margin test agrees with it
            q_allowed = np.nan_to_num(scores.values[np.ix_(managed_rows, keep_cols)].astype(np.float64), nan=-np.inf)
            best = np.argmax(q_allowed, axis=1)
            q_best = q_allowed.max(axis=1)
            cur = np.array([col_of.get(v, -1) for v in names], dtype=np.int64)[codes[managed_rows]]
            fast = (best == cur) & np.isfinite(q_best)
            q_cur = np.where(cur >= 0, q_allowed[np.arange(len(cur)), np.maximum(cur, 0)], -np.inf)
            quiet = fast | (np.isfinite(q_cur) & np.isfinite(q_best) & (q_best - q_cur < self._margins(q_cur)))
        else:
            fast = quiet = np.zeros(len(managed_rows), dtype=bool)
        self.stats.decisions += len(managed_rows)
        self._last_fast = set(ids[managed_rows[fast]].tolist())
        # margin-quiet: another CCA is preferred, by less than the guard's margin (its step 4 keeps them;
        # a flow the guard is busy with goes the slow way below)
        self._last_margin = set(ids[managed_rows[quiet & ~fast]].tolist())
        props = self._props = self._explore(managed_rows, ids, ccas, scores.values, keep_cols, fair, reverting, now)
        if self.escape is not None:
            props.update(self._escapes(agg, managed_rows, slots[aged], ccas, allowed, reverting, now))
        if log_all:
            todo = managed_rows.tolist()
        else:
            lf, lm = self._last_fast, self._last_margin
            extra = [f for f in special if f in lf or f in lm] + [
                f for f in props if (f in lf or f in lm) and f not in special]
            todo = managed_rows[~quiet].tolist() + find.rows(extra)
        # the slow path, with every per-row value fetched as Python objects in one go
        t = np.asarray(todo, dtype=np.int64)
        fids, curs = ids[t].tolist(), [names[c] for c in codes[t].tolist()]
        qrows = scores.values[t].tolist()
        thr_l, jain_l, rew_l = fair.thratio[t].tolist(), fair.jain[t].tolist(), rew[t].tolist()
        for k, fid in enumerate(fids):
            if fid in reverting:
                continue
            self._last_fast.discard(fid)
            self._last_margin.discard(fid)
            cur, q = curs[k], qrows[k]
            p = props.get(fid)
            if p is not None:
                v = g.explore(fid, cur, p.to, p.reason)
            else:
                v = g.decide(fid, cur, {acts[j]: q[j] for j in keep_cols})
            rec = {"ts": now, "flow": fid, "from": cur, "to": v.to, "action": v.action, "reason": v.reason,
                   "q": dict(zip(acts, q, strict=True)), "thratio": thr_l[k], "jain": jain_l[k],
                   "reward": rew_l[k], "policy": self.decider.kind}
            self.last_decision[fid] = rec
            if v.action == "switch":
                if self.observe_only:
                    rec["verdict"] = "observe-only"
                    self._log_decision(rec, logging.INFO)
                else:
                    out.append((fid, v.to, cur, v, rec))
            elif v.best and v.best != cur and not v.reason.startswith("pinned"):
                rec["verdict"] = "blocked"
                quiet = "margin" in v.reason or p is not None  # repeated on every decision until it goes
                self._log_decision(rec, logging.DEBUG if quiet else logging.INFO)
            elif log_all:
                rec["verdict"] = "kept"
                self._log_decision(rec, logging.DEBUG, force=self.cfg.log["all_decisions"])
        return out

    def _margins(self, q_cur: np.ndarray) -> np.ndarray | float:
        """The guard's margin (step 4) for each current Q-value, vectorised as Guard._margin computes it."""
        c = self.guard.cfg
        return np.maximum(c.margin, c.margin_rel * np.abs(q_cur)) if c.margin_rel > 0 else c.margin

    def _last_row(self, flow: int) -> int | None:
        if self._last_ids is None:
            return None
        hit = np.flatnonzero(self._last_ids == np.uint64(flow))
        return int(hit[0]) if len(hit) else None

    def _explore(self, managed_rows: np.ndarray, ids: np.ndarray, ccas: _Ccas, values: np.ndarray,
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

    def _escapes(self, agg: FlowFrame, managed_rows: np.ndarray, mslots: np.ndarray, ccas: _Ccas,
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

    def _evaluated(self, fid: int, cca: str, v: Verdict, out: list[tuple[int, str, str, Verdict, dict[str, Any]]]
                   ) -> None:
        hist = self._pending_hist.pop(fid, None)
        rec = {"ts": self.clock(), "flow": fid, "from": cca, "to": v.to, "action": v.action, "reason": v.reason,
               "q": {}, "policy": self.decider.kind}
        if v.action == "revert":
            if hist is not None:
                hist["verdict"] = "reverted"
            if self.observe_only:
                rec["verdict"] = "observe-only"
                self._log_decision(rec, logging.INFO)
            else:
                out.append((fid, v.to, cca, v, rec))
        else:
            if hist is not None:
                hist["verdict"] = "confirmed"
            rec["verdict"] = "confirmed"
            self._log_decision(rec, logging.INFO)
        self._dirty = True

    def _apply(self, requests: list[tuple[int, str, str, Verdict, dict[str, Any]]]) -> None:
        try:
            results = self.dp.switch_many([(fid, to, self.inherit) for fid, to, _, _, _ in requests])
        except ValueError as e:  # e.g. a CCA vanished between the check and the switch
            results = [SwitchResult(fid, to, self.inherit, ok=False, error=str(e)) for fid, to, _, _, _ in requests]
        slots = self._flows.lookup(np.array([r[0] for r in requests], dtype=np.uint64))
        befores = np.where(slots >= 0, self._ravg[np.maximum(slots, 0)], np.nan).tolist()
        for (fid, to, prev, v, rec), res, before in zip(requests, results, befores, strict=True):
            kind = "revert" if v.action == "revert" else "policy"
            prop = self._props.get(fid) if kind == "policy" else None
            escaped = prop is not None and prop.kind == "escape"
            explored = prop is not None and not escaped
            if explored and self.explorer is not None:
                self.explorer.applied(fid, to, res.ok)
            if res.ok:
                if self._refusing.pop(to, None) is not None:
                    log.info("switching works again", extra={"fields": {"cca": to, "flow": fid}})
                self.guard.applied(fid, prev, to, kind, before=None if math.isnan(before) else before)
                rec["verdict"] = "applied"
                if kind == "revert":
                    self.stats.reverts += 1
                else:
                    self.stats.switches += 1
                    self.stats.explores += explored
                    self.stats.escapes += escaped
                if escaped:  # the policy may not take the flow straight back into the trap
                    for a in self.allowed():
                        if a != to:
                            self.guard.hold_off(fid, a)
                hist = {"ts": rec["ts"], "flow": fid, "from": prev, "to": to,
                        "kind": "escape" if escaped else "explore" if explored else kind, "reason": v.reason,
                        "verdict": "evaluating" if kind == "policy" and self.guard.cfg.eval_window_s > 0
                        else ("reverted" if kind == "revert" else "-")}
                self.history.append(hist)
                if kind == "policy":
                    self._pending_hist[fid] = hist
            else:
                self.stats.failed += 1
                rec["verdict"] = f"failed: {res.error}"
                self._refused(fid, to, res.error or "")
            self._log_decision(rec, logging.INFO if res.ok else logging.DEBUG)
        self._dirty = True

    def _refused(self, flow: int, cca: str, error: str) -> None:
        """The kernel refused a switch (a CCA unloaded or unregistered, a socket that went away).

        The flow stays on its working CCA and the refused one is held off for it (guard.holdoff_s), so
        the daemon does not retry every decision; one warning per CCA until a switch to it works again
        (then one info line says it recovered).
        """
        self.guard.hold_off(flow, cca)
        if cca not in self._refusing:
            self._refusing[cca] = error
            log.warning("switch refused by the kernel", extra={"fields": {
                "cca": cca, "flow": flow, "error": error,
                "action": f"flows keep their CCA; {cca} held off {self.guard.cfg.holdoff_s:g} s per flow"}})

    def _log_decision(self, rec: dict[str, Any], level: int, force: bool = False) -> None:
        self.recorder.decision(rec)
        if force or log.isEnabledFor(level):
            log.log(level, "decision", extra={"fields": {
                "flow": rec["flow"], "from": rec["from"], "to": rec["to"], "action": rec["action"],
                "verdict": rec.get("verdict", ""), "reason": rec["reason"]}})

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

    # ------------------------------------------------------------- state
    def save_state(self) -> None:
        self._dirty = False
        if not self.state_path:
            return
        doc = {"version": 1, "saved": self.clock(), "pid": os.getpid(), "flows": self.guard.to_state(),
               "history": list(self.history)[-200:]}
        tmp = self.state_path.with_name(self.state_path.name + ".tmp")
        try:
            tmp.write_text(json.dumps(doc))
            tmp.replace(self.state_path)
        except OSError as e:
            log.warning("state not saved", extra={"fields": {"path": str(self.state_path), "error": e.strerror}})

    def load_state(self) -> None:
        if not self.state_path or not self.state_path.exists():
            return
        try:
            doc = json.loads(self.state_path.read_text())
            n = self.guard.from_state(doc.get("flows", {}))
            for h in doc.get("history", []):
                self.history.append(h)
        except (OSError, ValueError, KeyError, TypeError) as e:
            log.warning("state file ignored", extra={"fields": {"path": str(self.state_path), "error": str(e)}})
            return
        log.info("state restored", extra={"fields": {"path": str(self.state_path), "flows": n,
                                                      "previous_pid": doc.get("pid")}})

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


class _RowFinder:
    """Rows of a table's flow ids holding given flows; sorts the ids on first use only."""

    def __init__(self, ids: np.ndarray):
        self.ids = ids
        self._order: np.ndarray | None = None

    def rows(self, flows: Iterable[int], mask: np.ndarray | None = None) -> list[int]:
        """Ascending rows of *flows* (absent ones skipped; with *mask*, only rows where it is set)."""
        want = np.fromiter(flows, np.uint64)
        if not len(want) or not len(self.ids):
            return []
        if self._order is None:
            self._order = np.argsort(self.ids, kind="stable")
        srt = self.ids[self._order]
        pos = np.minimum(np.searchsorted(srt, want), len(srt) - 1)
        rows = self._order[pos[srt[pos] == want]]
        if mask is not None:
            rows = rows[mask[rows]]
        return np.unique(rows).tolist()


class _Ccas:
    """The CCA of row i of a table whose CCA column came as codes (flowindex.string_codes)."""

    def __init__(self, codes: np.ndarray, names: list[str]):
        self.codes, self.names = codes, names

    def __getitem__(self, i: int) -> str:
        return self.names[self.codes[i]]


def _guard_settings(guard: dict[str, Any], decider: Decider) -> dict[str, Any]:
    """The guard's settings for *decider*: the relative margin is for the DQN's Q-values only (the
    heuristic's scores and the static policy's 0/1 use the absolute margin alone)."""
    inner = getattr(decider, "inner", decider)
    return guard if inner.kind == "dqn" else {**guard, "margin_rel": 0.0}


def _short(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if k in ("kind", "actions", "file", "checksum", "decides_with", "cca",
                                                "interval_s")}

