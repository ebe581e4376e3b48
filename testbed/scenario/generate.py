"""Draw scenarios from a space (:mod:`.space`) into ordinary scenario files plus an index.

    ccswitch testbed matrix generate SPACE.toml --split dev --count 30 --seed 1 --out DIR

How a scenario is drawn (candidate i of seed S):

1. ``numpy.random.default_rng([S, i])`` draws its *parameters* (:func:`draw`):
   clients, each client's RTT, the bottleneck (a constant rate or a rate
   profile that becomes a Mahimahi trace), loss, WiFi profile and PHY rates,
   queue, CCA per client, managed/unmanaged clients, churn and web-like flows.
   Floats are rounded (:data:`DIGITS`), so the parameters are a small JSON
   object.
2. The parameters' canonical JSON is hashed (SHA-256).  **The hash alone picks
   the split**: its first 52 bits as a fraction in [0, 1) fall into train, dev
   or test by the space's ``[splits]`` shares.  A parameter set therefore
   belongs to exactly one split whatever the seed, the candidate index or the
   generator version that drew it: splits are disjoint by construction.
3. Candidates are drawn in order i = 0, 1, ... and kept when they fall into the
   asked split (and are not a duplicate) until ``count`` are kept.  For a given
   seed and space the output is the same on every run; the committed dev and
   test splits (``testbed/scenarios/matrix/``) are the reference.

Rate profiles (uplink; the downlink carries ACKs at the mean rate):

    constant   rate_mbit throughout (no trace)
    step       rate_mbit, down to step_factor x rate_mbit at 30-50 % of the run,
               back up 20-35 % of the run later
    ramp       linearly from ramp_factor x rate_mbit to rate_mbit over the run
               (or down, half of the draws)
    variable   log-rate AR(1) per second: x_k = 0.8 x_(k-1) + N(0, sigma^2),
               rate = rate_mbit * exp(x_k - sigma^2 / (2 (1 - 0.8^2))) (mean rate_mbit),
               clipped to [0.2, 2.5] x rate_mbit
    real       a committed real-world capacity trace (``real_traces``), from a
               random offset, its level scaled so its mean is rate_mbit (the
               shape is real, the level is drawn)

Traces are written with ``trace_bytes_per_opportunity`` = 1500 x round(mean / 12 Mbit/s)
(about one line per millisecond at the mean rate) to keep the files small.

Derived values, with the reason:

* Client RTTs: base RTT split evenly between up- and downlink delay; a
  client's extra RTT goes on its ACK path (``client_delay_ms``); unequal
  RTTs draw a ratio (largest / smallest), the first client keeps the base RTT
  and the others are spread log-uniformly up to the ratio, shrunk so no RTT
  exceeds ``rtt.max_ms``.
* pfifo limit = max(4, round(bdp x rate x base RTT / 1500 B)) packets.
* WiFi: the clients' PHY rate is raised to 1.25 x the peak rate / eff (eff:
  the profile's rough MAC efficiency, MAC_EFFICIENCY: 0.75 light, 0.5 heavy)
  when the space's phy_rate_mbit is lower, so the medium is never the
  bottleneck by accident; a rate-anomaly client's slow PHY rate is raised
  until the medium's equal-throughput capacity n / sum(1 / (eff x phy_i)) is
  1.25 x the peak rate.
* Churn: a late joiner's flow starts at 10-40 % of the run (it is alive for
  the whole last half); an early stopper's flow ends at 60-85 %.  Web-like
  flows are short flows (kind "web") of one client, left out of the fairness
  metrics.
* Managed clients run ccswitchd (``[daemon] clients``); never all unmanaged.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .model import ScenarioError
from .parse import parse_scenario
from .space import SPLITS, WIFI_PROFILES, Space
from .traces import write_trace

GENERATOR_VERSION = 2
DIGITS = 3
"""Decimal places of every drawn float (the canonical form that is hashed)."""
MAC_EFFICIENCY = {"light": 0.75, "heavy": 0.5}
"""Share of the PHY rate the medium delivers per WiFi profile (A-MPDU aggregation; the heavy
profile's ~1 ms mean extra access delay and aggregation wait cost about a third more)."""
MEDIUM_HEADROOM = 1.25
INDEX_FIELDS = ("name", "file", "split", "hash", "space", "generator", "seed", "candidate", "clients", "managed",
                "rtt_base_ms", "rtt_ratio", "rate_mbit", "bottleneck", "loss", "loss_p", "wifi", "rate_anomaly",
                "queue", "queue_bdp", "ccas", "late_joiner", "early_stopper", "web_flows", "tags", "params")


# ------------------------------------------------------------------ drawing ---


def _r(x: float) -> float:
    return round(float(x), DIGITS)


def log_uniform(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(math.exp(rng.uniform(math.log(lo), math.log(hi)))) if hi > lo else float(lo)


def weighted_choice(rng: np.random.Generator, weights: dict[str, float]) -> str:
    keys = sorted(weights)
    w = np.array([weights[k] for k in keys], dtype=float)
    return keys[int(rng.choice(len(keys), p=w / w.sum()))]


def draw_bottleneck(rng: np.random.Generator, space: Space) -> tuple[str, dict[str, Any]]:
    """A bottleneck's rate shape drawn from the space: its kind and profile (times as fractions of the run;
    :func:`.traces.rate_series` and :func:`.traces.write_trace` turn them into rates)."""
    kind = weighted_choice(rng, space.bottleneck_kind)
    profile: dict[str, Any] = {}
    if kind == "step":
        t1 = rng.uniform(0.3, 0.5)
        profile = {"factor": _r(rng.uniform(space.step_factor.lo, space.step_factor.hi)), "down_at": _r(t1),
                   "up_at": _r(t1 + rng.uniform(0.2, 0.35))}
    elif kind == "ramp":
        profile = {"factor": _r(rng.uniform(space.ramp_factor.lo, space.ramp_factor.hi)),
                   "up": bool(rng.random() < 0.5)}
    elif kind == "variable":
        profile = {"sigma": _r(space.variable_sigma), "seed": int(rng.integers(1 << 31))}
    elif kind == "real":
        trace = space.real_traces[int(rng.integers(len(space.real_traces)))]
        profile = {"trace": trace.name, "offset": _r(rng.uniform(0.0, 1.0))}
    return kind, profile


def draw_loss(rng: np.random.Generator, space: Space) -> dict[str, Any]:
    """A bottleneck's random loss drawn from the space: ``{"kind": "none"}``, or Bernoulli / Gilbert with its
    mean rate ``p`` (log-uniform) and, for Gilbert, its mean burst ``burst_pkts``."""
    kind = weighted_choice(rng, space.loss_kind)
    loss: dict[str, Any] = {"kind": kind}
    if kind != "none":
        loss["p"] = round(log_uniform(rng, max(space.loss_p.lo, 1e-6), space.loss_p.hi), 5)
        if kind == "gilbert":
            loss["burst_pkts"] = _r(rng.uniform(space.burst_pkts.lo, space.burst_pkts.hi))
    return loss


def loss_model(loss: dict[str, Any]) -> dict[str, Any] | None:
    """linkemu's LOSS object for a drawn loss (None: none).  Gilbert: a bad state of mean length burst_pkts
    that drops every packet, entered so that the mean loss rate is p."""
    if loss["kind"] == "bernoulli":
        return {"model": "bernoulli", "p": loss["p"]}
    if loss["kind"] == "gilbert":
        p_bg = 1.0 / loss["burst_pkts"]
        p_gb = loss["p"] * p_bg / (1.0 - loss["p"])
        return {"model": "gilbert", "p_gb": float(f"{p_gb:.6g}"), "p_bg": float(f"{p_bg:.6g}"),
                "loss_good": 0.0, "loss_bad": 1.0}
    return None


def _client_rtts(space: Space, rng: np.random.Generator, n: int, base: float) -> list[float]:
    if n < 2 or rng.random() >= space.rtt_unequal_p:
        return [base] * n
    ratio = min(log_uniform(rng, space.rtt_ratio.lo, space.rtt_ratio.hi), space.rtt_max_ms / base)
    ratio = max(ratio, 1.0)
    others = [base * ratio ** float(u) for u in rng.uniform(0.0, 1.0, n - 1)]
    others[int(rng.integers(n - 1))] = base * ratio  # the drawn ratio is reached by one client
    return [base, *others]


def peak_factor(kind: str) -> float:
    """Peak / mean rate of a bottleneck kind (for sizing the WiFi medium)."""
    return {"constant": 1.0, "step": 1.0, "ramp": 1.0, "variable": 2.5, "real": 2.0}[kind]


def _phy_rates(space: Space, rng: np.random.Generator, n: int, peak: float,
               eff: float) -> tuple[list[float], bool]:
    fast = max(space.phy_rate_mbit, math.ceil(MEDIUM_HEADROOM * peak / eff))
    rates = [float(fast)] * n
    anomaly = n >= 2 and rng.random() < space.rate_anomaly_p
    if anomaly:
        slow = log_uniform(rng, space.slow_phy_rate_mbit.lo, space.slow_phy_rate_mbit.hi)
        need = MEDIUM_HEADROOM * peak  # n / (sum over stations of 1 / (eff * phy)) >= need
        inv_left = n / need - (n - 1) / (eff * fast)
        floor_slow = 1.0 / (eff * inv_left) if inv_left > 0 else fast
        slow = min(fast, max(slow, math.ceil(floor_slow)))
        rates[int(rng.integers(n))] = float(round(slow))
        anomaly = slow < fast
    return rates, anomaly


def draw(space: Space, rng: np.random.Generator) -> dict[str, Any]:
    """One scenario's parameters (JSON-ready, floats rounded); see the module docstring."""
    n = int(rng.integers(int(space.clients.lo), int(space.clients.hi) + 1))
    base = log_uniform(rng, space.rtt_base_ms.lo, space.rtt_base_ms.hi)
    rtts = _client_rtts(space, rng, n, base)
    rate = log_uniform(rng, space.rate_mbit.lo, space.rate_mbit.hi)
    kind, profile = draw_bottleneck(rng, space)
    loss = draw_loss(rng, space)
    wifi = weighted_choice(rng, space.wifi_profile)
    phy, anomaly = ([], False)
    if wifi != "none":
        phy, anomaly = _phy_rates(space, rng, n, rate * peak_factor(kind), MAC_EFFICIENCY[wifi])
    qkind = weighted_choice(rng, space.queue_kind)
    queue: dict[str, Any] = {"kind": qkind}
    if qkind == "pfifo":
        bdp = log_uniform(rng, space.pfifo_bdp.lo, space.pfifo_bdp.hi)
        queue["bdp"] = _r(bdp)
        queue["limit_pkts"] = max(4, round(bdp * rate * 1e6 / 8 * base / 1e3 / 1500))
    ccas = [weighted_choice(rng, space.cca_mix) for _ in range(n)]
    managed = [bool(rng.random() >= space.unmanaged_p) for _ in range(n)]
    if not any(managed):
        managed[int(rng.integers(n))] = True
    dur = space.duration_s
    late = early = web = None
    if n >= 2 and rng.random() < space.late_joiner_p:
        late = {"client": int(rng.integers(2, n + 1)), "start_s": _r(round(rng.uniform(0.1, 0.4) * dur * 2) / 2)}
    if n >= 2 and rng.random() < space.early_stopper_p:
        choices = [c for c in range(1, n + 1) if late is None or c != late["client"]]
        early = {"client": int(choices[int(rng.integers(len(choices)))]),
                 "end_s": _r(round(rng.uniform(0.6, 0.85) * dur * 2) / 2)}
    if rng.random() < space.web_p:
        k = int(rng.integers(int(space.web_flows.lo), int(space.web_flows.hi) + 1))
        flows = []
        for _ in range(k):
            d = round(rng.uniform(space.web_duration_s.lo, space.web_duration_s.hi), 1)
            flows.append([_r(round(rng.uniform(1.0, dur - d - 0.5), 1)), _r(d)])
        web = {"client": int(rng.integers(1, n + 1)), "flows": sorted(flows)}
    return {
        "clients": n, "managed": managed, "ccas": ccas,
        "rtt_base_ms": _r(base), "client_rtt_ms": [_r(x) for x in rtts],
        "rate_mbit": _r(rate), "bottleneck": kind, "profile": profile,
        "loss": loss, "wifi": wifi, "phy_rate_mbit": phy, "rate_anomaly": anomaly, "queue": queue,
        "late_joiner": late, "early_stopper": early, "web": web,
        "duration_s": dur, "sample_interval_s": space.sample_interval_s,
    }


def param_hash(params: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(params, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def split_of(digest: str, shares: dict[str, float]) -> str:
    """The split a parameter hash falls into (first 52 bits as a fraction, cumulative shares)."""
    u = int(digest[:13], 16) / float(1 << 52)
    acc = 0.0
    for s in SPLITS:
        acc += shares[s]
        if u < acc:
            return s
    return SPLITS[-1]


# --------------------------------------------------------------- scenarios ---


@dataclass(frozen=True)
class Drawn:
    name: str
    split: str
    digest: str
    seed: int
    candidate: int
    params: dict[str, Any]


def scenario_name(params: dict[str, Any], digest: str) -> str:
    return f"{params['clients']}c-{'-'.join(sorted(set(params['ccas'])))}-{digest[:8]}"


def _loss_toml(loss: dict[str, Any]) -> str | None:
    m = loss_model(loss)
    if m is None:
        return None
    if m["model"] == "bernoulli":
        return f'{{ model = "bernoulli", p = {m["p"]} }}'
    return f'{{ model = "gilbert", p_gb = {m["p_gb"]:.6g}, p_bg = {m["p_bg"]:.6g}, loss_good = 0.0, loss_bad = 1.0 }}'


def _qdisc_toml(queue: dict[str, Any]) -> str:
    if queue["kind"] == "pfifo":
        return f'{{ kind = "pfifo", limit_pkts = {queue["limit_pkts"]} }}'
    if queue["kind"] == "codel":
        return '{ kind = "codel", target_ms = 5.0, interval_ms = 100.0, limit_pkts = 1000 }'
    return '{ kind = "dualpi2", classifier = "dscp", l_dscp = [40] }'


def _inline(d: dict[str, Any]) -> str:
    parts = []
    for k, v in d.items():
        val = _inline(v) if isinstance(v, dict) else json.dumps(v)
        parts.append(f"{k} = {val}")
    return "{ " + ", ".join(parts) + " }"


def scenario_text(d: Drawn, space: Space, trace: str | None, trace_bytes: int | None) -> str:
    """The scenario file of a drawn parameter set (the contract of :mod:`.parse`)."""
    p = d.params
    n, base, dur = p["clients"], p["rtt_base_ms"], p["duration_s"]
    half = _r(base / 2)
    desc = (f"{n} clients ({', '.join(p['ccas'])}), RTT {base:g} ms"
            + (f" to {max(p['client_rtt_ms']):g} ms" if max(p["client_rtt_ms"]) > base else "")
            + f", {p['bottleneck']} {p['rate_mbit']:g} Mbit/s, {p['queue']['kind']}"
            + (f" {p['queue']['bdp']:g} BDP" if p["queue"]["kind"] == "pfifo" else "")
            + f", loss {p['loss']['kind']}" + (f" {p['loss']['p'] * 100:.2g} %" if p["loss"]["kind"] != "none" else "")
            + f", WiFi {p['wifi']}" + (" with rate anomaly" if p["rate_anomaly"] else ""))
    lines = [f"# Drawn from space {space.name!r} (generator v{GENERATOR_VERSION}, seed {d.seed}, candidate "
             f"{d.candidate}); split {d.split}, parameter hash {d.digest[:16]}.",
             "# Regenerate with: ccswitch testbed matrix generate SPACE.toml --split SPLIT --count N --seed S",
             f"# params = {json.dumps(p, sort_keys=True)}",
             f'name = "{d.name}"', f"description = {json.dumps(desc)}", f"duration_s = {dur:g}",
             f"clients = {n}", "seeds = [1]", f"sample_interval_s = {p['sample_interval_s']:g}", "", "[link]",
             'emulator = "linkemu"']
    extra = [_r(r - base) for r in p["client_rtt_ms"]]
    if any(extra):
        lines.append(f"client_delay_ms = {json.dumps(extra)}")
    lines += ["", "[link.uplink]"]
    if trace is None:
        lines.append(f"rate_mbit = {p['rate_mbit']:g}")
    else:
        lines += [f'trace = "{trace}"', f"trace_bytes_per_opportunity = {trace_bytes}"]
    lines += [f"delay_ms = {half:g}", f"qdisc = {_qdisc_toml(p['queue'])}"]
    if (loss := _loss_toml(p["loss"])) is not None:
        lines.append(f"loss = {loss}")
    lines += ["", "[link.downlink]               # ACKs: the mean rate, a deep queue, no loss",
              f"rate_mbit = {p['rate_mbit']:g}", f"delay_ms = {half:g}",
              'qdisc = { kind = "pfifo", limit_pkts = 1000 }']
    if p["wifi"] != "none":
        lines += ["", f"[link.wifi]                   # profile {p['wifi']!r}",
                  "clients = [" + ", ".join(f"{{ phy_rate_mbit = {r:g} }}" for r in p["phy_rate_mbit"]) + "]"]
        lines += [f"{k} = {_inline(v)}" for k, v in (WIFI_PROFILES[p["wifi"]] or {}).items()]
    late, early = p["late_joiner"] or {}, p["early_stopper"] or {}
    for c, cca in enumerate(p["ccas"], 1):
        lines += ["", "[[flows]]", f'name = "C{c}"', f"client = {c}", f'cca = "{cca}"']
        start = late.get("start_s", 0.0) if late.get("client") == c else 0.0
        end = early.get("end_s", dur) if early.get("client") == c else dur
        if start:
            lines.append(f"start_s = {start:g}")
        if end < dur or start:
            lines.append(f"duration_s = {_r(end - start):g}")
    if p["web"]:
        c = p["web"]["client"]
        for k, (start, d_s) in enumerate(p["web"]["flows"], 1):
            lines += ["", "[[flows]]", f'name = "W{k}"', f"client = {c}", f'cca = "{p["ccas"][c - 1]}"',
                      'kind = "web"', f"start_s = {start:g}", f"duration_s = {d_s:g}"]
    managed = [c for c, m in enumerate(p["managed"], 1) if m]
    lines += ["", "[daemon]                      # the daemon arms; the static arm runs without it",
              'policy = "dqn"', "tick_s = 0.2"]
    if len(managed) < n:
        lines.append(f"clients = {json.dumps(managed)}   # the others are hosts the user does not control")
    lines += ["", "[capture]", "tshark = false", ""]
    return "\n".join(lines)


def tags(p: dict[str, Any]) -> list[str]:
    """Category tags of a parameter set (the matrix report's breakdown)."""
    base, n = p["rtt_base_ms"], p["clients"]
    ratio = max(p["client_rtt_ms"]) / base
    out = [f"clients:{n}", "rtt:short" if base < 10 else "rtt:medium" if base < 40 else "rtt:long",
           "rtt-ratio:equal" if ratio < 1.01 else "rtt-ratio:unequal",
           "rate:low" if p["rate_mbit"] < 30 else "rate:mid" if p["rate_mbit"] < 100 else "rate:high",
           f"link:{p['bottleneck']}", f"loss:{p['loss']['kind']}", f"wifi:{p['wifi']}"]
    q = p["queue"]
    out.append(f"queue:pfifo-{'shallow' if q['bdp'] < 1 else 'deep'}" if q["kind"] == "pfifo" else f"queue:{q['kind']}")
    out.append("ccas:same" if len(set(p["ccas"])) == 1 else "ccas:mixed")
    out += [f"cca:{c}" for c in sorted(set(p["ccas"]))]
    if p["rate_anomaly"]:
        out.append("rate-anomaly")
    if not all(p["managed"]):
        out.append("unmanaged")
    out += [t for t, on in (("late-joiner", p["late_joiner"]), ("early-stopper", p["early_stopper"]),
                            ("web", p["web"])) if on]
    return out


def draw_split(space: Space, split: str, count: int, seed: int, max_candidates: int = 100_000) -> list[Drawn]:
    """The first *count* distinct candidates of *seed* that fall into *split*."""
    if split not in SPLITS:
        raise ScenarioError(f"unknown split {split!r} (use {', '.join(SPLITS)})")
    out: list[Drawn] = []
    seen: set[str] = set()
    for i in range(max_candidates):
        params = draw(space, np.random.default_rng([seed, i]))
        digest = param_hash(params)
        if digest in seen or split_of(digest, space.splits) != split:
            continue
        seen.add(digest)
        out.append(Drawn(scenario_name(params, digest), split, digest, seed, i, params))
        if len(out) == count:
            return out
    raise ScenarioError(f"only {len(out)} of {count} {split} scenarios in {max_candidates} candidates")


def generate(space: Space, split: str, count: int, seed: int, out: Path) -> list[Path]:
    """Write *count* scenario files of *split* and ``index.csv`` into *out*; returns the files.

    Every file is read back through the scenario parser before the index is
    written, so a generator bug cannot leave a half-valid split behind.
    """
    drawn = draw_split(space, split, count, seed)
    out.mkdir(parents=True, exist_ok=True)
    files, rows = [], []
    for d in drawn:
        trace = trace_bytes = None
        if d.params["bottleneck"] != "constant":
            trace = f"traces/{d.name}.trace"
            trace_bytes = write_trace(d.params, space, out / trace)
        text = scenario_text(d, space, trace, trace_bytes)
        path = out / f"{d.name}.toml"
        parse_scenario(text, path.name, base_dir=out, ccas=["bbr", "cubic", "pcc", "reno", "prague"], source=path)
        path.write_text(text)
        files.append(path)
        p = d.params
        rows.append({
            "name": d.name, "file": path.name, "split": split, "hash": d.digest, "space": space.name,
            "generator": GENERATOR_VERSION, "seed": seed, "candidate": d.candidate, "clients": p["clients"],
            "managed": sum(p["managed"]), "rtt_base_ms": p["rtt_base_ms"],
            "rtt_ratio": _r(max(p["client_rtt_ms"]) / p["rtt_base_ms"]), "rate_mbit": p["rate_mbit"],
            "bottleneck": p["bottleneck"], "loss": p["loss"]["kind"], "loss_p": p["loss"].get("p", 0.0),
            "wifi": p["wifi"], "rate_anomaly": p["rate_anomaly"], "queue": p["queue"]["kind"],
            "queue_bdp": p["queue"].get("bdp", ""), "ccas": ";".join(p["ccas"]),
            "late_joiner": bool(p["late_joiner"]), "early_stopper": bool(p["early_stopper"]),
            "web_flows": len(p["web"]["flows"]) if p["web"] else 0, "tags": ";".join(tags(p)),
            "params": json.dumps(p, sort_keys=True),
        })
    write_index(out / "index.csv", rows)
    return files


def write_index(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=INDEX_FIELDS)
        w.writeheader()
        w.writerows(rows)


def read_index(folder: Path) -> dict[str, dict[str, str]]:
    """name -> index row of a generated folder (empty when it has no index.csv)."""
    path = folder / "index.csv"
    if not path.is_file():
        return {}
    with path.open(newline="") as fh:
        return {r["name"]: r for r in csv.DictReader(fh)}
