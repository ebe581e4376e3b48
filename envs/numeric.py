"""NaN and infinity handling shared by the feature modules (numpy only)."""

from __future__ import annotations

import numpy as np

F64_MAX = float(np.finfo(np.float64).max)
"""What np.nan_to_num makes of +inf."""


def zero_nan(x: np.ndarray) -> np.ndarray:
    """NaN -> 0.0 in place: np.nan_to_num(x, nan=0.0, copy=False) where the infinities are capped or clipped
    anyway; one cheap pass when there is no NaN, instead of its several."""
    nan = np.isnan(x)
    if nan.any():
        x[nan] = 0.0
    return x
