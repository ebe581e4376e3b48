"""The A3C DualPI2 trainer's networks (TensorFlow/Keras, imported when called): the actor and critic, the
actor's mean network for the actor file, and the gradients of the episode-end k update.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ccswitch.models.a3c_hyperparameters import Hyperparameters
from ccswitch.models.dualpi2_actor import action_dims, features_for

__all__ = ["build_networks", "export_mean_network", "k_window_gradients", "quiet_tensorflow"]


def quiet_tensorflow() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")


def build_networks(hp: Hyperparameters) -> tuple[Any, Any]:
    """(actor, critic) Keras models: actor s -> (mean in [-1, 1], std > 0) per action dimension (one; two for
    ``residual-k``: factor and k, independent Gaussians), critic s -> V(s)."""
    import keras

    n_obs, n_act = len(features_for(hp.mode, hp.obs)), action_dims(hp.mode)
    s = keras.Input((n_obs,))
    x = s
    for n in hp.actor_hidden:
        x = keras.layers.Dense(n, activation="relu")(x)
    init: Any = "glorot_uniform"  # Keras's default; scaled, the same family (fan_avg, uniform)
    if hp.mean_init_scale != 1.0:
        init = keras.initializers.VarianceScaling(hp.mean_init_scale, mode="fan_avg", distribution="uniform")
    mean = keras.layers.Dense(n_act, activation="tanh", name="mean", kernel_initializer=init)(x)
    # softplus(-1.2) = 0.26: the initial exploration is a gentle random walk of p', not a storm.
    std = keras.layers.Dense(n_act, activation="softplus", name="std",
                             bias_initializer=keras.initializers.Constant(hp.std_init_bias))(x)
    actor = keras.Model(s, [mean, std])
    c = keras.Input((n_obs,))
    y = c
    for n in hp.critic_hidden:
        y = keras.layers.Dense(n, activation="relu")(y)
    critic = keras.Model(c, keras.layers.Dense(1)(y))
    return actor, critic


def export_mean_network(actor: Any) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The actor's hidden layers and its mean head as (kernels, biases) for the actor file."""
    dense = [la for la in actor.layers if la.__class__.__name__ == "Dense" and la.name != "std"]
    return [la.get_weights()[0] for la in dense], [la.get_weights()[1] for la in dense]


def k_window_gradients(actor: Any, hp: Hyperparameters, k_dim: int, states: Any, raw_k: Any, adv: Any) -> Any:
    """Gradients of the episode-end k update (``k_credit`` "window", models/a3c_k_windows.py) on *actor*:
    -mean(log pi(a_k|s) A) - beta H(pi_k), clipped like the worker's."""
    import tensorflow as tf

    with tf.GradientTape() as ta:
        mean, std = actor(states)
        m, sd = mean[:, k_dim], std[:, k_dim] + hp.std_min
        logp = -0.5 * tf.square((raw_k - m) / sd) - tf.math.log(sd)
        loss = -tf.reduce_mean(logp * adv) - hp.entropy_beta * tf.reduce_mean(tf.math.log(sd))
    g, _ = tf.clip_by_global_norm(ta.gradient(loss, actor.trainable_variables), hp.grad_clip)
    return g
