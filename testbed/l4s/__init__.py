"""The L4S testbed (``ccswitch.testbed.l4s``): L4S (Prague) against Classic flows through DualPI2 or
VDQ-CSAQM, in the order an experiment flows through it.

scenarios  ``make_scenarios`` (paper 004's phase templates -> testbed/scenarios/l4s-*.toml, each router
           queue's twin, :func:`~.make_scenarios.scenario_name`), ``scenario_args`` (a scenario's
           DualPI2 as options of ``dualpi2-router.sh``, the real-router kit; README.md here)
runs       ``run_experiments`` (the templates through the namespace testbed, once or per seed,
           resumable), ``prague_fidelity`` (one scenario per Prague build and RTT-independence setting)
reports    one run folder at a time: ``report_read`` (flows, goodput, per-queue statistics, ccswitchd's
           switches) -> ``report_phases`` (per-phase metrics into the data of ``report_model``) ->
           ``report_tables`` (Markdown) and ``report_plot`` (paper 004's figure layout); ``report`` is
           the command.  Seeds side by side (paper 004): ``p004_cells`` (phases of every seed by
           nominal slot) -> ``p004_targets`` (issue 13's targets), ``p004_tables``, ``p004_plot``;
           ``p004`` is the command.
papers     experiments with their own run and report: ``table2`` (paper 000's Table 2: ``table2_config``
           the set-up, ``table2`` the runs, ``table2_runs`` a finished run's numbers ->
           ``table2_verdicts`` -> ``table2_report`` and ``table2_plots``), ``a3c_closed_loop``
           (paper 000's A3C agent against DualPI2's PI controller, run and report), ``k_probe`` (the
           k-tuning agent's reward for constant actions on the training env's conditions)

Imports point one way, from the templates to the commands: make_scenarios, report_model <- report_read
<- report_phases <- report, p004_cells, a3c_closed_loop; report_tables and report_plot need only
report_model (and make_scenarios' queue names); p004_cells <- p004_targets <- p004_tables, p004_plot <-
p004; run_experiments and prague_fidelity end in ``report.main``; table2_config <- table2_runs,
table2_verdicts, table2_plots <- table2_report <- table2.  Nothing but the tests imports this package.

Every command runs either as a script (``.venv/bin/python testbed/l4s/report.py ...``, as the docs
write it) or as a module (``python -m ccswitch.testbed.l4s.report ...``): the modules import each
other by absolute name (``ccswitch.testbed.l4s.*``) for that reason.
"""
