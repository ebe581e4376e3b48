"""The DQN: training (TensorFlow/Keras), the exported policy file, evaluation (issue 4).

* ``dqn.py``       -- single-file DQN, every hyperparameter in ``Hyperparameters`` (TensorFlow)
* ``policy.py``    -- the policy file: export, load, numpy forward pass (no TensorFlow)
* ``evaluate.py``  -- the DQN against static CCAs and paper 002's evaluation function
* ``plots.py``     -- training curves (paper 002 figures 17-19) and the evaluation plot
* ``crossval.py``  -- choosing hyperparameters by k-fold cross-validation over the training conditions
* ``policy.json``  -- the shipped trained policy; ``MODEL_CARD.md`` describes it, ``figures/`` has its
  training curves and held-out evaluation

Nothing here imports TensorFlow at import time; only ``dqn.py`` does.
"""
