"""The uplink traces of generated scenarios: a drawn rate profile (:func:`.generate.draw_bottleneck`) as a
Mahimahi trace linkemu replays.

Profiles (the generator's docstring has how each is drawn): ``step`` and ``ramp`` scale the drawn rate
per second, ``variable`` is a log-rate AR(1) per second (:data:`VARIABLE_PHI`) with mean ``rate_mbit``,
``real`` replays a committed real-world trace from a drawn offset, its level scaled to ``rate_mbit``.
Traces carry ``trace_bytes_per_opportunity`` = 1500 x round(mean / 12 Mbit/s) (about one line per
millisecond at the mean rate) to keep the files small.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from .model import ScenarioError
from .space import Space

__all__ = ["TRACE_TAIL_S", "VARIABLE_PHI", "rate_series", "read_trace", "write_trace"]

VARIABLE_PHI = 0.8
"""The AR(1) coefficient of the ``variable`` profile's log-rate per second."""
TRACE_TAIL_S = 15.0
"""Trace length beyond the run: linkemu starts a few seconds before the scenario clock."""


def rate_series(params: dict[str, Any], space: Space, seconds: int) -> list[float] | None:
    """Per-second uplink rate (Mbit/s) of a generated profile; None for constant and real."""
    kind, rate, p = params["bottleneck"], params["rate_mbit"], params["profile"]
    dur = params["duration_s"]
    if kind == "step":
        return [rate * (p["factor"] if p["down_at"] * dur <= k < p["up_at"] * dur else 1.0) for k in range(seconds)]
    if kind == "ramp":
        lo = p["factor"]
        out = []
        for k in range(seconds):
            x = min(k / dur, 1.0)
            out.append(rate * (lo + (1 - lo) * (x if p["up"] else 1 - x)))
        return out
    if kind == "variable":
        rng = np.random.default_rng(p["seed"])
        sigma = p["sigma"]
        var = sigma ** 2 / (1 - VARIABLE_PHI ** 2)
        x = float(rng.normal(0.0, math.sqrt(var)))
        out = []
        for _ in range(seconds):
            out.append(min(max(rate * math.exp(x - var / 2), 0.2 * rate), 2.5 * rate))
            x = VARIABLE_PHI * x + float(rng.normal(0.0, sigma))
        return out
    return None


def read_trace(path: Path) -> list[int]:
    """Milliseconds of the delivery opportunities of a Mahimahi trace."""
    return [int(line) for line in path.read_text().split()]


def _opportunities_per_ms(params: dict[str, Any], space: Space, total_ms: int) -> np.ndarray:
    """1500-byte delivery opportunities in each millisecond (fractional)."""
    series = rate_series(params, space, math.ceil(total_ms / 1000))
    if series is not None:
        per_ms = np.repeat(np.asarray(series) * 1e6 / 8 / 1000 / 1500, 1000)[:total_ms]
        return per_ms
    name = params["profile"]["trace"]
    src = next((t for t in space.real_traces if t.name == name), None)
    if src is None:
        raise ScenarioError(f"real trace {name!r} is not in the space's real_traces folder")
    ms = read_trace(src)
    period = max(ms[-1], 1)
    counts = np.bincount(np.asarray(ms) % period, minlength=period).astype(float)
    start = int(params["profile"]["offset"] * period)
    idx = (np.arange(total_ms) + start) % period
    per_ms = counts[idx]
    mean_mbit = counts.sum() * 1500 * 8 / (period / 1000) / 1e6
    return per_ms * (params["rate_mbit"] / mean_mbit)


def write_trace(params: dict[str, Any], space: Space, path: Path) -> int:
    """The Mahimahi trace of a non-constant bottleneck; returns bytes per opportunity."""
    total_ms = int((params["duration_s"] + TRACE_TAIL_S) * 1000)
    per_ms = _opportunities_per_ms(params, space, total_ms)
    scale = max(1, round(params["rate_mbit"] / 12.0))
    cum = np.floor(np.cumsum(per_ms) / scale + 1e-9).astype(np.int64)
    counts = np.diff(np.concatenate([[0], cum]))
    lines = np.repeat(np.arange(1, total_ms + 1), counts)
    if len(lines) == 0 or lines[-1] != total_ms:
        lines = np.append(lines, total_ms)  # the period: the last line is the trace's length
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(map(str, lines.tolist())) + "\n")
    return 1500 * scale
