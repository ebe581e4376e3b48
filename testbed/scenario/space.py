"""Scenario space files: the one definition of the conditions the matrix draws scenarios from.

A space is a TOML file (the shipped one: ``testbed/scenarios/space.toml``)::

    name = "wifi-clients"          # names the space in indexes and reports
    duration_s = 30                # every drawn scenario's length (metrics: the last half)
    sample_interval_s = 1.0

    [splits]                       # share of the hash space per split; sum 1 (see generate.py)
    train = 0.70
    dev = 0.15
    test = 0.15

    [clients]
    count = [2, 6]                 # uniform integer
    unmanaged_p = 0.25             # per client: it does not run ccswitchd (never all clients)

    [rtt]
    base_ms = [2, 100]             # log-uniform: the path RTT without queueing
    unequal_p = 0.5                # the clients' RTTs differ (extra ACK delay per client)
    ratio = [1.5, 8]               # log-uniform: largest / smallest client RTT when unequal
    max_ms = 300                   # no client's base RTT above this (the ratio shrinks)

    [bottleneck]
    rate_mbit = [10, 200]          # log-uniform: the constant rate, or the trace's mean
    kind = { constant = 0.55, step = 0.1, ramp = 0.1, variable = 0.1, real = 0.15 }
    step_factor = [0.25, 0.6]      # step: the rate drops to this share of it, then returns
    ramp_factor = [0.3, 0.7]       # ramp: from this share of the rate to 1 (or back)
    variable_sigma = 0.25          # variable: log-rate AR(1) per 1 s, phi 0.8, this sigma
    real_traces = "traces/real"    # folder of Mahimahi traces (relative to the space file)

    [loss]
    kind = { none = 0.6, bernoulli = 0.25, gilbert = 0.15 }
    p = [0.0005, 0.02]             # log-uniform long-run loss rate
    burst_pkts = [2, 8]            # gilbert: mean burst length (uniform)

    [wifi]
    profile = { none = 0.2, light = 0.45, heavy = 0.35 }   # PROFILES below
    rate_anomaly_p = 0.3           # one client at a lower PHY rate (the 802.11 rate anomaly)
    phy_rate_mbit = 300
    slow_phy_rate_mbit = [24, 150] # log-uniform, raised until the medium can carry the bottleneck

    [queue]
    kind = { pfifo = 0.6, codel = 0.25, dualpi2 = 0.15 }
    pfifo_bdp = [0.25, 4]          # log-uniform, in bandwidth-delay products (>= 4 packets)

    [ccas]
    mix = { cubic = 0.35, bbr = 0.35, pcc = 0.15, reno = 0.15 }   # each client's bulk flow

    [churn]
    late_joiner_p = 0.3            # one bulk flow starts at 10-40 % of the run
    early_stopper_p = 0.2          # one bulk flow ends at 60-85 % of the run
    web_p = 0.25                   # one client also runs short web-like flows
    web_flows = [3, 6]
    web_duration_s = [1, 3]

Ranges are ``[lo, hi]``; weight tables name their choices (unknown names are
errors) and need not sum to 1.  Every mistake is one :class:`ScenarioError`
line naming the file and the field, as for scenario files.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .model import ScenarioError
from .tables import Err, Table, read_file

SPLITS = ("train", "dev", "test")
BOTTLENECK_KINDS = ("constant", "step", "ramp", "variable", "real")
LOSS_KINDS = ("none", "bernoulli", "gilbert")
QUEUE_KINDS = ("pfifo", "codel", "dualpi2")
SPACE_CCAS = ("cubic", "bbr", "pcc", "reno")

WIFI_PROFILES: dict[str, dict[str, Any] | None] = {
    "none": None,  # wired clients: no shared medium
    # paper 002's end-to-end link: light EDCA jitter on top of contention
    "light": {"access_delay_us": {"extra": {"dist": "exponential", "mean_us": 100}}},
    # a busy channel: heavy-tailed extra access delay and aggregation that waits to fill
    "heavy": {"access_delay_us": {"extra": {"dist": "lognormal", "median_us": 500, "sigma": 1.2}},
              "aggregation": {"max_wait_us": 500}},
}
"""WiFi medium profiles: linkemu ``wifi`` settings beside the per-client PHY rates."""


@dataclass(frozen=True)
class Range:
    lo: float
    hi: float


@dataclass(frozen=True)
class Space:
    """A validated space file (fields as in the module docstring)."""

    name: str
    duration_s: float
    sample_interval_s: float
    splits: dict[str, float]
    clients: Range
    unmanaged_p: float
    rtt_base_ms: Range
    rtt_unequal_p: float
    rtt_ratio: Range
    rtt_max_ms: float
    rate_mbit: Range
    bottleneck_kind: dict[str, float]
    step_factor: Range
    ramp_factor: Range
    variable_sigma: float
    real_traces: tuple[Path, ...]
    loss_kind: dict[str, float]
    loss_p: Range
    burst_pkts: Range
    wifi_profile: dict[str, float]
    rate_anomaly_p: float
    phy_rate_mbit: float
    slow_phy_rate_mbit: Range
    queue_kind: dict[str, float]
    pfifo_bdp: Range
    cca_mix: dict[str, float]
    late_joiner_p: float
    early_stopper_p: float
    web_p: float
    web_flows: Range
    web_duration_s: Range
    source: Path | None = None


def _range(t: Table, key: str, lo: float, hi: float, *, integer: bool = False) -> Range:
    v = t.raw(key)
    if v is None:
        t.err(t.here(key), f"missing (an array [lo, hi] within {lo:g}..{hi:g} is required)")
    if not isinstance(v, list) or len(v) != 2 or not all(
            isinstance(x, int | float) and not isinstance(x, bool) for x in v):
        t.err(t.here(key), f"must be an array [lo, hi] of two numbers, got {v!r}")
    a, b = float(v[0]), float(v[1])
    if integer and (a != int(a) or b != int(b)):
        t.err(t.here(key), f"must be two integers, got {v!r}")
    if not lo <= a <= b <= hi:
        t.err(t.here(key), f"must satisfy {lo:g} <= lo <= hi <= {hi:g}, got {v!r}")
    return Range(a, b)


def _prob(t: Table, key: str) -> float:
    return float(t.number(key, required=True, lo=0.0, hi=1.0) or 0.0)


def _weights(t: Table, key: str, choices: tuple[str, ...]) -> dict[str, float]:
    wt = t.table(key)
    if wt is None:
        t.err(t.here(key), f"missing (a table of weights over {', '.join(choices)})")
    assert wt is not None
    out = {}
    for k in wt.data:
        if k not in choices:
            t.err(wt.here(k), f"unknown choice {k!r} (use {', '.join(choices)})")
        out[k] = float(wt.number(k, lo=0.0) or 0.0)
    if sum(out.values()) <= 0:
        t.err(t.here(key), "needs at least one weight > 0")
    wt.done()
    return out


def parse_space(text: str, where: str = "space", *, base_dir: Path | None = None,
                source: Path | None = None) -> Space:
    """Validate TOML *text*; *where* prefixes error messages (usually the file name)."""
    err = Err(where)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ScenarioError(f"{where}: invalid TOML: {e}") from None
    base_dir = base_dir or Path.cwd()
    top = Table(data, "", err)
    name = top.string("name", required=True) or ""
    duration = float(top.number("duration_s", required=True, lo=10.0, hi=600.0) or 0.0)
    interval = float(top.number("sample_interval_s", 1.0, lo=0.1, hi=5.0) or 1.0)

    def need(key: str) -> Table:
        t = top.table(key)
        if t is None:
            err(key, f"missing table [{key}]")
        assert t is not None
        return t

    st = need("splits")
    splits = {}
    for k in st.data:
        if k not in SPLITS:
            err(st.here(k), f"unknown split {k!r} (use {', '.join(SPLITS)})")
    for k in SPLITS:
        splits[k] = float(st.number(k, required=True, lo=0.0, hi=1.0, lo_open=True) or 0.0)
    if abs(sum(splits.values()) - 1.0) > 1e-9:
        err("splits", f"the shares must sum to 1, got {sum(splits.values()):g}")
    st.done()

    ct = need("clients")
    clients = _range(ct, "count", 1, 32, integer=True)
    unmanaged = _prob(ct, "unmanaged_p")
    ct.done()

    rt = need("rtt")
    base = _range(rt, "base_ms", 0.5, 1000)
    unequal = _prob(rt, "unequal_p")
    ratio = _range(rt, "ratio", 1.0, 20.0)
    max_ms = float(rt.number("max_ms", required=True, lo=base.hi) or 0.0)
    rt.done()

    bt = need("bottleneck")
    rate = _range(bt, "rate_mbit", 0.5, 10_000)
    bkind = _weights(bt, "kind", BOTTLENECK_KINDS)
    step = _range(bt, "step_factor", 0.05, 1.0)
    ramp = _range(bt, "ramp_factor", 0.05, 1.0)
    sigma = float(bt.number("variable_sigma", required=True, lo=0.0, hi=2.0) or 0.0)
    traces: tuple[Path, ...] = ()
    folder = bt.string("real_traces")
    if folder is not None:
        d = (base_dir / folder).resolve()
        traces = tuple(sorted(d.glob("*.trace"))) if d.is_dir() else ()
        if not traces and bkind.get("real", 0) > 0:
            err(bt.here("real_traces"), f"no *.trace file in {d} (kind.real > 0 needs real traces)")
    elif bkind.get("real", 0) > 0:
        err(bt.here("real_traces"), "missing: kind.real > 0 needs a folder of Mahimahi traces")
    bt.done()

    lt = need("loss")
    lkind = _weights(lt, "kind", LOSS_KINDS)
    loss_p = _range(lt, "p", 0.0, 0.5)
    burst = _range(lt, "burst_pkts", 1.0, 100.0)
    lt.done()

    wt = need("wifi")
    profile = _weights(wt, "profile", tuple(WIFI_PROFILES))
    anomaly = _prob(wt, "rate_anomaly_p")
    phy = float(wt.number("phy_rate_mbit", required=True, lo=1.0, hi=1e5) or 0.0)
    slow = _range(wt, "slow_phy_rate_mbit", 1.0, phy)
    wt.done()

    qt = need("queue")
    qkind = _weights(qt, "kind", QUEUE_KINDS)
    bdp = _range(qt, "pfifo_bdp", 0.01, 100.0)
    qt.done()

    cc = need("ccas")
    mix = _weights(cc, "mix", SPACE_CCAS)
    cc.done()

    ht = need("churn")
    late = _prob(ht, "late_joiner_p")
    early = _prob(ht, "early_stopper_p")
    web = _prob(ht, "web_p")
    web_flows = _range(ht, "web_flows", 1, 20, integer=True)
    web_dur = _range(ht, "web_duration_s", 1.0, duration / 4)
    ht.done()
    top.done()
    return Space(name=name, duration_s=duration, sample_interval_s=interval, splits=splits, clients=clients,
                 unmanaged_p=unmanaged, rtt_base_ms=base, rtt_unequal_p=unequal, rtt_ratio=ratio, rtt_max_ms=max_ms,
                 rate_mbit=rate, bottleneck_kind=bkind, step_factor=step, ramp_factor=ramp, variable_sigma=sigma,
                 real_traces=traces, loss_kind=lkind, loss_p=loss_p, burst_pkts=burst, wifi_profile=profile,
                 rate_anomaly_p=anomaly, phy_rate_mbit=phy, slow_phy_rate_mbit=slow, queue_kind=qkind,
                 pfifo_bdp=bdp, cca_mix=mix, late_joiner_p=late, early_stopper_p=early, web_p=web,
                 web_flows=web_flows, web_duration_s=web_dur, source=source)


def is_space_file(path: str | Path) -> bool:
    """Whether *path* is a space file rather than a scenario: it has the ``[splits]`` table that only a
    space has (a folder of scenarios may hold the space they were drawn from, as testbed/scenarios does).
    A file that is not valid TOML is no space (its scenario parse reports it)."""
    try:
        data = tomllib.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False
    return isinstance(data.get("splits"), dict)


def load_space(path: str | Path) -> Space:
    """Read and validate a space file; raises :class:`ScenarioError` (one line)."""
    p = Path(path)
    text = read_file(p, "the shipped space is testbed/scenarios/space.toml")
    return parse_space(text, p.name, base_dir=p.parent.resolve(), source=p.resolve())
