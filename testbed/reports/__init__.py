"""Reading run folders back: one run (``run``: its report, from ``run_folder`` (the folder read
into per-flow series), ``run_metrics`` (per phase and last-half metrics), ``run_tables`` and
``run_plots``), the nine-scenario experiment, a whole matrix, the host-vs-network coordination table
(``coordination``), paper 001's one-flow reproduction (``lfq_reproduction``), ccswitchd's remote
decisions and their control path (``remote_decisions``)."""
