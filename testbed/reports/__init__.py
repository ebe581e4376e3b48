"""Reading run folders back: one run (``run``), the nine-scenario experiment, a whole matrix."""
