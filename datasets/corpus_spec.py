"""A corpus spec: the matrix of link conditions x agent arms a corpus captures, parsed and checked.

A corpus spec (TOML; ``datasets/specs/``) names the matrix::

    name = "sample"
    backend = "bottleneck"      # "bottleneck": routed tbf (datasets/capture.py), rate + queue only;
                                # "runner": the testbed runner (testbed/runs/runner.py), which adds
                                # delay, loss and WiFi through linkemu
    duration_s = 24             # per run
    interval_s = 1.0            # sampling interval = the agent's decision interval
    seeds = [1]                 # repetitions
    ccas = ["cubic", "bbr", "pcc"]   # the agent's choices: one static arm each ...
    switch_at_s = [12]          # ... plus one arm per ordered pair (a -> b) per time here
    inherit = "limited"

    [matrix]                    # cross product of the lists
    rate_mbit = [10, 40]
    queue_ms = [5, 50]
    competitors = [[], ["cubic"], ["bbr"]]    # CCAs of competing flows on the agent's host
    remote_competitors = [[]]   # runner: competing flows on other clients (not visible locally)
    delay_ms = [0]              # runner + linkemu
    loss = [0]                  # runner + linkemu
    wifi = [""]                 # runner + linkemu: a WIFI_PRESETS name

    [[conditions]]              # optional extra blocks (same keys; a scalar or a list each,
                                # crossed like the matrix)

So for every condition and time the trace of each CCA exists (the static
arms), and the switch arms record what a switch does.  :func:`parse_spec`
checks every key (a :class:`SpecError` names the file and the key) and
expands the spec into its runs (condition x arm x seed).
"""

from __future__ import annotations

import itertools
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .capture import Arm, Condition, Switch

__all__ = ["BACKENDS", "MAX_COMPETITORS", "WIFI_PRESETS", "CorpusSpec", "Run", "SpecError", "load_spec",
           "parse_spec"]

BACKENDS = ("bottleneck", "runner")
MAX_COMPETITORS = 4
WIFI_PRESETS: dict[str, dict[str, Any]] = {
    # linkemu's WiFi model (testbed/linkemu/README.md): the station entry of every client
    # and the [link.wifi] keys of the scenario.
    "ax": {"station": {"phy_rate_mbit": 300}, "wifi": {}},
    "ax-jitter": {"station": {"phy_rate_mbit": 300},
                  "wifi": {"access_delay_us": {"extra": {"dist": "exponential", "mean_us": 500}}}},
    # paper 002's WiFi link as the end-to-end scenarios emulate it (testbed/scenarios/default.toml)
    "ax-light": {"station": {"phy_rate_mbit": 300},
                 "wifi": {"access_delay_us": {"extra": {"dist": "exponential", "mean_us": 100}}}},
    "n-slow": {"station": {"phy_rate_mbit": 65},
               "wifi": {"access_delay_us": {"extra": {"dist": "exponential", "mean_us": 200}}}},
}
_MATRIX_KEYS = ("rate_mbit", "queue_ms", "competitors", "remote_competitors", "delay_ms", "loss", "wifi")


class SpecError(ValueError):
    """A corpus spec is invalid; the message names the file and the key."""


@dataclass(frozen=True)
class Run:
    condition: Condition
    arm: Arm
    seed: int

    @property
    def rel_dir(self) -> str:
        return f"{self.condition.id}/{self.arm.id}--s{self.seed}"


@dataclass(frozen=True)
class CorpusSpec:
    name: str
    backend: str
    duration_s: float
    interval_s: float
    seeds: tuple[int, ...]
    ccas: tuple[str, ...]
    switch_at_s: tuple[float, ...]
    inherit: str
    conditions: tuple[Condition, ...]
    description: str = ""
    text: str = ""
    source: str = ""
    runs: tuple[Run, ...] = field(default=(), repr=False)

    def arms(self) -> list[Arm]:
        arms = [Arm(c) for c in self.ccas]
        for t in self.switch_at_s:
            arms += [Arm(a, (Switch(t, b, self.inherit),)) for a in self.ccas for b in self.ccas if a != b]
        return arms


def _err(where: str, key: str, msg: str) -> SpecError:
    return SpecError(f"{where}: {key}: {msg}")


def _num_list(v: Any, where: str, key: str, lo: float, hi: float) -> list[float]:
    if not isinstance(v, list) or not v:
        raise _err(where, key, "must be a non-empty array of numbers")
    out = []
    for x in v:
        if isinstance(x, bool) or not isinstance(x, int | float) or not lo <= x <= hi:
            raise _err(where, key, f"values must be numbers in [{lo:g}, {hi:g}], got {x!r}")
        out.append(float(x))
    return out


def _cca_lists(v: Any, where: str, key: str, ccas: Sequence[str]) -> list[tuple[str, ...]]:
    if not isinstance(v, list) or not v or not all(isinstance(x, list) for x in v):
        raise _err(where, key, 'must be an array of arrays of CCA names, e.g. [[], ["cubic"], ["bbr", "bbr"]]')
    out = []
    for lst in v:
        if len(lst) > MAX_COMPETITORS:
            raise _err(where, key, f"at most {MAX_COMPETITORS} competing flows per condition, got {len(lst)}")
        for c in lst:
            if c not in ccas:
                raise _err(where, key, f"unknown congestion control {c!r} (known: {', '.join(ccas)})")
        out.append(tuple(lst))
    return out


def _condition_lists(t: dict[str, Any], where: str, prefix: str, known_ccas: Sequence[str],
                     scalars: bool) -> dict[str, list[Any]]:
    unknown = sorted(set(t) - set(_MATRIX_KEYS))
    if unknown:
        raise _err(where, f"{prefix}{unknown[0]}", f"unknown key (known: {', '.join(_MATRIX_KEYS)})")

    def lst(key: str) -> Any:
        v = t[key]
        if not scalars:
            return v
        if key in ("competitors", "remote_competitors"):  # one set ["a", "b"] or several [["a"], ["b"]]
            return v if isinstance(v, list) and v and all(isinstance(x, list) for x in v) else [v]
        return v if isinstance(v, list) else [v]

    vals: dict[str, list[Any]] = {}
    if "rate_mbit" not in t:
        raise _err(where, f"{prefix}rate_mbit", "missing")
    vals["rate_mbit"] = _num_list(lst("rate_mbit"), where, prefix + "rate_mbit", 0.1, 10_000)
    vals["queue_ms"] = _num_list(lst("queue_ms"), where, prefix + "queue_ms", 0.1, 10_000) \
        if "queue_ms" in t else [20.0]
    vals["delay_ms"] = _num_list(lst("delay_ms"), where, prefix + "delay_ms", 0, 10_000) if "delay_ms" in t else [0.0]
    vals["loss"] = _num_list(lst("loss"), where, prefix + "loss", 0, 0.5) if "loss" in t else [0.0]
    for key in ("competitors", "remote_competitors"):
        vals[key] = _cca_lists(lst(key), where, prefix + key, known_ccas) if key in t else [()]
    if "wifi" in t:
        w = lst("wifi")
        if not isinstance(w, list) or not all(isinstance(x, str) and (x == "" or x in WIFI_PRESETS) for x in w):
            raise _err(where, prefix + "wifi", f"values must be \"\" or one of {', '.join(WIFI_PRESETS)}")
        vals["wifi"] = w
    else:
        vals["wifi"] = [""]
    return vals


def parse_spec(text: str, where: str = "spec") -> CorpusSpec:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"{where}: invalid TOML: {e}") from None
    known = ("name", "description", "backend", "duration_s", "interval_s", "seeds", "ccas", "switch_at_s",
             "inherit", "matrix", "conditions")
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise _err(where, unknown[0], f"unknown key (known: {', '.join(known)})")
    name = data.get("name", Path(where).stem)
    if not isinstance(name, str) or not name:
        raise _err(where, "name", "must be a non-empty string")
    backend = data.get("backend", "bottleneck")
    if backend not in BACKENDS:
        raise _err(where, "backend", f"must be one of {', '.join(BACKENDS)}, got {backend!r}")
    duration = data.get("duration_s", 30)
    if isinstance(duration, bool) or not isinstance(duration, int | float) or not 4 <= duration <= 3600:
        raise _err(where, "duration_s", f"must be a number in [4, 3600], got {duration!r}")
    interval = data.get("interval_s", 1.0)
    if isinstance(interval, bool) or not isinstance(interval, int | float) or not 0.1 <= interval <= duration / 4:
        raise _err(where, "interval_s", f"must be a number in [0.1, duration_s/4], got {interval!r}")
    ccas = data.get("ccas", ["cubic", "bbr", "pcc"])
    if not isinstance(ccas, list) or len(ccas) < 2 or not all(isinstance(c, str) and c for c in ccas) \
            or len(set(ccas)) != len(ccas):
        raise _err(where, "ccas", "must be an array of at least two distinct CCA names")
    seeds = data.get("seeds", [1])
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) and not isinstance(s, bool)
                                                          and s >= 0 for s in seeds):
        raise _err(where, "seeds", "must be a non-empty array of non-negative integers")
    switch_at = data.get("switch_at_s", [])
    if not isinstance(switch_at, list) or not all(isinstance(x, int | float) and not isinstance(x, bool)
                                                  and interval <= x <= duration - interval for x in switch_at):
        raise _err(where, "switch_at_s", f"must be an array of times in [interval_s, duration_s - interval_s], "
                                         f"got {switch_at!r}")
    inherit = data.get("inherit", "limited")
    if inherit not in ("limited", "full"):
        raise _err(where, "inherit", f"must be \"limited\" or \"full\", got {inherit!r}")
    known_ccas = sorted(set(ccas) | {"cubic", "bbr", "pcc", "reno"})
    conds: list[Condition] = []
    blocks: list[tuple[str, dict[str, Any], bool]] = []
    if "matrix" in data:
        if not isinstance(data["matrix"], dict):
            raise _err(where, "matrix", "must be a table")
        blocks.append(("matrix.", data["matrix"], False))
    extra = data.get("conditions", [])
    if not isinstance(extra, list):
        raise _err(where, "conditions", "must be an array of tables ([[conditions]])")
    blocks += [(f"conditions[{i}].", c, True) for i, c in enumerate(extra)]
    if not blocks:
        raise _err(where, "matrix", "missing (give [matrix] and/or [[conditions]])")
    for prefix, t, scalars in blocks:
        if not isinstance(t, dict):
            raise _err(where, prefix.rstrip("."), "must be a table")
        vals = _condition_lists(t, where, prefix, known_ccas, scalars)
        for combo in itertools.product(*(vals[k] for k in _MATRIX_KEYS)):
            cond = Condition(**dict(zip(_MATRIX_KEYS, combo, strict=True)))
            if cond not in conds:
                conds.append(cond)
    if backend == "bottleneck":
        for c in conds:
            for what in ("delay_ms", "loss", "wifi", "remote_competitors"):
                if getattr(c, what):
                    raise _err(where, f"matrix.{what}", f"condition {c.id} needs backend = \"runner\" "
                                                        "(the tbf bottleneck has rate and queue only)")
    spec = CorpusSpec(name=name, backend=backend, duration_s=float(duration), interval_s=float(interval),
                      seeds=tuple(seeds), ccas=tuple(ccas), switch_at_s=tuple(float(x) for x in switch_at),
                      inherit=inherit, conditions=tuple(conds), description=str(data.get("description", "")),
                      text=text, source=where)
    runs = tuple(Run(c, a, s) for c in spec.conditions for a in spec.arms() for s in spec.seeds)
    return replace(spec, runs=runs)


def load_spec(path: str | Path) -> CorpusSpec:
    p = Path(path)
    try:
        text = p.read_text()
    except FileNotFoundError:
        raise SpecError(f"{p}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError(f"{p}: cannot read: {e}") from None
    return parse_spec(text, str(p))
