"""The Gymnasium environments: CCA switching as replay over captured traces, and DualPI2's p' live.

* ``features.py`` -- the observation (numpy only; the daemon builds the same vectors)
* ``reward.py``    -- paper 002's reward plus fairness, utilisation and switching cost; its evaluation function
* ``replay.py``    -- the corpus as per-condition arrays and the transition rules
* ``cc_env.py``    -- ``CongestionControlEnv`` (spaces documented there)
* ``dualpi2_env.py`` -- ``DualPi2Env``: paper 000's agent setting DualPI2's base probability on a live
  emulated link (root; real time; spaces documented there; not registered: it needs the testbed)

Registration with Gymnasium (the ``train`` extra) is lazy, so that the daemon,
which imports ``features`` only, never imports Gymnasium: ``ENV_ID`` is
registered when this package is imported after Gymnasium, when ``cc_env`` is
imported, or by :func:`register`::

    import gymnasium as gym
    import ccswitch.envs                             # after gymnasium: registers
    env = gym.make(ccswitch.envs.ENV_ID)             # the shipped sample corpus
    env = gym.make(ccswitch.envs.ENV_ID, corpus="path/to/corpus", split="train")
    env = gym.make("ccswitch.envs.cc_env:ccswitch/CongestionControl-v0")   # any order
"""

from __future__ import annotations

import sys

ENV_ID = "ccswitch/CongestionControl-v0"
ENTRY_POINT = "ccswitch.envs.cc_env:CongestionControlEnv"


def register() -> bool:
    """Register ENV_ID with Gymnasium (idempotent); False when Gymnasium is not installed."""
    try:
        import gymnasium
    except ImportError:
        return False
    if ENV_ID not in gymnasium.registry:
        gymnasium.register(id=ENV_ID, entry_point=ENTRY_POINT)
    return True


if "gymnasium" in sys.modules:
    register()
