"""The error of a scenario run (:mod:`ccswitch.testbed.runs.runner` and the modules it is made of)."""

from __future__ import annotations


class RunError(RuntimeError):
    """A run could not be carried out (the message says which part failed)."""
