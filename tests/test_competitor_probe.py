"""models/competitor_probe.py: the probe that says whether a flow's counters tell its competitor.

Fast (numpy; one real capture of the committed space corpus).  The probe's conclusion on the
corpus ("single counters carry a little, no classifier beats the base rate") is only worth
something if the probe finds a kind that *is* in the counters, so the synthetic tests plant one.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from ccswitch.datasets.trace import Capture, bin_flows
from ccswitch.models.competitor_probe import (
    COUNTER_NAMES,
    auc,
    competitor_kinds,
    cross_validated_single_counter,
    null_auc_range,
    rule_pick,
    window_counters,
)

REPO = Path(__file__).resolve().parent.parent
CAPTURE = REPO / "datasets" / "space" / "2c-bbr-cubic-23b3cde2" / "C2"
ACTIONS = ("cubic", "bbr", "pcc")


def synthetic(n_scenarios: int = 60, per: int = 3, seed: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Conditions grouped by scenario, a label per scenario, six noise counters."""
    rng = np.random.default_rng(seed)
    groups = np.repeat([f"s{i}" for i in range(n_scenarios)], per)
    label = np.repeat(rng.random(n_scenarios) < 0.4, per)
    return rng.normal(size=(len(groups), 6)), label, groups


def test_auc_counts_pairs_and_ties() -> None:
    y = np.array([False, False, True, True])
    assert auc(np.array([0.0, 1.0, 2.0, 3.0]), y) == 1.0
    assert auc(np.array([3.0, 2.0, 1.0, 0.0]), y) == 0.0
    assert auc(np.zeros(4), y) == 0.5
    assert auc(np.array([0.0, 2.0, 1.0, 3.0]), y) == 0.75  # 3 of the 4 (positive, negative) pairs ordered
    assert math.isnan(auc(np.zeros(3), np.zeros(3, dtype=bool)))


def test_a_planted_counter_is_found_and_noise_is_not() -> None:
    x, label, groups = synthetic()
    rng = np.random.default_rng(2)
    # noise: AUC inside the shuffled range, and the classifier no better than guessing the commoner kind
    lo, hi = null_auc_range(x[:, 0], label, groups, rng)
    assert lo < 0.5 < hi and lo <= auc(x[:, 0], label) <= hi
    base = max(label.mean(), 1 - label.mean())
    assert (cross_validated_single_counter(x, label, groups) == label).mean() <= base + 0.1
    # plant the kind in counter 4 (with noise: AUC ~0.9): found outside the range, classified well
    x[:, 4] = label + 0.5 * rng.normal(size=len(label))
    lo, hi = null_auc_range(x[:, 4], label, groups, rng)
    assert auc(x[:, 4], label) > hi
    assert (cross_validated_single_counter(x, label, groups) == label).mean() >= 0.8


def test_kinds_come_from_the_unmanaged_competitors_only() -> None:
    assert competitor_kinds([{"cca": "bbr", "managed": True}, {"cca": "cubic", "managed": True}]) == \
        {"hog": False, "loss-based": False}
    assert competitor_kinds([{"cca": "pcc", "managed": False}, {"cca": "reno", "managed": False}]) == \
        {"hog": True, "loss-based": True}
    assert competitor_kinds([{"cca": "bbr"}]) == {"hog": True, "loss-based": False}


def test_rules_turn_a_kind_into_the_population_cca() -> None:
    present = np.array([True, False])
    assert [ACTIONS[i] for i in rule_pick("the hog rule", present, ACTIONS)] == ["bbr", "cubic"]
    assert [ACTIONS[i] for i in rule_pick("the loss-based rule", present, ACTIONS)] == ["cubic", "bbr"]


@pytest.mark.skipif(not CAPTURE.is_dir(), reason="datasets/space not built")
@pytest.mark.parametrize("arm", ["cubic--s1", "bbr--s1"])
def test_counters_of_a_real_capture_are_physical(arm: str) -> None:
    """Units and columns: the emulated base RTT is a floor for the min RTT; rates and ratios in range."""
    cap = Capture.open(CAPTURE / arm)
    agent = int(cap.agent_flow()["flow_id"])
    bins = bin_flows(cap.samples(), float(cap.manifest["t0_epoch"]), cap.interval_s, None, [agent])[agent]
    v = dict(zip(COUNTER_NAMES, window_counters(bins, cap.interval_s), strict=True))
    base_ms = cap.manifest["link"]["rtt_base_ms"]
    assert 0.9 * base_ms <= math.exp(v["log min RTT (ms)"]) <= 5 * base_ms
    assert 0 < v["loss rate"] < 1 and v["log cwnd (segments)"] > 0 and v["log RTT / min RTT"] >= 0
    # the agent shares a 56 Mbit/s link with one other flow
    assert 0.5 < math.exp(v["log throughput (Mbit/s)"]) < cap.manifest["link"]["rate_mbit"]
