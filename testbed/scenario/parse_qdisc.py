"""Queue tables of scenario files (`qdisc = { kind = ... }`) -> :mod:`.model` queue objects.

Split from :mod:`.parse` (the rest of the scenario file); the same rules: every
mistake is one :class:`.model.ScenarioError` line naming the field.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

from .model import (
    DUALPI2_CLASSIFIERS,
    DUALPI2_SCHEDULERS,
    FQ_DEFAULT_FLOW_LIMIT_PKTS,
    FQ_DEFAULT_LIMIT_PKTS,
    QDISC_KINDS,
    VDQ_CLASSIFIERS,
    VDQ_CTV_RULES,
    VDQ_POLICIES,
    Codel,
    DualPi2,
    Fq,
    FqCodel,
    FqDualPi2,
    FqPie,
    Lfq,
    Pfifo,
    Pie,
    VdqCsaqm,
    VdqPolicyRule,
)
from .tables import Table


def optional_fields(t: Table, spec: dict[str, tuple[str, float | None, float | None]]) -> dict[str, Any]:
    """Read the optional fields of *spec* (name -> (kind, lo, hi)) that *t* sets.

    kind: "num" (lo <= v <= hi), "pos" (0 < v <= hi), "int" or "bool".
    """
    out: dict[str, Any] = {}
    for key, (kind, lo, hi) in spec.items():
        if not t.has(key):
            t.used.add(key)
        elif kind == "bool":
            out[key] = t.boolean(key, False)
        elif kind == "int":
            out[key] = t.integer(key, lo=None if lo is None else int(lo), hi=None if hi is None else int(hi))
        elif kind == "pos":
            out[key] = t.number(key, lo=0.0, lo_open=True, hi=hi)
        else:
            out[key] = t.number(key, lo=lo, hi=hi)
    return out


def _l_dscp(t: Table, classifier: str | None) -> tuple[int, ...] | None:
    """The L4S queue's DSCP values (`l_dscp`), which only the "dscp" classifier uses and which it needs."""
    dscp: tuple[int, ...] | None = None
    if t.has("l_dscp"):
        raw = t.array("l_dscp")
        for i, d in enumerate(raw):
            if isinstance(d, bool) or not isinstance(d, int) or not 0 <= d <= 63:
                t.err(f"{t.here('l_dscp')}[{i}]", f"must be a DSCP value 0..63, got {d!r}")
        dscp = tuple(raw)
    else:
        t.used.add("l_dscp")
    if classifier == "dscp" and not dscp:
        t.err(t.here("l_dscp"), 'classifier = "dscp" needs at least one DSCP value (0..63)')
    if dscp is not None and classifier != "dscp":
        t.err(t.here("l_dscp"), 'only used with classifier = "dscp" (remove it or set the classifier)')
    return dscp


def _dualpi2(t: Table, base_dir: Path | None = None) -> DualPi2:
    """The dualpi2 qdisc table; ranges as linkemu checks them (config/dualpi2.rs DualPi2::validate)."""
    v = optional_fields(t, {"limit_pkts": ("int", 1, 10_000_000), "target_ms": ("pos", None, 60_000.0),
                            "tupdate_ms": ("num", 0.1, 60_000.0), "alpha_hz": ("pos", None, 1e9),
                            "beta_hz": ("num", 0.0, 1e9), "k": ("num", 0.5, 64.0),
                            "l_min_th_ms": ("num", 0.0, 60_000.0), "l_max_th_ms": ("num", 0.0, 60_000.0),
                            "l_min_qlen_pkts": ("int", 0, 10_000_000), "c_weight_pct": ("num", 0.0, 100.0),
                            "tshift_ms": ("num", 0.0, 60_000.0), "drop_on_overload": ("bool", None, None)})
    lo = v.get("l_min_th_ms", 1.0)
    if "l_max_th_ms" in v and v["l_max_th_ms"] < lo:
        t.err(t.here("l_max_th_ms"), f"must be >= l_min_th_ms ({lo:g}), got {v['l_max_th_ms']:g}")
    classifier = t.string("classifier", None, choices=DUALPI2_CLASSIFIERS)
    scheduler = t.string("scheduler", None, choices=DUALPI2_SCHEDULERS)
    dscp = _l_dscp(t, classifier)
    agent = _agent(t, base_dir)
    interval = t.number("agent_interval_ms", None, lo=1.0, hi=10_000.0)
    agent_rate = t.number("agent_rate_mbit", None, lo=0.01, hi=1e6)
    for key, val in (("agent_interval_ms", interval), ("agent_rate_mbit", agent_rate)):
        if val is not None and agent is None:
            t.err(t.here(key), "only used with agent = \"PATH\" (an actor file)")
    t.done()
    return DualPi2(classifier=classifier, scheduler=scheduler, l_dscp=dscp, agent=agent,
                   agent_interval_ms=interval, agent_rate_mbit=agent_rate, **v)


def _agent(t: Table, base_dir: Path | None, kind: str = "dualpi2") -> Path | None:
    """A queue's ``agent``: an actor file (relative to the scenario file), checked by loading it with the
    loader of *kind*'s agent (dualpi2: paper 000's A3C actor; lfq: paper 001's LFQ actor)."""
    raw = t.string("agent")
    if raw is None:
        return None
    path = ((base_dir or Path.cwd()) / raw).resolve()
    if kind == "lfq":
        from ccswitch.models.lfq_actor import ActorError as LfqActorError
        from ccswitch.models.lfq_actor import load_actor as load_lfq_actor

        try:
            load_lfq_actor(path)
        except LfqActorError as e:
            t.err(t.here("agent"), str(e))
        return path
    from ccswitch.models.dualpi2_actor import ActorError, load_actor

    try:
        load_actor(path)
    except ActorError as e:
        t.err(t.here("agent"), str(e))
    return path


_FQ_QUEUES = {"flows": ("int", 1, 65_536), "quantum": ("int", 256, 1 << 20)}
"""fq_codel's, fq's, lfq's and fq_pie's flow queues; ranges as linkemu checks them (config/validate.rs flow_queues)."""


def _fq_codel(t: Table) -> FqCodel:
    """The fq_codel qdisc table (config/qdisc.rs QdiscConfig::validate)."""
    v = optional_fields(t, {**_FQ_QUEUES, "target_ms": ("pos", None, 60_000.0), "interval_ms": ("pos", None, 60_000.0),
                            "limit_pkts": ("int", 1, 10_000_000), "ecn": ("bool", None, None)})
    t.done()
    return FqCodel(**v)


def _fq(t: Table) -> Fq:
    """The fq qdisc table: a static per-flow limit, at most the overall limit."""
    v = optional_fields(t, {**_FQ_QUEUES, "flow_limit_pkts": ("int", 1, 10_000_000),
                            "limit_pkts": ("int", 1, 10_000_000)})
    limit = v.get("limit_pkts", FQ_DEFAULT_LIMIT_PKTS)
    flow_limit = v.get("flow_limit_pkts", FQ_DEFAULT_FLOW_LIMIT_PKTS)
    if flow_limit > limit:
        t.err(t.here("flow_limit_pkts"), f"must be <= limit_pkts ({limit}), got {flow_limit}")
    t.done()
    return Fq(**v)


def _lfq(t: Table, base_dir: Path | None = None) -> Lfq:
    """The lfq qdisc table: fq's queues, a default per-flow limit (at most the overall limit), an agent."""
    v = optional_fields(t, {**_FQ_QUEUES, "default_limit_pkts": ("int", 1, 10_000_000),
                            "limit_pkts": ("int", 1, 10_000_000), "idle_timeout_ms": ("pos", None, 3_600_000.0)})
    limit = v.get("limit_pkts", FQ_DEFAULT_LIMIT_PKTS)
    default = v.get("default_limit_pkts", FQ_DEFAULT_FLOW_LIMIT_PKTS)
    if default > limit:
        t.err(t.here("default_limit_pkts"), f"must be <= limit_pkts ({limit}), got {default}")
    agent = _agent(t, base_dir, "lfq")
    interval = t.number("agent_interval_ms", None, lo=1.0, hi=10_000.0)
    floor = t.number("share_floor_bdp", None, lo=0.0, hi=4.0)
    floor_min = t.integer("share_floor_min_pkts", None, lo=1, hi=256)
    for key, val in (("agent_interval_ms", interval), ("share_floor_bdp", floor), ("share_floor_min_pkts", floor_min)):
        if val is not None and agent is None:
            t.err(t.here(key), "only used with agent = \"PATH\" (an LFQ actor file)")
    t.done()
    return Lfq(agent=agent, agent_interval_ms=interval, share_floor_bdp=floor, share_floor_min_pkts=floor_min, **v)


_PIE = {"target_ms": ("pos", None, 60_000.0), "tupdate_ms": ("num", 0.1, 60_000.0), "alpha": ("pos", None, 2.0),
        "beta": ("num", 0.0, 2.0), "max_burst_ms": ("num", 0.0, 60_000.0), "limit_pkts": ("int", 1, 10_000_000),
        "ecn": ("bool", None, None), "bytemode": ("bool", None, None)}
"""pie's fields and fq_pie's PIE fields; ranges as linkemu checks them (config/pie.rs)."""


def _pie(t: Table) -> Pie:
    """The pie qdisc table (RFC 8033, Linux sch_pie's fields)."""
    v = optional_fields(t, _PIE)
    t.done()
    return Pie(**v)


def _fq_pie(t: Table) -> FqPie:
    """The fq_pie qdisc table: fq_codel's flow queues, PIE's fields, ``ecn_prob_pct``."""
    v = optional_fields(t, {**_FQ_QUEUES, **_PIE, "ecn_prob_pct": ("num", 0.0, 100.0)})
    t.done()
    return FqPie(**v)


def _fq_dualpi2(t: Table) -> FqDualPi2:
    """The fq_dualpi2 qdisc table (paper 000); ranges as linkemu checks them (config/pie.rs FqDualPi2::validate)."""
    pie = {k: v for k, v in _PIE.items() if k not in ("ecn", "bytemode")}
    v = optional_fields(t, {**_FQ_QUEUES, **pie, "k": ("num", 0.5, 64.0), "l_min_th_ms": ("num", 0.0, 60_000.0),
                            "c_weight_pct": ("num", 0.0, 100.0), "drop_on_overload": ("bool", None, None)})
    if "flows" in v and (v["flows"] < 2 or v["flows"] % 2):
        t.err(t.here("flows"), f"must be even, 2..65536 (pairs of an L4S and a Classic queue), got {v['flows']}")
    t.done()
    return FqDualPi2(**v)


def _vdq_rule(t: Table) -> VdqPolicyRule:
    """One marker rule of vdq_csaqm: a policy and the 5-tuple fields it matches."""
    policy = t.string("policy", required=True, choices=VDQ_POLICIES) or "gold"
    addrs: dict[str, str | None] = {}
    for key in ("src", "dst"):
        a = t.string(key)
        if a is not None:
            try:
                ipaddress.ip_address(a)
            except ValueError:
                t.err(t.here(key), f"must be an IP address, got {a!r}")
        addrs[key] = a
    v = optional_fields(t, {"proto": ("int", 0, 255), "sport": ("int", 0, 65_535), "dport": ("int", 0, 65_535)})
    t.done()
    return VdqPolicyRule(policy=policy, **addrs, **v)


def _vdq_csaqm(t: Table) -> VdqCsaqm:
    """The vdq_csaqm qdisc table; ranges as linkemu checks them (config/vdq.rs)."""
    v = optional_fields(t, {"rate_mbit": ("pos", None, 1e6), "vq0_rate": ("pos", None, 1.0),
                            "vq1_rate": ("pos", None, 1.0),
                            "qmax0_ms": ("num", 0.1, 60_000.0), "qmax1_ms": ("num", 0.1, 60_000.0),
                            "target0_ms": ("num", 0.01, 60_000.0), "target1_ms": ("num", 0.01, 60_000.0),
                            "tupdate_ms": ("num", 0.1, 60_000.0), "rate_window_ms": ("num", 0.1, 60_000.0),
                            "idle_timeout_ms": ("num", 1.0, 60_000.0), "classic_ecn": ("bool", None, None),
                            "steady_window_ms": ("num", 1.0, 60_000.0), "steady_alpha": ("num", 0.0, 1.0),
                            "steady_beta": ("num", 0.0, 1.0), "steady_setpoint": ("pos", None, 1.0),
                            "steady_l4s_gain": ("pos", None, 1.0)})
    if v.get("vq0_rate", 0.9) > v.get("vq1_rate", 0.984):
        t.err(t.here("vq0_rate"), f"must be <= vq1_rate ({v.get('vq1_rate', 0.984):g}), got {v.get('vq0_rate', 0.9):g}")
    classifier = t.string("classifier", None, choices=VDQ_CLASSIFIERS)
    dscp = _l_dscp(t, classifier)
    default_policy = t.string("default_policy", None, choices=VDQ_POLICIES)
    ctv_rule = t.string("ctv_rule", None, choices=VDQ_CTV_RULES)
    rules: tuple[VdqPolicyRule, ...] | None = None
    if t.has("policies"):
        raw = t.array("policies")
        rules = tuple(_vdq_rule(Table(r, f"{t.here('policies')}[{i}]", t.err)) for i, r in enumerate(raw))
    else:
        t.used.add("policies")
    t.done()
    return VdqCsaqm(classifier=classifier, l_dscp=dscp, default_policy=default_policy, policies=rules,
                    ctv_rule=ctv_rule, **v)


def parse_qdisc(t: Table, base_dir: Path | None = None
                ) -> Pfifo | Codel | DualPi2 | FqCodel | Fq | Lfq | Pie | FqPie | VdqCsaqm | FqDualPi2:
    """A queue table; *base_dir* (the scenario file's folder) resolves dualpi2's and lfq's ``agent`` path."""
    kind = t.string("kind", required=True, choices=QDISC_KINDS)
    if kind == "vdq_csaqm":
        return _vdq_csaqm(t)
    if kind == "pie":
        return _pie(t)
    if kind == "fq_pie":
        return _fq_pie(t)
    if kind == "fq_dualpi2":
        return _fq_dualpi2(t)
    if kind == "dualpi2":
        return _dualpi2(t, base_dir)
    if kind == "fq_codel":
        return _fq_codel(t)
    if kind == "fq":
        return _fq(t)
    if kind == "lfq":
        return _lfq(t, base_dir)
    limit = int(t.integer("limit_pkts", 1000, lo=1, hi=10_000_000) or 1000)
    if kind == "pfifo":
        q: Pfifo | Codel = Pfifo(limit)
    else:
        q = Codel(target_ms=float(t.number("target_ms", 5.0, lo=0.0, lo_open=True, hi=60_000.0) or 5.0),
                  interval_ms=float(t.number("interval_ms", 100.0, lo=0.0, lo_open=True, hi=60_000.0) or 100.0),
                  limit_pkts=limit, ecn=t.boolean("ecn", False))
    t.done()
    return q
