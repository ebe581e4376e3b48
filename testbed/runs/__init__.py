"""Carrying scenarios out on network namespaces: one run (``runner``) or a matrix (``matrix``).

See the ``ccswitch.testbed`` package docstring for where this sits in the flow.
"""
