"""Fairness metrics over competing flows (paper 002, Table 2)."""

from __future__ import annotations

from collections.abc import Sequence


def jain_index(values: Sequence[float]) -> float:
    """Jain's fairness index: (sum x)^2 / (n * sum x^2); 1 = perfectly fair, 1/n = one flow has all."""
    if not values or not any(values):
        return float("nan")
    return sum(values) ** 2 / (len(values) * sum(v * v for v in values))


def throughput_ratios(values: Sequence[float]) -> list[float]:
    """Thratio per flow: throughput / average throughput (1 = its fair share)."""
    avg = sum(values) / len(values) if values else 0.0
    return [v / avg if avg else float("nan") for v in values]
