"""testbed/l4s/a3c_closed_loop.py's paired comparison of the agent's Classic drops with the PI's (no kernel)."""

from __future__ import annotations

import math

import pytest

from ccswitch.testbed.l4s.a3c_closed_loop import T_975, paired_difference


def test_pairs_cancel_the_seed_spread() -> None:
    # seeds far apart (0.3..0.6 %), the agent 0.02 points above the PI in every one: the unpaired ranges
    # overlap, the paired interval does not reach 0
    pi = [0.30, 0.45, 0.60, 0.40]
    agent = [x + 0.02 + e for x, e in zip(pi, (0.001, -0.001, 0.002, -0.002), strict=True)]
    mean, half = paired_difference(agent, pi)
    assert mean == pytest.approx(0.02)
    assert 0 < half < 0.02  # 95 % interval +0.02 +- ~0.003: above 0


def test_interval_is_students_t() -> None:
    mean, half = paired_difference([1.0, 2.0, 3.0], [0.0, 0.0, 0.0])
    assert mean == 2.0 and half == pytest.approx(T_975[1] * 1.0 / math.sqrt(3))  # sd 1, df 2


def test_one_pair_has_no_interval() -> None:
    mean, half = paired_difference([0.5], [0.4])
    assert mean == pytest.approx(0.1) and math.isnan(half)
