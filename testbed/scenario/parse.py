"""Scenario files -> :mod:`.model` objects: the only place that validates them.

Every mistake is one :class:`ScenarioError` naming the file and the field.
The daemon's settings are checked by the daemon's own validator
(:func:`.daemon_config.check_settings`).
"""

from __future__ import annotations

import ipaddress
import re
import tomllib
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from .daemon_config import check_settings
from .model import (
    DAEMON_AVAILABLE,
    DAEMON_POLICIES,
    DAEMON_TICK_S,
    DUALPI2_CLASSIFIERS,
    DUALPI2_SCHEDULERS,
    EMULATORS,
    FALLBACK_CCAS,
    FLOW_KINDS,
    FQ_DEFAULT_FLOW_LIMIT_PKTS,
    FQ_DEFAULT_LIMIT_PKTS,
    INHERIT_MODES,
    MAX_CLIENTS,
    MIN_INTERVAL_S,
    NAME_RE,
    QDISC_KINDS,
    VDQ_CLASSIFIERS,
    VDQ_POLICIES,
    AccessDelay,
    Aggregation,
    BernoulliLoss,
    Capture,
    Codel,
    DaemonSettings,
    Dist,
    DualPi2,
    Flow,
    Fq,
    FqCodel,
    FqPie,
    GilbertLoss,
    Lfq,
    Link,
    LinkDir,
    Pfifo,
    PhyOverheads,
    Pie,
    Scenario,
    ScenarioError,
    Switch,
    VdqCsaqm,
    VdqPolicyRule,
    Wifi,
    WifiClient,
)
from .tables import Err, Table, read_file, tname


def _optional(t: Table, spec: dict[str, tuple[str, float | None, float | None]]) -> dict[str, Any]:
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


def _loss(t: Table) -> BernoulliLoss | GilbertLoss:
    model = t.string("model", required=True, choices=("bernoulli", "gilbert"))
    if model == "bernoulli":
        p = float(t.number("p", required=True, lo=0.0, hi=1.0) or 0.0)
        t.done()
        return BernoulliLoss(p)
    p_gb = float(t.number("p_gb", required=True, lo=0.0, hi=1.0) or 0.0)
    p_bg = float(t.number("p_bg", required=True, lo=0.0, hi=1.0) or 0.0)
    if p_gb + p_bg == 0:
        t.err(t.here("p_bg"), "p_gb and p_bg cannot both be 0")
    loss_good = float(t.number("loss_good", 0.0, lo=0.0, hi=1.0) or 0.0)
    loss_bad = t.number("loss_bad", 1.0, lo=0.0, hi=1.0)
    t.done()
    return GilbertLoss(p_gb, p_bg, loss_good, 1.0 if loss_bad is None else loss_bad)


def _dualpi2(t: Table) -> DualPi2:
    """The dualpi2 qdisc table; ranges as linkemu checks them (config.rs DualPi2::validate)."""
    v = _optional(t, {"limit_pkts": ("int", 1, 10_000_000), "target_ms": ("pos", None, 60_000.0),
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
    t.done()
    return DualPi2(classifier=classifier, scheduler=scheduler, l_dscp=dscp, **v)


_FQ_QUEUES = {"flows": ("int", 1, 65_536), "quantum": ("int", 256, 1 << 20)}
"""fq_codel's, fq's, lfq's and fq_pie's flow queues; ranges as linkemu checks them (config.rs flow_queues)."""


def _fq_codel(t: Table) -> FqCodel:
    """The fq_codel qdisc table (config.rs QdiscConfig::validate)."""
    v = _optional(t, {**_FQ_QUEUES, "target_ms": ("pos", None, 60_000.0), "interval_ms": ("pos", None, 60_000.0),
                      "limit_pkts": ("int", 1, 10_000_000), "ecn": ("bool", None, None)})
    t.done()
    return FqCodel(**v)


def _fq(t: Table) -> Fq:
    """The fq qdisc table: a static per-flow limit, at most the overall limit."""
    v = _optional(t, {**_FQ_QUEUES, "flow_limit_pkts": ("int", 1, 10_000_000),
                      "limit_pkts": ("int", 1, 10_000_000)})
    limit = v.get("limit_pkts", FQ_DEFAULT_LIMIT_PKTS)
    flow_limit = v.get("flow_limit_pkts", FQ_DEFAULT_FLOW_LIMIT_PKTS)
    if flow_limit > limit:
        t.err(t.here("flow_limit_pkts"), f"must be <= limit_pkts ({limit}), got {flow_limit}")
    t.done()
    return Fq(**v)


def _lfq(t: Table) -> Lfq:
    """The lfq qdisc table: fq's queues, a default per-flow limit (at most the overall limit)."""
    v = _optional(t, {**_FQ_QUEUES, "default_limit_pkts": ("int", 1, 10_000_000),
                      "limit_pkts": ("int", 1, 10_000_000), "idle_timeout_ms": ("pos", None, 3_600_000.0)})
    limit = v.get("limit_pkts", FQ_DEFAULT_LIMIT_PKTS)
    default = v.get("default_limit_pkts", FQ_DEFAULT_FLOW_LIMIT_PKTS)
    if default > limit:
        t.err(t.here("default_limit_pkts"), f"must be <= limit_pkts ({limit}), got {default}")
    t.done()
    return Lfq(**v)


_PIE = {"target_ms": ("pos", None, 60_000.0), "tupdate_ms": ("num", 0.1, 60_000.0), "alpha": ("pos", None, 2.0),
        "beta": ("num", 0.0, 2.0), "max_burst_ms": ("num", 0.0, 60_000.0), "limit_pkts": ("int", 1, 10_000_000),
        "ecn": ("bool", None, None), "bytemode": ("bool", None, None)}
"""pie's fields and fq_pie's PIE fields; ranges as linkemu checks them (config/pie.rs)."""


def _pie(t: Table) -> Pie:
    """The pie qdisc table (RFC 8033, Linux sch_pie's fields)."""
    v = _optional(t, _PIE)
    t.done()
    return Pie(**v)


def _fq_pie(t: Table) -> FqPie:
    """The fq_pie qdisc table: fq_codel's flow queues, PIE's fields, ``ecn_prob_pct``."""
    v = _optional(t, {**_FQ_QUEUES, **_PIE, "ecn_prob_pct": ("num", 0.0, 100.0)})
    t.done()
    return FqPie(**v)


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
    v = _optional(t, {"proto": ("int", 0, 255), "sport": ("int", 0, 65_535), "dport": ("int", 0, 65_535)})
    t.done()
    return VdqPolicyRule(policy=policy, **addrs, **v)


def _vdq_csaqm(t: Table) -> VdqCsaqm:
    """The vdq_csaqm qdisc table; ranges as linkemu checks them (config/vdq.rs)."""
    v = _optional(t, {"rate_mbit": ("pos", None, 1e6), "vq0_rate": ("pos", None, 1.0), "vq1_rate": ("pos", None, 1.0),
                      "qmax0_ms": ("num", 0.1, 60_000.0), "qmax1_ms": ("num", 0.1, 60_000.0),
                      "target0_ms": ("num", 0.01, 60_000.0), "target1_ms": ("num", 0.01, 60_000.0),
                      "tupdate_ms": ("num", 0.1, 60_000.0), "rate_window_ms": ("num", 0.1, 60_000.0),
                      "idle_timeout_ms": ("num", 1.0, 60_000.0), "classic_ecn": ("bool", None, None)})
    if v.get("vq0_rate", 0.9) > v.get("vq1_rate", 0.984):
        t.err(t.here("vq0_rate"), f"must be <= vq1_rate ({v.get('vq1_rate', 0.984):g}), got {v.get('vq0_rate', 0.9):g}")
    classifier = t.string("classifier", None, choices=VDQ_CLASSIFIERS)
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
    default_policy = t.string("default_policy", None, choices=VDQ_POLICIES)
    rules: tuple[VdqPolicyRule, ...] | None = None
    if t.has("policies"):
        raw = t.array("policies")
        rules = tuple(_vdq_rule(Table(r, f"{t.here('policies')}[{i}]", t.err)) for i, r in enumerate(raw))
    else:
        t.used.add("policies")
    t.done()
    return VdqCsaqm(classifier=classifier, l_dscp=dscp, default_policy=default_policy, policies=rules, **v)


def _qdisc(t: Table) -> Pfifo | Codel | DualPi2 | FqCodel | Fq | Lfq | Pie | FqPie | VdqCsaqm:
    kind = t.string("kind", required=True, choices=QDISC_KINDS)
    if kind == "vdq_csaqm":
        return _vdq_csaqm(t)
    if kind == "pie":
        return _pie(t)
    if kind == "fq_pie":
        return _fq_pie(t)
    if kind == "dualpi2":
        return _dualpi2(t)
    if kind == "fq_codel":
        return _fq_codel(t)
    if kind == "fq":
        return _fq(t)
    if kind == "lfq":
        return _lfq(t)
    limit = int(t.integer("limit_pkts", 1000, lo=1, hi=10_000_000) or 1000)
    if kind == "pfifo":
        q: Pfifo | Codel = Pfifo(limit)
    else:
        q = Codel(target_ms=float(t.number("target_ms", 5.0, lo=0.0, lo_open=True, hi=60_000.0) or 5.0),
                  interval_ms=float(t.number("interval_ms", 100.0, lo=0.0, lo_open=True, hi=60_000.0) or 100.0),
                  limit_pkts=limit, ecn=t.boolean("ecn", False))
    t.done()
    return q


def _link_dir(t: Table | None, base_dir: Path, default: LinkDir) -> LinkDir:
    if t is None:
        return default
    rate = t.number("rate_mbit", None, lo=0.0, lo_open=True, hi=1e6)
    trace_s = t.string("trace")
    trace: Path | None = None
    if trace_s is not None:
        if rate is not None:
            t.err(t.here("trace"), "give rate_mbit or trace, not both")
        trace = (base_dir / trace_s).resolve()
        if not trace.is_file():
            t.err(t.here("trace"), f"trace file {trace} does not exist")
    elif rate is None and not t.has("rate_mbit"):
        rate, trace = default.rate_mbit, default.trace
    delay = float(t.number("delay_ms", default.delay_ms, lo=0.0, hi=100_000.0) or 0.0)
    lt = t.table("loss")
    qt = t.table("qdisc")
    extra = _optional(t, {"overhead_bytes": ("int", 0, 65_535), "trace_bytes_per_opportunity": ("int", 1, 1 << 20)})
    t.done()
    qdisc = _qdisc(qt) if qt is not None else default.qdisc
    if isinstance(qdisc, VdqCsaqm) and qdisc.rate_mbit is None and rate is None:
        t.err(f"{t.here('qdisc')}.rate_mbit", "required: the link has no rate_mbit (trace or unlimited), "
                                             "and vdq_csaqm's virtual queues need the capacity C")
    return LinkDir(rate_mbit=rate, trace=trace, delay_ms=delay, loss=_loss(lt) if lt is not None else None,
                   qdisc=qdisc,
                   overhead_bytes=extra.get("overhead_bytes", default.overhead_bytes),
                   trace_bytes_per_opportunity=extra.get("trace_bytes_per_opportunity",
                                                         default.trace_bytes_per_opportunity))


def _dist(t: Table) -> Dist:
    kind = t.string("dist", required=True, choices=("constant", "uniform", "exponential", "lognormal"))
    need = {"constant": ("us",), "uniform": ("min_us", "max_us"), "exponential": ("mean_us",),
            "lognormal": ("median_us", "sigma")}[kind or "constant"]
    vals = {k: t.number(k, required=True, lo=0.0) for k in need}
    if kind == "uniform" and (vals["max_us"] or 0.0) < (vals["min_us"] or 0.0):
        t.err(t.here("max_us"), "must be >= min_us")
    if kind == "lognormal" and not vals["median_us"]:
        t.err(t.here("median_us"), "must be > 0")
    t.done()
    return Dist(dist=kind or "constant", **vals)


def _wifi(t: Table, clients: int) -> Wifi:
    rows = t.array("clients")
    if len(rows) != clients:
        t.err(t.here("clients"), f"needs one entry per client ({clients}), got {len(rows)}")
    stations = []
    for i, row in enumerate(rows):
        rt = Table(row, f"{t.here('clients')}[{i}]", t.err)
        rate = float(rt.number("phy_rate_mbit", required=True, lo=0.0, lo_open=True, hi=1e5) or 0.0)
        up = rt.number("uplink_phy_rate_mbit", None, lo=0.0, lo_open=True, hi=1e5)
        rt.done()
        stations.append(WifiClient(rate, up))
    agg = Aggregation()
    if (at := t.table("aggregation")) is not None:
        agg = Aggregation(**_optional(at, {"max_frames": ("int", 1, 1024), "max_bytes": ("int", 1600, 1 << 24),
                                           "max_wait_us": ("num", 0.0, 1e6), "max_ppdu_us": ("pos", None, 1e6)}))
        at.done()
    acc = AccessDelay()
    if (dt := t.table("access_delay_us")) is not None:
        vals = _optional(dt, {"slot_us": ("pos", None, 1e5), "aifs_us": ("num", 0.0, 1e6),
                              "cw_min": ("int", 0, 65_535), "cw_max": ("int", 0, 65_535),
                              "retry_limit": ("int", 0, 255), "collisions": ("bool", None, None)})
        lo_cw, hi_cw = vals.get("cw_min", 15), vals.get("cw_max", 1023)
        if lo_cw > hi_cw:
            dt.err(dt.here("cw_max"), f"must be >= cw_min ({lo_cw}), got {hi_cw}")
        xt = dt.table("extra")
        acc = AccessDelay(**vals, extra=_dist(xt) if xt is not None else None)
        dt.done()
    phy = PhyOverheads()
    if (pt := t.table("phy")) is not None:
        phy = PhyOverheads(**_optional(pt, {"preamble_us": ("num", 0.0, 1e4), "sifs_us": ("num", 0.0, 1e4),
                                            "block_ack_us": ("num", 0.0, 1e4),
                                            "mpdu_overhead_bytes": ("int", 0, 1024)}))
        pt.done()
    qt = t.table("queue")
    queue = _qdisc(qt) if qt is not None else None
    if isinstance(queue, DualPi2 | FqCodel | Fq | Lfq | Pie | FqPie | VdqCsaqm):
        t.err(f"{t.here('queue')}.kind", f"{queue.to_config()['kind']} is supported on link.uplink/downlink only, "
                                          "not WiFi queues (use pfifo or codel)")
    wifi = Wifi(tuple(stations), agg, acc, phy, queue)
    t.done()
    return wifi


def _link(t: Table | None, base_dir: Path, clients: int) -> Link:
    if t is None:
        return Link()
    emulator = t.string("emulator", "linkemu", choices=EMULATORS) or "linkemu"
    up = _link_dir(t.table("uplink"), base_dir, LinkDir())
    down = _link_dir(t.table("downlink"), base_dir, replace(up, loss=None))
    wt = t.table("wifi")
    wifi = _wifi(wt, clients) if wt is not None else None
    delays = t.array("client_delay_ms")
    if delays:
        if len(delays) != clients:
            t.err(t.here("client_delay_ms"), f"needs one value per client ({clients}), got {len(delays)}")
        for i, d in enumerate(delays):
            if isinstance(d, bool) or not isinstance(d, int | float) or not 0 <= d <= 60_000:
                t.err(f"{t.here('client_delay_ms')}[{i}]", f"must be a number of ms in 0..60000, got {d!r}")
    t.done()
    link = Link(emulator=emulator, uplink=up, downlink=down, wifi=wifi,
                client_delay_ms=tuple(float(d) for d in delays))
    if emulator == "kernel":
        _check_kernel_link(link, t)
    return link


def _check_kernel_link(link: Link, t: Table) -> None:
    """The kernel fallback (bridge + htb + pfifo) only shapes the uplink's rate."""
    kernel = "with emulator = \"kernel\" (bridge + htb + pfifo on the uplink; use linkemu)"
    if link.wifi is not None:
        t.err(t.here("wifi"), f"not supported {kernel}")
    if any(link.client_delay_ms):
        t.err(t.here("client_delay_ms"), f"not supported {kernel}")
    for name, d in (("uplink", link.uplink), ("downlink", link.downlink)):
        if d.trace is not None:
            t.err(f"{t.here(name)}.trace", f"not supported {kernel}")
        if d.delay_ms:
            t.err(f"{t.here(name)}.delay_ms", f"must be 0 {kernel}")
        if d.loss is not None:
            t.err(f"{t.here(name)}.loss", f"not supported {kernel}")
        if d.qdisc is not None and not isinstance(d.qdisc, Pfifo):
            t.err(f"{t.here(name)}.qdisc.kind", f"only \"pfifo\" {kernel}")


def _flows(rows: list[Any], clients: int, duration: float, ccas: Sequence[str], err: Err) -> list[Flow]:
    if not rows:
        err("flows", "at least one [[flows]] entry is required")
    flows: list[Flow] = []
    names: set[str] = set()
    for i, row in enumerate(rows):
        t = Table(row, f"flows[{i}]", err)
        client = int(t.integer("client", required=True, lo=1, hi=clients) or 1)
        cca = t.string("cca", required=True) or ""
        if cca not in ccas:
            err(t.here("cca"), f"unknown congestion control {cca!r} (available: {', '.join(ccas)})")
        start = float(t.number("start_s", 0.0, lo=0.0) or 0.0)
        if start >= duration:
            err(t.here("start_s"), f"must be before the end of the run ({duration:g} s), got {start:g}")
        dur = float(t.number("duration_s", duration - start, lo=1.0) or 0.0)
        if start + dur > duration + 1e-9:
            err(t.here("duration_s"), f"start_s + duration_s = {start + dur:g} s exceeds the run's "
                                      f"duration_s = {duration:g}")
        kind = t.string("kind", "bulk", choices=FLOW_KINDS) or "bulk"
        name = t.string("name", f"C{client}") or ""
        if not NAME_RE.match(name):
            err(t.here("name"), f"{name!r} is not a valid name (letters, digits, '.', '_', '-')")
        if name in names:
            err(t.here("name"), f"duplicate flow name {name!r} (give each flow of a client its own name)")
        names.add(name)
        t.done()
        flows.append(Flow(index=i, name=name, client=client, cca=cca, start_s=start, duration_s=dur,
                          kind=kind))
    return flows


def _switches(rows: list[Any], flows: Sequence[Flow], ccas: Sequence[str], err: Err) -> list[Switch]:
    by_name = {f.name: f for f in flows}
    out = []
    for i, row in enumerate(rows):
        t = Table(row, f"switches[{i}]", err)
        at = float(t.number("at_s", required=True, lo=0.0, lo_open=True) or 0.0)
        name = t.string("flow", required=True) or ""
        if name not in by_name:
            err(t.here("flow"), f"no flow named {name!r} (flows: {', '.join(by_name)})")
        f = by_name[name]
        if not f.start_s < at < f.end_s:
            err(t.here("at_s"), f"{at:g} s is outside flow {name}'s lifetime ({f.start_s:g}-{f.end_s:g} s)")
        cca = t.string("cca", required=True) or ""
        if cca not in ccas:
            err(t.here("cca"), f"unknown congestion control {cca!r} (available: {', '.join(ccas)})")
        inherit = t.string("inherit", "limited", choices=INHERIT_MODES) or "limited"
        t.done()
        out.append(Switch(at_s=at, flow=name, cca=cca, inherit=inherit))
    return sorted(out, key=lambda s: s.at_s)


def _daemon(top: Table, clients: int, ccas: Sequence[str], err: Err,
            base_dir: Path) -> DaemonSettings | None:
    """``daemon = true|false`` or a ``[daemon]`` table (the daemon on, with settings)."""
    raw = top.data.get("daemon", False)
    if isinstance(raw, bool):
        top.boolean("daemon", False)
        if raw and not DAEMON_AVAILABLE:
            err("daemon", "the switching daemon is not available here; set daemon = false")
        return DaemonSettings() if raw else None
    if not isinstance(raw, dict):
        err("daemon", f"must be true, false or a table ([daemon] with settings), got {tname(raw)} {raw!r}")
    t = top.table("daemon")
    assert t is not None
    policy = t.string("policy", "dqn", choices=DAEMON_POLICIES) or "dqn"
    tick = float(t.number("tick_s", DAEMON_TICK_S, lo=0.1, hi=10.0) or DAEMON_TICK_S)
    inherit = t.string("inherit", "limited", choices=INHERIT_MODES) or "limited"
    cca = t.string("cca")
    if cca is not None and cca not in ccas:
        err(t.here("cca"), f"unknown congestion control {cca!r} (available: {', '.join(ccas)})")
    if policy == "static" and cca is None:
        err(t.here("cca"), 'missing: policy = "static" needs the CCA to put every flow on (e.g. cca = "cubic")')
    if policy != "static" and cca is not None:
        err(t.here("cca"), f'only used with policy = "static" (policy is {policy!r}); remove it')
    on = t.array("clients")
    if not all(isinstance(c, int) and not isinstance(c, bool) and 1 <= c <= clients for c in on):
        err(t.here("clients"), f"must be an array of client numbers 1..{clients}, got {on!r}")
    if len(set(on)) != len(on):
        err(t.here("clients"), f"lists a client twice: {on!r}")
    guard: list[tuple[str, Any]] = []
    if (gt := t.table("guard")) is not None:
        for key, v in gt.data.items():
            gt.used.add(key)
            if not re.match(r"^[a-z][a-z0-9_]*$", key):
                err(gt.here(key), "is not a valid key (lower-case letters, digits, '_')")
            if isinstance(v, dict | list):
                err(gt.here(key), f"must be a number, boolean or string, got {tname(v)}")
            guard.append((key, v))
    policy_file = None
    if (pf := t.string("policy_file")) is not None:
        policy_file = (base_dir / pf).resolve()
        if policy != "dqn":
            err(t.here("policy_file"), f'only used with policy = "dqn" (policy is {policy!r}); remove it')
        elif not policy_file.is_file():
            err(t.here("policy_file"), f"no such file: {policy_file} (a path relative to the scenario file)")
    t.done()
    if not DAEMON_AVAILABLE:
        err("daemon", "the switching daemon is not available here; remove the [daemon] table")
    settings = DaemonSettings(policy=policy, tick_s=tick, inherit=inherit, cca=cca,
                              clients=tuple(sorted(int(c) for c in on)), guard=tuple(guard),
                              policy_file=policy_file)
    for problem in check_settings(settings):  # "guard.margin: must be >= 0, got -1.0"
        key, _, msg = problem.partition(": ")
        err(f"daemon.{key}" if key.startswith("guard.") and msg else "daemon", msg if msg else problem)
    return settings


def default_ccas() -> list[str]:
    """CCAs a scenario may use here: the kernel's list plus ccswitch's BPF PCC and Prague."""
    from ccswitch.host import available_ccas

    try:
        found = set(available_ccas())
    except OSError:
        found = set(FALLBACK_CCAS)
    return sorted(found | {"pcc", "prague"})


def parse_scenario(text: str, where: str = "scenario", *, base_dir: Path | None = None,
                   ccas: Sequence[str] | None = None, source: Path | None = None) -> Scenario:
    """Validate TOML *text*; *where* prefixes error messages (usually the file name)."""
    err = Err(where)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ScenarioError(f"{where}: invalid TOML: {e}") from None
    ccas = sorted(ccas) if ccas is not None else default_ccas()
    base_dir = base_dir or Path.cwd()
    top = Table(data, "", err)

    default_name = source.stem if source else "scenario"
    name = top.string("name", default_name) or default_name
    if not NAME_RE.match(name):
        err("name", f"{name!r} is not a valid name (letters, digits, '.', '_', '-'; at most 64)")
    description = top.string("description", "") or ""
    duration = float(top.number("duration_s", required=True, lo=1.0, hi=86_400.0) or 0.0)
    interval = float(top.number("sample_interval_s", 1.0, lo=MIN_INTERVAL_S, hi=60.0) or 1.0)
    if interval > duration:
        err("sample_interval_s", f"must not exceed duration_s ({duration:g}), got {interval:g}")

    raw_flows = top.array("flows")
    max_client = max((r.get("client", 1) for r in raw_flows if isinstance(r, dict)
                      and isinstance(r.get("client"), int) and not isinstance(r.get("client"), bool)),
                     default=1)
    clients = int(top.integer("clients", max(1, max_client), lo=1, hi=MAX_CLIENTS) or 1)

    daemon = _daemon(top, clients, ccas, err, base_dir)

    repetitions = top.integer("repetitions", None, lo=1, hi=1000)
    seeds_raw = top.raw("seeds")
    if seeds_raw is not None:
        if not isinstance(seeds_raw, list) or not seeds_raw or not all(
                isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds_raw):
            err("seeds", "must be a non-empty array of non-negative integers")
        if repetitions is not None and len(seeds_raw) != repetitions:
            err("seeds", f"has {len(seeds_raw)} entries but repetitions = {repetitions} (one seed per run)")
        seeds = tuple(int(s) for s in seeds_raw)
    else:
        seeds = tuple(range(1, (repetitions or 1) + 1))

    link = _link(top.table("link"), base_dir, clients)
    flows = _flows(raw_flows, clients, duration, ccas, err)
    switches = _switches(top.array("switches"), flows, ccas, err)

    ct = top.table("capture")
    capture = Capture()
    if ct is not None:
        capture = Capture(tshark=ct.boolean("tshark", True),
                          snaplen=int(ct.integer("snaplen", 96, lo=64, hi=65535) or 96),
                          emulator_per_packet=ct.boolean("emulator_per_packet", False))
        ct.done()
    top.done()
    return Scenario(
        name=name, description=description, duration_s=duration, clients=clients, flows=tuple(flows),
        link=link, switches=tuple(switches), repetitions=len(seeds), seeds=seeds,
        sample_interval_s=interval, daemon=daemon, capture=capture, source=source, text=text,
    )


def load_scenario(path: str | Path, *, ccas: Sequence[str] | None = None) -> Scenario:
    """Read and validate a scenario file; raises :class:`ScenarioError` (one line)."""
    p = Path(path)
    text = read_file(p)
    return parse_scenario(text, p.name, base_dir=p.parent.resolve(), ccas=ccas, source=p.resolve())
