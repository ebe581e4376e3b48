"""The A3C trainer's networks (models/a3c_networks.py): the mean head's initial scale, the inputs per observation.

``--mean-init-scale`` small makes the untrained actor plain DualPI2 (a = 0: the PI's p' and RFC 9332's k = 2)
in every state, so training starts from the baseline instead of a random constant offset.  Unit test of the
Keras models only; the training loop runs on live emulated links (docs/l4s.md).
"""

from __future__ import annotations

import numpy as np

from ccswitch.models.a3c_dualpi2 import Hyperparameters, build_networks
from ccswitch.models.dualpi2_actor import features_for


def _means(hp: Hyperparameters) -> np.ndarray:
    import keras

    keras.utils.set_random_seed(3)
    actor, critic = build_networks(hp)
    obs = np.random.default_rng(0).uniform(0.0, 1.0, (256, len(features_for(hp.mode, hp.obs)))).astype(np.float32)
    mean, std = actor(obs)
    assert critic(obs).shape == (256, 1)
    assert np.all(np.asarray(std) > 0)
    return np.asarray(mean)


def test_small_mean_init_starts_at_the_baseline_action() -> None:
    small = _means(Hyperparameters(mode="residual-k", mean_init_scale=0.01))
    default = _means(Hyperparameters(mode="residual-k"))
    assert small.shape == default.shape == (256, 2)
    # Observations mostly in [0, 1].  Scale 0.01 is a tenth of Glorot's weight bound: |a| stays within ~0.1
    # (k = 2 x 2^0.1 at most, 2 x 2^0.03 on average); Glorot's own gives |a| ~ 0.3 on average, up to ~0.7.
    assert np.abs(small).max() < 0.15 and np.abs(small).mean() < 0.06
    assert np.abs(default).mean() > 0.12


def test_flows_observation_widens_actor_and_critic_inputs() -> None:
    """``--obs flows``: both networks take the 17 numbers (the k modes' 15 and the flows per class)."""
    hp = Hyperparameters(mode="k", obs="flows", mean_init_scale=0.01)
    actor, critic = build_networks(hp)
    assert actor.input_shape == critic.input_shape == (None, 17)
    assert _means(hp).shape == (256, 1)
    assert build_networks(Hyperparameters(mode="k"))[1].input_shape == (None, 15)
