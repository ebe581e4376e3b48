"""Network-namespace topologies for experiments and tests: the one import point of the pieces below.

Everything here needs root.  Where the code lives:

* ``netns_lifecycle`` -- namespace names, ownership records, create / delete / cleanup,
  the ``nsenter`` argv;
* ``netns_processes`` -- commands and threads inside a namespace, :class:`Resource`,
  :class:`LiveHandles`, :func:`stop_process`;
* ``netns_tbf`` -- the tbf bottleneck qdisc;
* ``bottleneck`` -- the :class:`Bottleneck` topology and :func:`wait_oper_up`.

The building blocks:

* :class:`Bottleneck` -- a sender and a receiver namespace joined by a veth pair,
  with a token-bucket (``tbf``) bottleneck on the sender's egress::

      with Bottleneck(rate_mbit=50) as bn:
          run_in(bn.receiver, ["iperf3", "-s", "-1"])  ...
          with entered(bn.sender):
              ...  # this thread now lives in the sender namespace

* :func:`run_in` / :func:`popen_in` -- run a command inside a namespace with
  ``nsenter --net=/run/netns/NAME``.  Unlike ``ip netns exec`` this does not enter
  a new mount namespace or remount ``/sys``, so ``/sys/fs/bpf`` (pinned BPF maps)
  stays visible to the command.
* :func:`entered` -- move the *current thread* into a namespace with ``setns(2)``
  and back.  Sockets (and BPF iterators) created inside see that namespace.
* :func:`set_tbf` / :func:`qdisc_drops` -- change the bottleneck at runtime and
  read its drop counter.  Both use iproute2's ``tc`` (the reference encoder:
  pyroute2 0.9.7's tbf support only knows the legacy 32-bit rate + rate table).
* :func:`cleanup_leftovers` -- remove ``ccs-*`` namespaces whose creating process
  is dead (a crashed or SIGKILLed test run).
* The pieces every namespace or process owner of the testbed shares:
  :func:`create_netns_group` / :func:`delete_netns_all` (one ``ccs-ID-*`` set),
  :func:`wait_oper_up`, :func:`stop_process` (SIGTERM, grace, SIGKILL),
  :class:`LiveHandles` (what is still open at interpreter exit gets closed)
  and :class:`Resource` (the ``with`` protocol over open/close).

Ownership: before a namespace is created, ``/run/ccswitch/netns/<name>.owner``
records the creating process (PID and its start time, so a recycled PID does not
look alive).  Namespace names are ``ccs-<6 hex>-<role>`` so concurrent runs never
collide.
"""

from __future__ import annotations

import shutil

from .bottleneck import DEFAULT_RATE_MBIT, Bottleneck, wait_oper_up
from .netns_lifecycle import (
    NETNS_RUN_DIR,
    OWNER_DIR,
    PREFIX,
    NetnsError,
    cleanup_leftovers,
    create_netns,
    create_netns_group,
    delete_netns,
    delete_netns_all,
    list_netns,
    netns_exists,
    netns_path,
    nsenter_argv,
    owner_alive,
    owner_pid,
)
from .netns_processes import LiveHandles, Resource, entered, popen_in, run_in, stop_process, wait_for_stderr
from .netns_tbf import (
    DEFAULT_QUEUE_MS,
    FRAME_BYTES,
    MTU,
    clear_qdisc,
    qdisc_drops,
    qdisc_stats,
    set_tbf,
    tbf_defaults,
)

__all__ = [
    "DEFAULT_QUEUE_MS",
    "DEFAULT_RATE_MBIT",
    "FRAME_BYTES",
    "MTU",
    "NETNS_RUN_DIR",
    "OWNER_DIR",
    "PREFIX",
    "Bottleneck",
    "LiveHandles",
    "NetnsError",
    "Resource",
    "cleanup_leftovers",
    "clear_qdisc",
    "create_netns",
    "create_netns_group",
    "delete_netns",
    "delete_netns_all",
    "entered",
    "list_netns",
    "missing_tools",
    "netns_exists",
    "netns_path",
    "nsenter_argv",
    "owner_alive",
    "owner_pid",
    "popen_in",
    "qdisc_drops",
    "qdisc_stats",
    "run_in",
    "set_tbf",
    "stop_process",
    "tbf_defaults",
    "wait_for_stderr",
    "wait_oper_up",
]


def missing_tools() -> list[str]:
    """Names of the external tools this module needs that are missing from PATH."""
    return [t for t in ("nsenter", "tc") if shutil.which(t) is None]
