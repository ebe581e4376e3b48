"""Fairness metrics over competing flows (paper 002, Table 2).

Jain's index, Thratio, starvation (a flow under 10 % of its fair share for
5 s or more) and link utilisation; plain Python on sequences, NaN-aware.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass


def jain_index(values: Sequence[float]) -> float:
    """Jain's fairness index: (sum x)^2 / (n * sum x^2); 1 = perfectly fair, 1/n = one flow has all."""
    if not values or not any(values):
        return float("nan")
    return sum(values) ** 2 / (len(values) * sum(v * v for v in values))


def throughput_ratios(values: Sequence[float]) -> list[float]:
    """Thratio per flow: throughput / average throughput (1 = its fair share)."""
    avg = sum(values) / len(values) if values else 0.0
    return [v / avg if avg else float("nan") for v in values]


def thratio(a: float, b: float) -> float:
    """Paper 002's Thratio of two flows: throughput of flow A / throughput of flow B."""
    return a / b if b else float("nan")


def fair_share(total: float, n_active: int) -> float:
    """Equal share of *total* among *n_active* flows (NaN when none is active)."""
    return total / n_active if n_active else float("nan")


@dataclass(frozen=True)
class Starvation:
    """A stretch of time during which one flow got less than a fraction of its fair share."""

    flow: str
    start_s: float
    end_s: float

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


def starvation(
    times_s: Sequence[float],
    series: Mapping[str, Sequence[float]],
    interval_s: float,
    *,
    threshold: float = 0.1,
    min_duration_s: float = 5.0,
) -> list[Starvation]:
    """Episodes where a flow got < *threshold* x its fair share for >= *min_duration_s*.

    *series* maps flow name -> throughput per interval, aligned with *times_s*
    (the end of each interval); NaN marks an interval in which the flow was
    not running.  The fair share of an interval is the throughput delivered to
    all running flows, split equally among them (so a link that delivers less
    than its nominal rate, e.g. WiFi, does not count as starvation).  Intervals
    with a single running flow never starve it.
    """
    names = list(series)
    out: list[Starvation] = []
    runs: dict[str, float | None] = dict.fromkeys(names)  # flow -> start of current stretch
    last_end = times_s[-1] if len(times_s) else 0.0
    for k, t_end in enumerate(times_s):
        active = {n: float(series[n][k]) for n in names if not math.isnan(float(series[n][k]))}
        share = fair_share(sum(active.values()), len(active))
        for n in names:
            starving = (n in active and len(active) > 1 and share > 0
                        and active[n] < threshold * share)
            if starving and runs[n] is None:
                runs[n] = t_end - interval_s
            elif not starving and runs[n] is not None:
                start = runs[n]
                assert start is not None
                if t_end - interval_s - start >= min_duration_s - 1e-9:
                    out.append(Starvation(n, start, t_end - interval_s))
                runs[n] = None
    for n, start in runs.items():
        if start is not None and last_end - start >= min_duration_s - 1e-9:
            out.append(Starvation(n, start, last_end))
    return sorted(out, key=lambda s: (s.start_s, s.flow))


def utilisation(throughputs_bps: Sequence[float], capacity_bps: float | None) -> float:
    """Sum of the flows' throughput (bit/s, incl. headers) over the link capacity; NaN if unknown."""
    if not capacity_bps:
        return float("nan")
    return sum(throughputs_bps) / capacity_bps


def nanmean(values: Iterable[float]) -> float:
    """Mean of the non-NaN values (NaN when there are none)."""
    vals = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    return sum(vals) / len(vals) if vals else float("nan")


def nanmedian(values: Iterable[float]) -> float:
    vals = sorted(float(v) for v in values if v is not None and not math.isnan(float(v)))
    if not vals:
        return float("nan")
    mid = len(vals) // 2
    return vals[mid] if len(vals) % 2 else (vals[mid - 1] + vals[mid]) / 2
