"""Reading run folders back: one run (``run``), the nine-scenario experiment, a whole matrix, the
host-vs-network coordination table (``coordination``), paper 001's one-flow reproduction
(``lfq_reproduction``), ccswitchd's remote decisions and their control path (``remote_decisions``)."""
