"""What a host sees of competition: the local.* context features of an observation.

numpy only (the daemon imports it).  Rows are flows; rows of one *group* share a host
(a network namespace in the daemon, a client in the corpus).  A flow is *active* when it
has data queued (sndq_bytes > 0) or moves at least ACTIVE_MIN_BPS; idle connections do
not count as competitors.  The features (envs/features.py lists them in the observation):

    local.others    other active flows on this host, / MAX_OTHERS, clipped to 1
    local.share     this flow's share of the host's active throughput (1 alone)
    local.jain      Jain's index over the host's active flows (1 alone)
"""

from __future__ import annotations

import numpy as np

from .numeric import F64_MAX, zero_nan

ACTIVE_MIN_BPS = 100e3
"""A flow moving at least this much (bit/s) counts as active even with nothing queued."""
MAX_OTHERS = 4
"""local.others saturates at this many other active flows."""


def competition_features(throughput_bps: np.ndarray, group: np.ndarray, active: np.ndarray, *,
                         group_inverse: np.ndarray | None = None) -> np.ndarray:
    """(local.others, local.share, local.jain) for every row; rows of a *group* share a host.

    Inactive rows still get features (as if they were active) but do not count for the others.
    *group_inverse*: ``np.unique(group, return_inverse=True)[1]`` when the caller has it already
    (ObservationBuilder keeps it while the hosts' flows stay the same: the sort costs more than the rest).
    """
    return np.stack(competition_columns(throughput_bps, group, active, group_inverse=group_inverse), axis=-1)


def competition_columns(throughput_bps: np.ndarray, group: np.ndarray, active: np.ndarray, *,
                        group_inverse: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """competition_features() as its three columns.

    Each host's figures are computed once and spread to its rows; rows whose figures differ from their host's
    (idle flows, which count themselves in, and rates whose square overflows: see _figures) are computed on
    their own.  Fewer passes over the rows than the formulas row by row, with the same bits."""
    thr = np.maximum(np.asarray(throughput_bps, dtype=np.float64), 0.0)  # max(nan_to_num(thr), 0)
    zero_nan(np.minimum(thr, F64_MAX, out=thr))
    act = np.asarray(active, dtype=bool)
    inv = np.unique(np.asarray(group), return_inverse=True)[1] if group_inverse is None else group_inverse
    actf = act.astype(np.float64)
    thr2 = thr * thr
    n_g = np.bincount(inv, weights=actf)
    s_g = np.bincount(inv, weights=thr * actf)
    q_g = np.bincount(inv, weights=np.multiply(thr2, actf))
    others_g, jain_g, alone_g = _figures(n_g, s_g, q_g)
    others, jain, s = others_g[inv], jain_g[inv], s_g[inv]
    with np.errstate(invalid="ignore", divide="ignore"):
        share = thr / s
    if not (s_g > 0).all():
        share = np.where(s > 0, share, alone_g[inv])
    odd = np.flatnonzero(~act | (thr2 == np.inf))
    if len(odd):
        g, idle = inv[odd], ~act[odd]
        n, s, q = n_g[g] + idle, s_g[g] + thr[odd] * idle, q_g[g] + thr2[odd] * idle
        others[odd], jain[odd], alone = _figures(n, s, q)
        with np.errstate(invalid="ignore", divide="ignore"):
            share[odd] = np.where(s > 0, thr[odd] / s, alone)
    return others, share, jain


def _figures(n: np.ndarray, s: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(local.others, local.jain, a share when nothing moves: 1 / n) of a row whose host has n active flows
    (the row counted in) of throughputs summing to s, and to q squared.

    A row is counted in by adding its own figures if idle, 0 if active (so its host's figures hold), except
    that 0 * inf is NaN: an active row of thr * thr = inf gets q = NaN, which counts as no spread (jain 1)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        others = np.clip((n - 1) / MAX_OTHERS, 0.0, 1.0)
        jain = np.where(n <= 1, 1.0, np.where(q > 0, s * s / (n * q), 1.0))
        return others, jain, 1.0 / np.maximum(n, 1)


def is_active(throughput_bps: np.ndarray, sndq_bytes: np.ndarray) -> np.ndarray:
    # NaN compares False, as the 0 it stands for would
    return ((np.asarray(sndq_bytes, dtype=np.float64) > 0)
            | (np.asarray(throughput_bps, dtype=np.float64) >= ACTIVE_MIN_BPS))
