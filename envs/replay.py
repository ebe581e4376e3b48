"""The corpus as the env replays it: per condition, the agent's trace under every arm.

numpy only.  A *condition* groups the captures that share the manifest key
``condition`` (same link, same competitors); each capture is one *trace*: the
agent flow's samples on the regular time grid of its run (bin k covers
(t0 + k*dt, t0 + (k+1)*dt]), the CCA it ran in each bin, what its host saw of
competition (local.* features) and Jain's index over every flow at the
bottleneck (the reward's fairness term; the agent does not observe it).

Transitions (:meth:`Condition.next_trace`): the agent is in trace i at bin k
and chooses CCA a for bin k+1.  Among the traces whose agent ran a in bin k+1:

1. trace i itself (it ran a anyway: no switch, or the switch this arm scripted);
2. a trace that ran the same CCA as trace i in bin k and a in bin k+1: a
   *recorded switch* at exactly this time (the switch arms), same seed first;
3. any other such trace, static arms first, same seed first: the counterfactual
   "had the flow run a all along" (this misses the transient of a switch, which
   the switching cost of the reward stands for).

A *self-play* trace (manifest arm with ``policy``; datasets/from_matrix.py) is a run in
which every managed client ran ccswitchd with a policy: the agent stays in it while it
chooses what that policy chose (rule 1), which is where the states with managed
clients that disagree come from.  It is never a static counterfactual (rule 3 and the
episode's start take it only as itself).

Ties are broken by the env's seeded RNG.
"""

from __future__ import annotations

import hashlib
import json
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ccswitch.datasets.trace import CORPUS_INDEX, Capture, TraceError, bin_flows, find_captures

from .competition import competition_features, is_active
from .features import ACTIONS, BASE_COLUMNS, WINDOW, Normalisation, base_features

__all__ = ["DEFAULT_CORPUS", "WARMUP_S", "Condition", "ReplayCorpus", "Trace", "split_conditions"]

DEFAULT_CORPUS = Path(__file__).resolve().parent.parent / "datasets" / "sample"
"""The sample corpus shipped in the repository (datasets/sample/)."""
WARMUP_S = 2.0
"""Seconds at the start of every trace not used for decisions (flows connecting, slow start)."""
MAX_GAP_FRACTION = 0.1
"""A trace whose agent flow misses more than this fraction of its bins is dropped."""


@dataclass
class Trace:
    """The agent flow of one capture, on the bin grid."""

    id: str
    seed: int
    static: bool
    """True for a static arm (no scripted switch, not a policy's run)."""
    start: int
    """Action index of the arm's starting CCA (-1: not one of the actions)."""
    first: int
    """First bin with a sample of the agent flow."""
    cca: np.ndarray
    """int [K]: index into the actions of the CCA the agent ran in each bin (-1: none of them)."""
    raw: np.ndarray
    """float [K, 6]: raw BASE_FEATURES of the agent."""
    throughput_mbps: np.ndarray
    rtt_ms: np.ndarray
    loss: np.ndarray
    context: np.ndarray
    """float [K, 3]: local.* features (the agent's host)."""
    jain: np.ndarray
    """float [K]: Jain's index over every active flow at the bottleneck."""
    thratio: np.ndarray
    """float [K]: agent throughput / mean throughput of the other active flows (NaN alone)."""
    n_flows: np.ndarray
    """int [K]: active flows at the bottleneck."""
    min_share: np.ndarray
    """float [K]: smallest active flow's throughput / mean of the active flows (1 alone)."""
    utilisation: np.ndarray | None = None
    """float [K]: the active flows' throughput together / the link's rate_mbit (NaN: rate unknown,
    e.g. a trace-driven link); the reward's optional utilisation term."""
    self_play: bool = False
    """A run with a policy on every managed client (the arm's ``policy``), not a scripted arm."""


@dataclass
class Condition:
    id: str
    traces: list[Trace]
    length: int
    """Bins usable in every trace of the condition."""
    first_decision: int
    """First bin at which the agent decides: after the warm-up, with a full window of data in every trace."""
    link: dict = field(default_factory=dict)
    competitors: list = field(default_factory=list)

    def next_trace(self, i: int, k: int, action: int, rng: np.random.Generator | None) -> int | None:
        """Index of the trace the agent continues in at bin k+1 after choosing *action* (None: no data)."""
        if k + 1 >= self.length:
            return None
        tiers = self.candidates(i, k, action)
        for tier in tiers:
            if tier:
                if len(tier) == 1 or rng is None:
                    return tier[0]
                return tier[int(rng.integers(len(tier)))]
        return None

    def candidates(self, i: int, k: int, action: int) -> list[list[int]]:
        cur = self.traces[i]
        if cur.cca[k + 1] == action:
            return [[i]]
        ok = [j for j, t in enumerate(self.traces) if t.cca[k + 1] == action]
        same_seed = [j for j in ok if self.traces[j].seed == cur.seed]
        switched = [j for j in ok if self.traces[j].cca[k] == cur.cca[k]]
        static = [j for j in ok if self.traces[j].static]
        tiers = [
            [j for j in switched if j in same_seed], switched,
            [j for j in static if j in same_seed], static, same_seed, ok,
        ]
        return tiers

    def static_trace(self, action: int, seed: int | None = None) -> int | None:
        for j, t in enumerate(self.traces):
            if t.static and t.start == action and (seed is None or t.seed == seed):
                return j
        return None


def split_conditions(ids: Sequence[str], test_fraction: float) -> tuple[list[str], list[str]]:
    """Deterministic train/test split of condition ids (by a hash of the id's group).

    A condition id ``SCENARIO~FLOW`` (datasets/from_matrix.py: one condition per managed flow of
    a scenario) belongs to the group SCENARIO, and a group's conditions fall on the same side:
    the flows of one run are not independent, so splitting them would leak the held-out runs
    into training.  Ids without ``~`` are their own group.  ceil(test_fraction * groups) groups
    go to test (at least one when there are two or more and test_fraction > 0).
    """
    def group(c: str) -> str:
        return c.split("~", 1)[0]

    groups = sorted({group(c) for c in ids}, key=lambda g: hashlib.sha256(g.encode()).hexdigest())
    n_test = math.ceil(test_fraction * len(groups)) if test_fraction > 0 and len(groups) > 1 else 0
    n_test = min(n_test, len(groups) - 1) if len(groups) > 1 else 0
    test_groups = set(groups[:n_test])
    test = sorted(c for c in ids if group(c) in test_groups)
    return sorted(c for c in ids if group(c) not in test_groups), test


class ReplayCorpus:
    """Every usable condition of a corpus folder, loaded into numpy arrays."""

    def __init__(self, conditions: list[Condition], actions: Sequence[str], source: str,
                 window: int = WINDOW, warmup_bins: int = 2) -> None:
        if not conditions:
            raise TraceError(f"{source}: no usable condition (each needs a static trace of every CCA "
                             f"in {', '.join(actions)} and at least {window + warmup_bins + 2} bins)")
        self.conditions = {c.id: c for c in conditions}
        self.actions = tuple(actions)
        self.source = source
        self.window = window
        self.warmup_bins = warmup_bins

    @classmethod
    def load(cls, path: str | Path | Sequence[str | Path] | None = None, *, actions: Sequence[str] = ACTIONS,
             window: int = WINDOW, warmup_s: float = WARMUP_S,
             log: Callable[[str], None] | None = None) -> ReplayCorpus:
        """Every usable condition under `path`: one corpus folder, or several read as one.

        Several folders (e.g. the space corpus beside the sample) must not share a
        condition id, unless a later folder *extends* an earlier one (its corpus.json says
        ``"extends": NAME``, the ``name`` of the earlier one's): then its captures join the
        conditions of the same id (self-play and deviation captures beside the static arms,
        datasets/from_matrix.py).  The fingerprint covers the captures of all of them.
        """
        roots = _roots(path)
        root = roots[0] if len(roots) == 1 else Path(" + ".join(str(r) for r in roots))
        captures = []
        for r in roots:
            found = find_captures(r)
            if not found:
                raise TraceError(f"{r}: no captures (folders with manifest.json) found")
            captures += found
        by_cond: dict[str, list[Capture]] = {}
        origin: dict[str, Path] = {}
        skipped = 0
        names = {r: _index(r).get("name", r.name) for r in roots}
        for r in roots:
            extends = _index(r).get("extends")
            for c in (c for c in captures if c.path.is_relative_to(r)):
                if c.condition is None or c.manifest.get("arm") is None or c.agent_flow() is None:
                    skipped += 1
                    continue
                first = origin.setdefault(c.condition, r)
                if first != r and names[first] != extends:
                    raise TraceError(f"condition {c.condition} is in both {first} and {r}: corpora read "
                                     f"together must not share condition ids (unless {r}/corpus.json "
                                     f"says \"extends\": \"{names[first]}\")")
                by_cond.setdefault(c.condition, []).append(c)
        conditions = []
        interval = None
        notes: list[str] = []  # skipped traces and conditions: summarised below, not one line each
        for cid, caps in sorted(by_cond.items()):
            iv = {c.interval_s for c in caps}
            if len(iv) != 1:
                raise TraceError(f"{root}: condition {cid} mixes sampling intervals {sorted(iv)}")
            if interval is None:
                interval = caps[0].interval_s
            elif caps[0].interval_s != interval:
                raise TraceError(f"{caps[0].path / 'manifest.json'}: key 'interval_s' is {caps[0].interval_s}, "
                                 f"other captures of {root} use {interval}")
            warmup_bins = round(warmup_s / caps[0].interval_s)
            cond = _load_condition(cid, caps, actions, warmup_bins, window, notes.append)
            if cond is not None:
                conditions.append(cond)
        _report_skips(root, notes, log)
        if log and skipped:
            log(f"{root}: {skipped} capture(s) without condition/arm/agent flow skipped (not replayable)")
        corpus = cls(conditions, actions, str(root), window,
                     round(warmup_s / (interval or 1.0)))
        corpus.sources = [str(r) for r in roots]
        corpus.interval_s = interval or 1.0
        corpus.n_captures = len(captures)
        corpus.fingerprint = hashlib.sha256("\n".join(sorted(
            f"{c.id}:{c.manifest.get('files', {}).get('samples.parquet', {}).get('sha256', '')}"
            for c in captures)).encode()).hexdigest()
        return corpus

    interval_s: float = 1.0
    sources: list[str] = []  # noqa: RUF012 -- replaced per instance by load()
    """The corpus folders read, in the order given."""
    n_captures: int = 0
    fingerprint: str = ""
    """sha256 over the capture ids and their samples' sha256: identifies the data a policy was trained on."""

    def ids(self) -> list[str]:
        return sorted(self.conditions)

    def split(self, test_fraction: float) -> tuple[list[str], list[str]]:
        return split_conditions(self.ids(), test_fraction)

    def fit_normalisation(self, condition_ids: Sequence[str] | None = None) -> Normalisation:
        ids = condition_ids if condition_ids is not None else self.ids()
        rows = [t.raw[self.warmup_bins:c.length] for c in (self.conditions[i] for i in ids) for t in c.traces]
        return Normalisation.fit(np.concatenate(rows)) if rows else Normalisation.identity()


def _index(root: Path) -> dict:
    """The corpus.json of *root* ({} when it has none or it does not parse)."""
    try:
        index = json.loads((root / CORPUS_INDEX).read_text())
    except (OSError, ValueError):
        return {}
    return index if isinstance(index, dict) else {}


def _roots(path: str | Path | Sequence[str | Path] | None) -> list[Path]:
    if path is None:
        return [DEFAULT_CORPUS]
    if isinstance(path, (str, Path)):
        return [Path(path)]
    roots = [Path(p) for p in path]
    if not roots:
        raise TraceError("no corpus folder given")
    return roots


def _load_condition(cid: str, caps: list[Capture], actions: Sequence[str], warmup_bins: int, window: int,
                    log: Callable[[str], None] | None) -> Condition | None:
    aidx = {a: i for i, a in enumerate(actions)}
    traces: list[Trace] = []
    for cap in caps:
        try:
            tr = _load_trace(cap, aidx)
        except TraceError as e:
            _warn(log, f"{e}; trace skipped")
            continue
        if tr is not None:
            traces.append(tr)
    if not traces:
        return None
    static = {t.start for t in traces if t.static}
    missing = [a for a in actions if aidx[a] not in static]
    if missing:
        _warn(log, f"condition {cid}: no static trace of {', '.join(missing)}; condition skipped")
        return None
    length = min(len(t.cca) for t in traces)
    first = max(warmup_bins + window - 1, max(t.first for t in traces) + window - 1)
    if length - first < 2:
        _warn(log, f"condition {cid}: only {length} bins, decisions would start at bin {first}; condition skipped")
        return None
    m = caps[0].manifest
    return Condition(cid, traces, length, first, link=m.get("link") or {}, competitors=m.get("competitors") or [])


MAX_SKIP_LINES = 3
"""Skipped traces/conditions printed one per line; beyond this, one summary line."""


def _report_skips(root: Path, notes: list[str], log: Callable[[str], None] | None) -> None:
    if len(notes) <= MAX_SKIP_LINES:
        for n in notes:
            _warn(log, n)
        return
    traces = sum(n.endswith("trace skipped") for n in notes)
    _warn(log, f"{root}: {traces} trace(s) and {len(notes) - traces} condition(s) skipped as not replayable "
               f"(first: {notes[0]}); the rest load normally")


def _warn(log: Callable[[str], None] | None, msg: str) -> None:
    if log is not None:
        log(msg)
    else:
        warnings.warn(msg, stacklevel=3)


def _load_trace(cap: Capture, aidx: dict[str, int]) -> Trace | None:
    m = cap.manifest
    dt = cap.interval_s
    t0 = m.get("t0_epoch")
    table = cap.samples()
    if t0 is None:
        if table.num_rows == 0:
            return None
        t0 = float(min(table.column("ts_s").to_pylist())) - dt
    n_bins = round(float(m.get("duration_s") or 0) / dt) or None
    roles = {int(f["flow_id"]): f for f in cap.flows if f.get("role") in ("agent", "competitor")}
    agent = cap.agent_flow()
    assert agent is not None
    bins = bin_flows(table, float(t0), dt, n_bins, roles.keys())
    a = bins.get(int(agent["flow_id"]))
    if a is None or not a.present.any():
        raise TraceError(f"{cap.path}: agent flow {agent['flow_id']} has no samples")
    k_len = len(a.present)
    # forward-fill short gaps of the agent; too many gaps: drop the trace
    missing = ~a.present
    missing[: max(1, int(np.argmax(a.present)))] = False  # before the first sample: warm-up, not a gap
    if missing.sum() > MAX_GAP_FRACTION * k_len:
        raise TraceError(f"{cap.path}: agent flow misses {int(missing.sum())} of {k_len} intervals")
    cols = {c: a[c].copy() for c in (*BASE_COLUMNS, "sndq_bytes")}
    cca = np.array([aidx.get(c, -1) if c is not None else -1 for c in a.cca], dtype=np.int64)
    for k in range(1, k_len):
        if not a.present[k] and a.present[k - 1]:
            for c in cols:
                cols[c][k] = cols[c][k - 1]
            cca[k] = cca[k - 1]
            a.present[k] = True
    raw = base_features(cols)
    # competition seen by the host: agent + competitors on the same host
    ids = list(roles)
    thr = np.stack([np.nan_to_num(bins[i]["throughput_bps"], nan=0.0) for i in ids])  # [F, K]
    sndq = np.stack([np.nan_to_num(bins[i]["sndq_bytes"], nan=0.0) for i in ids])
    present = np.stack([bins[i].present for i in ids])
    thr[ids.index(int(agent["flow_id"]))] = np.nan_to_num(cols["throughput_bps"], nan=0.0)
    present[ids.index(int(agent["flow_id"]))] = a.present
    active = present & is_active(thr, sndq)
    local = np.array([bool(roles[i].get("local", True)) for i in ids])
    ai = ids.index(int(agent["flow_id"]))
    context = np.empty((k_len, 3))
    jain = np.ones(k_len)
    thratio = np.full(k_len, np.nan)
    n_flows = np.zeros(k_len, dtype=np.int64)
    min_share = np.ones(k_len)
    rate = (m.get("link") or {}).get("rate_mbit")
    capacity_bps = float(rate) * 1e6 if isinstance(rate, int | float) and rate > 0 else math.nan
    utilisation = np.full(k_len, math.nan)
    for k in range(k_len):
        sel = local & (active[:, k] | (np.arange(len(ids)) == ai))
        rows = np.flatnonzero(sel)
        ctx = competition_features(thr[rows, k], np.zeros(len(rows)), active[rows, k])
        context[k] = ctx[list(rows).index(ai)]
        act = active[:, k].copy()
        act[ai] = True
        x = thr[act, k]
        n_flows[k] = len(x)
        s, q = x.sum(), (x * x).sum()
        jain[k] = s * s / (len(x) * q) if len(x) > 1 and q > 0 else 1.0
        min_share[k] = x.min() * len(x) / s if len(x) > 1 and s > 0 else 1.0
        utilisation[k] = s / capacity_bps
        others = thr[act & (np.arange(len(ids)) != ai), k]
        if len(others):
            mo = others.mean()
            thratio[k] = thr[ai, k] / mo if mo > 0 else np.inf
    arm = m.get("arm") or {}
    return Trace(
        id=cap.id, seed=int(m.get("seed", 0) or 0), static=not arm.get("switches") and "policy" not in arm,
        start=aidx.get(str(arm.get("start")), -1), first=int(np.argmax(a.present)),
        cca=cca, raw=raw,
        throughput_mbps=np.nan_to_num(cols["throughput_bps"], nan=0.0) / 1e6,
        rtt_ms=cols["rtt_us"] / 1e3, loss=np.nan_to_num(cols["loss_rate"], nan=0.0),
        context=context, jain=jain, thratio=thratio, n_flows=n_flows, min_share=min_share,
        utilisation=utilisation, self_play="policy" in arm,
    )
