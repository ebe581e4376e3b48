"""Carrying scenarios out on network namespaces: one run (``runner``) or a matrix (``matrix``).

One run: ``runner`` (the entry point: the flows on schedule, the run folder)
with ``run_setup`` (topology, emulator, router agents, Prague, iperf3 servers,
tshark), ``run_monitors`` (the scenario clock, each client's monitor or
ccswitchd), ``run_progress`` and ``run_error``.  Namespaces: ``netns`` (the one
import point) over ``netns_lifecycle`` (names, owners, create/delete),
``netns_processes`` (commands and threads inside a namespace, their handles),
``netns_tbf`` (the tbf bottleneck qdisc) and ``bottleneck`` (the two-namespace
:class:`~ccswitch.testbed.runs.bottleneck.Bottleneck`).  ``tcp_senders``: the
client namespace's TCP set-up (SACK, the loss-based CCA) for paper 001's runs.

See the ``ccswitch.testbed`` package docstring for where this sits in the flow.
"""
