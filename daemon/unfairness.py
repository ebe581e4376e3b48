"""Unfairness monitor over the local flows that share a path, and the per-flow reward.

Paper 002 (section 4) measures unfairness as Thratio, a flow's throughput
relative to its competitors'.  Here, per group of flows that share a path
(unfairness.group_by: the same remote address, or all flows of the host):

    thratio_i = throughput_i / mean(throughput of the group's active flows)
    jain_g    = (sum x)^2 / (n * sum x^2) over the group's active flows

(ccswitch.metrics.throughput_ratios / jain_index, vectorised with bincount.)
A flow is active as in envs/features.py (data queued or >= 100 kbit/s);
an inactive flow gets the ratio it would have among the active ones, and a
flow alone has Thratio 1 and Jain 1.

The group ids also replace the namespace cookie as the competition group of
the DQN's features (local.others/share/jain), so "competitors" means flows
on the same path.  The reward of each flow's interval (the post-switch
evaluation's yardstick) is envs/reward.py's, vectorised here; a unit test
checks it against the scalar definition.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ccswitch.envs.competition import is_active
from ccswitch.envs.reward import RewardConfig
from ccswitch.frame import FlowFrame, as_frame

if TYPE_CHECKING:
    import pyarrow as pa


@dataclass
class Fairness:
    group: np.ndarray  # int64 group id per row
    group_key: list[str]  # group id -> its key (remote address or "host")
    thratio: np.ndarray  # per row
    jain: np.ndarray  # per row: its group's index
    active: np.ndarray  # bool per row

    def summary(self) -> list[dict[str, object]]:
        """One entry per group with two or more active flows: key, flows, Jain, min/max Thratio."""
        out = []
        for g, key in enumerate(self.group_key):
            sel = (self.group == g) & self.active
            if sel.sum() >= 2:
                out.append({"path": key, "flows": int(sel.sum()), "jain": float(self.jain[sel][0]),
                            "thratio_min": float(self.thratio[sel].min()),
                            "thratio_max": float(self.thratio[sel].max())})
        return out


def fairness(table: FlowFrame | pa.Table, group_by: str = "dst") -> Fairness:
    table = as_frame(table)
    n = table.num_rows
    thr = np.maximum(np.nan_to_num(table.column("throughput_bps"), nan=0.0), 0.0)
    active = is_active(thr, table.column("sndq_bytes"))
    if group_by == "host" or n == 0:
        inv = np.zeros(n, dtype=np.int64)
        keys = ["host"]
    else:
        inv, keys = table.codes("dst")
    k = len(keys)
    a = active.astype(np.float64)
    n_g = np.bincount(inv, weights=a, minlength=k)
    s_g = np.bincount(inv, weights=thr * a, minlength=k)
    q_g = np.bincount(inv, weights=thr * thr * a, minlength=k)
    n_r = n_g[inv] + (~active)
    s_r = s_g[inv] + thr * (~active)
    q_r = q_g[inv] + thr * thr * (~active)
    with np.errstate(invalid="ignore", divide="ignore"):
        thratio = np.where(s_r > 0, thr * n_r / s_r, 1.0)
        jain = np.where((q_r > 0) & (n_r > 1), s_r * s_r / (n_r * q_r), 1.0)
    return Fairness(inv, keys, thratio, jain, active)


def rewards(cfg: RewardConfig, table: FlowFrame | pa.Table, fair: Fairness) -> np.ndarray:
    """envs.reward.reward() of every row (switched=False), vectorised."""
    table = as_frame(table)
    thr = np.nan_to_num(table.column("throughput_bps"), nan=0.0) / 1e6
    rtt = table.column("rtt_us") / 1e3
    rtt = np.where(np.isnan(rtt), cfg.latency_floor_ms, rtt)
    loss = np.nan_to_num(table.column("loss_rate"), nan=0.0)
    r = (cfg.w_throughput * np.log(np.maximum(thr, cfg.throughput_floor_mbps))
         - cfg.w_latency * np.log(np.maximum(rtt, cfg.latency_floor_ms))
         - cfg.w_loss * np.log(np.maximum(loss, cfg.loss_floor)))
    if cfg.fairness == "jain":
        f = fair.jain - 1.0
    elif cfg.fairness == "minshare":
        # the group's smallest active Thratio (= own / group mean); a group with one active flow -> 1
        act = fair.active
        k = int(fair.group.max()) + 1 if len(fair.group) else 0
        gmin = np.ones(k)
        np.minimum.at(gmin, fair.group[act], fair.thratio[act])
        n = np.bincount(fair.group, weights=act.astype(np.float64), minlength=k)
        gmin = np.where(n > 1, gmin, 1.0)
        f = np.log(np.clip(gmin[fair.group], 1 / 20, 1.0))
    else:
        # thratio in the reward is own / mean of the others; alone -> 0
        n = np.bincount(fair.group, weights=fair.active.astype(np.float64))[fair.group]
        with np.errstate(invalid="ignore", divide="ignore"):
            others = np.where(n > 1, (n * fair.thratio - fair.thratio) / np.maximum(n - 1, 1), np.nan)
            tr = fair.thratio / others
        f = np.where(np.isnan(tr), 0.0, -np.abs(np.log(np.clip(tr, 1 / 20, 20.0))))
    return r + cfg.w_fairness * f

