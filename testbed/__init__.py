"""The emulated testbed, in the order a scenario flows through it.

``scenario/``  the contract: scenario files (``model``, ``model_qdisc``, ``parse``, ``parse_qdisc``), a scenario's
               arms (``arms``), its daemon settings as ccswitchd config
               (``daemon_config``), the declarative scenario space and its
               generator of train/dev/test splits (``space``, ``generate``), a
               folder's scenarios behind another router queue (``requeue``)
``runs/``      carrying a scenario out on network namespaces: ``netns``,
               ``topology``, the link (``emulator``: linkemu), ``iperf``,
               ``daemons`` (ccswitchd per client), ``runner`` (one scenario,
               one folder per seed), ``matrix`` (many scenarios x arms x seeds,
               resumable, locally or on a Ray cluster via ``cluster``), the
               router-side agents beside linkemu (``dualpi2_agent``, ``lfq_agent``),
               the policy server of ``[daemon.remote]`` in the server namespace
               (``policy_server``)
``reports/``   reading run folders back: ``run`` (one run: tables, plots, the
               last-half target metrics), ``experiments`` (the nine hand-written
               fairness scenarios), ``matrix`` (a whole matrix: one Markdown
               report with CDFs and per-category breakdowns), ``coordination``,
               ``lfq_reproduction`` (paper 001's one-flow set-up)
``experiments`` the nine-scenario driver (``python -m ccswitch.testbed.experiments``);
               beside it the drivers ``calibration`` (paper 002's path),
               ``network_comparison`` (router queues on the nine scenarios) and
               ``lfq_reproduction`` (paper 001's headline set-up)
``l4s/``       the L4S experiments through DualPI2 and VDQ-CSAQM, a flow of its
               own (its ``__init__`` has the module map): phase templates
               (``make_scenarios``) -> runs (``run_experiments``, ``prague_fidelity``)
               -> reports (``report`` and its ``report_*`` parts, paper 004's
               ``p004``, paper 000's ``table2`` and ``a3c_closed_loop``); beside
               them the real DualPI2 router kit (``dualpi2-router.sh``, ``scenario_args``)

Beside them, not Python packages: ``scenarios/`` (committed scenario files,
``scenarios/space.toml`` and the committed ``scenarios/matrix/`` dev and test
splits), ``linkemu/`` (the Rust link emulator), ``mikrotik/`` (the real hAP
ax3's RouterOS configuration).

Dependencies point one way: scenario <- runs, scenario <- reports, and
runs -> reports.run only to render each finished run folder; ``l4s`` uses all
three and nothing here imports it.
"""
