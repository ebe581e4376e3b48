"""The DQN: training (TensorFlow/Keras), the exported policy file, evaluation (issue 4).

* ``dqn.py``       -- single-file DQN, every hyperparameter in ``Hyperparameters`` (TensorFlow)
* ``policy.py``    -- the policy file: export, load, numpy forward pass (no TensorFlow)
* ``evaluate.py``  -- the DQN against static CCAs and paper 002's evaluation function
* ``plots.py``     -- training curves (paper 002 figures 17-19) and the evaluation plot
* ``crossval.py``  -- choosing hyperparameters by k-fold cross-validation over the training conditions
* ``ablations.py`` -- the offline ablation sweep (docs/ablations.md)
* ``evaluate_matrix.py`` -- ``ccswitch evaluate POLICY --split dev|test``: a candidate end to end
* ``ceiling.py``   -- what a corpus supports: the managed population's CCA choice in hindsight
* ``competitor_probe.py`` -- whether a flow's own counters tell the kind of competitor it faces
* ``policy.json``  -- the shipped trained policy; ``MODEL_CARD.md`` describes it, ``figures/`` has its
  training curves and held-out evaluation

The other papers' learners sit beside it, one prefix each: ``a3c_*`` and ``dualpi2_*`` (A3C setting
DualPI2's p', the L4S router), ``dqn_rltcp.py`` and ``rltcp_agent.py`` (paper 003's RL-TCP), ``lfq_*``
(paper 001's learned per-flow buffers: ``lfq_train.py`` collects and trains, ``lfq_samples.py`` reads the
samples, ``lfq_actor.py`` is the actor file, ``lfq_floor.py`` the router-side floor, ``lfq_ceiling.py`` what
the samples support).  ``commands.py`` holds ``ccswitch train`` and ``ccswitch
evaluate``.

Nothing here imports TensorFlow at import time; only ``dqn.py`` does.
"""
