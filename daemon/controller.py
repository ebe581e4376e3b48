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

The rest of the Controller lives in mixins, one job each: the proposals beyond
the policy (exploration, starvation escapes: controller_proposals.py), the
switches from outside the policy (manual overrides, stop actions:
controller_overrides.py), the state file (controller_state.py) and the
read-only queries of the control socket (controller_views.py); its counters
are TickStats (controller_stats.py).
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ccswitch.bpf.switcher import SwitchResult
from ccswitch.daemon.aggregate import Aggregator
from ccswitch.daemon.config import Config
from ccswitch.daemon.controller_overrides import ControllerOverrides
from ccswitch.daemon.controller_proposals import ControllerProposals
from ccswitch.daemon.controller_state import ControllerState
from ccswitch.daemon.controller_stats import TickStats
from ccswitch.daemon.controller_views import ControllerViews
from ccswitch.daemon.escape import EscapeConfig, StarvationDetector
from ccswitch.daemon.explore import ExploreConfig, Explorer, Proposal
from ccswitch.daemon.flowindex import Ccas, FlowIndex, RowFinder
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


class Controller(ControllerViews, ControllerState, ControllerOverrides, ControllerProposals):
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
        ccas = Ccas(codes, names)
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
        find = RowFinder(ids)
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


def _guard_settings(guard: dict[str, Any], decider: Decider) -> dict[str, Any]:
    """The guard's settings for *decider*: the relative margin is for the DQN's Q-values only (the
    heuristic's scores and the static policy's 0/1 use the absolute margin alone)."""
    inner = getattr(decider, "inner", decider)
    return guard if inner.kind == "dqn" else {**guard, "margin_rel": 0.0}
