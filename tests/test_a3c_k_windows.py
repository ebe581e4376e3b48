"""k's window credit for the A3C DualPI2 trainer (models/a3c_k_windows.py, a3c_networks.k_window_gradients).

Unit tests: the window bookkeeping, the leave-one-out advantage, and that the episode-end update moves k's
mean towards the better k on a synthetic bandit (the sign and the baseline of the estimator).  The real
counterpart is the training on live emulated links (docs/l4s.md, "k credited per window").
"""

from __future__ import annotations

import numpy as np
import pytest

from ccswitch.models.a3c_dualpi2 import Hyperparameters, build_networks, k_window_gradients
from ccswitch.models.a3c_k_windows import KWindows, leave_one_out
from ccswitch.models.dualpi2_actor import features_for, k_output


def test_leave_one_out_subtracts_the_mean_of_the_others() -> None:
    assert leave_one_out(np.array([1.0, 2.0, 3.0])).tolist() == [-1.5, 0.0, 1.5]
    # a constant offset (the episode's condition) cancels
    assert np.allclose(leave_one_out(np.array([1.0, 2.0, 3.0]) + 7.0), [-1.5, 0.0, 1.5])
    with pytest.raises(ValueError, match="at least 2 windows"):
        leave_one_out(np.array([1.0]))


def test_windows_score_their_settled_steps_only() -> None:
    w = KWindows(hold=4, settle=2)
    for t in range(10):  # draws at t = 0, 4, 8; the last window has no settled step yet
        if t % 4 == 0:
            w.draw(np.full(3, t, np.float32), a_k=t / 10)
        w.reward(t, r=100.0 if t % 4 < 2 else float(t))  # the unsettled steps' 100s must not count
    batch = w.batch()
    assert batch is not None
    states, actions, adv = batch
    assert states[:, 0].tolist() == [0.0, 4.0] and np.allclose(actions, [0.0, 0.4])
    assert np.allclose(adv, [2.5 - 6.5, 6.5 - 2.5])  # scores: mean(2, 3) and mean(6, 7)
    assert KWindows(hold=4, settle=0).batch() is None
    with pytest.raises(ValueError, match="hold >= 2"):
        KWindows(hold=4, settle=4)


def test_window_update_moves_k_towards_the_better_draws() -> None:
    """A bandit: a window scores -(a_k - 0.4)^2 plus a per-episode offset (the condition, +-0.5) and noise.
    From an untrained actor (a_k ~ 0), 120 episodes of 5 windows move the mean a_k over random states to
    0.2..0.6 (the optimum 0.4; a sign error drives it below 0, a baseline that keeps the condition's offset
    makes it a random walk of that offset's size)."""
    import keras

    keras.utils.set_random_seed(5)
    hp = Hyperparameters(mode="k", mean_init_scale=0.01, k_hold_steps=20)
    actor, _ = build_networks(hp)
    opt = keras.optimizers.Adam(hp.lr_k)
    k_dim = k_output("k")
    assert k_dim is not None
    rng = np.random.default_rng(0)
    n_obs = len(features_for("k"))
    probe = rng.uniform(0.0, 1.0, (64, n_obs)).astype(np.float32)
    before = float(np.mean(actor(probe)[0][:, k_dim]))
    for _ in range(120):
        offset = rng.uniform(-0.5, 0.5)
        w = KWindows(hold=2, settle=1)
        for i in range(5):
            s = rng.uniform(0.0, 1.0, n_obs).astype(np.float32)
            mean, std = actor(s[None, :])
            a = rng.normal(float(mean[0, k_dim]), float(std[0, k_dim]) + hp.std_min)
            w.draw(s, a)
            w.reward(2 * i + 1, offset - (np.clip(a, -1, 1) - 0.4) ** 2 + rng.normal(0, 0.05))
        batch = w.batch()
        assert batch is not None
        g = k_window_gradients(actor, hp, k_dim, *batch)
        opt.apply_gradients(zip(g, actor.trainable_variables, strict=True))
    after = float(np.mean(actor(probe)[0][:, k_dim]))
    assert abs(before) < 0.1
    assert 0.2 <= after <= 0.6, (before, after)
