"""Scenario files -> :mod:`.model` objects: the only place that validates them.

Every mistake is one :class:`ScenarioError` naming the file and the field.
The daemon's settings are checked by the daemon's own validator
(:func:`.daemon_config.check_settings`).
"""

from __future__ import annotations

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
    EMULATORS,
    FALLBACK_CCAS,
    FLOW_KINDS,
    INHERIT_MODES,
    MAX_CLIENTS,
    MIN_INTERVAL_S,
    NAME_RE,
    TCP_ECN_MODES,
    AccessDelay,
    Aggregation,
    BernoulliLoss,
    Capture,
    DaemonSettings,
    Dist,
    DualPi2,
    Flow,
    Fq,
    FqCodel,
    FqDualPi2,
    FqPie,
    GilbertLoss,
    Lfq,
    Link,
    LinkDir,
    Pfifo,
    PhyOverheads,
    Pie,
    RemoteDecisions,
    Scenario,
    ScenarioError,
    Switch,
    VdqCsaqm,
    Wifi,
    WifiClient,
)
from .parse_qdisc import optional_fields, parse_qdisc
from .tables import Err, Table, read_file, tname


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
    extra = optional_fields(t, {"overhead_bytes": ("int", 0, 65_535),
                                "trace_bytes_per_opportunity": ("int", 1, 1 << 20)})
    t.done()
    qdisc = parse_qdisc(qt, base_dir) if qt is not None else default.qdisc
    if isinstance(qdisc, VdqCsaqm) and qdisc.rate_mbit is None and rate is None:
        t.err(f"{t.here('qdisc')}.rate_mbit", "required: the link has no rate_mbit (trace or unlimited), "
                                             "and vdq_csaqm's virtual queues need the capacity C")
    if isinstance(qdisc, DualPi2) and qdisc.agent is not None and rate is None and qdisc.agent_rate_mbit is None:
        t.err(f"{t.here('qdisc')}.agent", "needs the link's rate_mbit, or agent_rate_mbit in the qdisc table on a "
                                          "trace-driven link (the agent's utilisation is measured against it)")
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
        agg = Aggregation(**optional_fields(at, {"max_frames": ("int", 1, 1024), "max_bytes": ("int", 1600, 1 << 24),
                                           "max_wait_us": ("num", 0.0, 1e6), "max_ppdu_us": ("pos", None, 1e6)}))
        at.done()
    acc = AccessDelay()
    if (dt := t.table("access_delay_us")) is not None:
        vals = optional_fields(dt, {"slot_us": ("pos", None, 1e5), "aifs_us": ("num", 0.0, 1e6),
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
        phy = PhyOverheads(**optional_fields(pt, {"preamble_us": ("num", 0.0, 1e4), "sifs_us": ("num", 0.0, 1e4),
                                            "block_ack_us": ("num", 0.0, 1e4),
                                            "mpdu_overhead_bytes": ("int", 0, 1024)}))
        pt.done()
    qt = t.table("queue")
    queue = parse_qdisc(qt) if qt is not None else None
    if isinstance(queue, DualPi2 | FqCodel | Fq | Lfq | Pie | FqPie | VdqCsaqm | FqDualPi2):
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
    remote = None
    if (rt := t.table("remote")) is not None:
        if policy != "dqn":
            err(t.here("remote"), f'only used with policy = "dqn" (policy is {policy!r}); remove it')
        remote = _remote(rt)
    t.done()
    if not DAEMON_AVAILABLE:
        err("daemon", "the switching daemon is not available here; remove the [daemon] table")
    settings = DaemonSettings(policy=policy, tick_s=tick, inherit=inherit, cca=cca,
                              clients=tuple(sorted(int(c) for c in on)), guard=tuple(guard),
                              policy_file=policy_file, remote=remote)
    for problem in check_settings(settings):  # "guard.margin: must be >= 0, got -1.0"
        key, _, msg = problem.partition(": ")
        err(f"daemon.{key}" if key.startswith("guard.") and msg else "daemon", msg if msg else problem)
    return settings


def _remote(t: Table) -> RemoteDecisions:
    """``[daemon.remote]``: the policy server the runner starts (model.RemoteDecisions)."""
    latency = float(t.number("latency_ms", 0.0, lo=0.0, hi=10_000.0) or 0.0)
    deadline = float(t.number("deadline_ms", 0.0, lo=0.0, hi=10_000.0) or 0.0)
    if deadline and deadline <= latency:
        t.err(t.here("deadline_ms"), f"must be above latency_ms ({latency:g}), or every decision falls back "
                                     f"to the local policy; 0 = latency_ms + 150")
    out = RemoteDecisions(latency_ms=latency, deadline_ms=deadline, l4s=t.boolean("l4s", False),
                          joint=t.boolean("joint", False))
    t.done()
    return out


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

    tcp_ecn = top.raw("tcp_ecn")
    if tcp_ecn is not None and (isinstance(tcp_ecn, bool) or not isinstance(tcp_ecn, int)
                                or tcp_ecn not in TCP_ECN_MODES):
        err("tcp_ecn", f"must be 0 (no ECN), 1 (classic ECN on every flow) or 2 (only when asked, the kernel's "
                       f"default), got {tname(tcp_ecn)} {tcp_ecn!r}")

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
        sample_interval_s=interval, daemon=daemon, tcp_ecn=tcp_ecn, capture=capture, source=source, text=text,
    )


def load_scenario(path: str | Path, *, ccas: Sequence[str] | None = None) -> Scenario:
    """Read and validate a scenario file; raises :class:`ScenarioError` (one line)."""
    p = Path(path)
    text = read_file(p)
    return parse_scenario(text, p.name, base_dir=p.parent.resolve(), ccas=ccas, source=p.resolve())
