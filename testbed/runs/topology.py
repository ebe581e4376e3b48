"""The testbed topology: N client namespaces, a router and a server, one subnet.

::

    ccs-ID-c1  eth0 10.99.0.11 ──veth── c1  ┐
    ccs-ID-c2  eth0 10.99.0.12 ──veth── c2  ├─ ccs-ID-rtr (no IPs; linkemu bridges
    ...                                     │   c1..cN <-> srv, or a kernel bridge)
    ccs-ID-srv eth0 10.99.0.1  ──veth── srv ┘

``ID`` is 6 random hex digits, so concurrent runs never collide.  Every veth end
has TSO, GSO and GRO off (the emulator must see wire-size frames) and IPv6 off
(no router solicitations in the captures).  Leaving the context manager -- also
through an exception, Ctrl-C or SIGTERM turned into SystemExit -- kills every
process inside and deletes the namespaces; after a SIGKILL,
:func:`ccswitch.testbed.runs.netns.cleanup_leftovers` (``ccswitch testbed cleanup``)
finds them by their dead owner.

:func:`kernel_emulator` is the fallback link (``link.emulator = "kernel"``): a
Linux bridge in the router with an htb rate limit and a pfifo queue on the
egress towards the server.  No delay, loss or WiFi: that needs linkemu.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path

from pyroute2 import IPRoute

from .netns import (
    PREFIX,
    LiveHandles,
    NetnsError,
    Resource,
    create_netns_group,
    delete_netns_all,
    entered,
    run_in,
    wait_oper_up,
)
from .netns_lifecycle import sigint_deferred

__all__ = ["Topology", "disable_offloads", "kernel_emulator"]

SUBNET = "10.99.0"
PREFIXLEN = 24
SERVER_HOST = 1
CLIENT_HOST0 = 10  # client i (1-based) gets .10 + i
_IFINDEX0 = 10
OFFLOAD_FEATURES = ("tx-tcp-segmentation", "tx-tcp6-segmentation", "tx-tcp-ecn-segmentation",
                    "tx-tcp-mangleid-segmentation", "tx-generic-segmentation", "rx-gro", "rx-gro-list")

def _after_fork_in_child() -> None:
    """pyroute2 forks helpers (netns.create, IPRoute(netns=...)) and stops them
    with SIGTERM.  A child that inherited a SIGTERM -> SystemExit handler (e.g.
    DataPlane's install_signal_handlers) would unwind the *parent's* stack
    copy -- create_netns's error path deletes the namespace just made, and
    atexit hooks close the parent's topologies.  So a forked child dies on
    SIGTERM the default way and forgets the parent's topologies."""
    _live.forget_all()
    with contextlib.suppress(ValueError, OSError):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGHUP, signal.SIG_DFL)


os.register_at_fork(after_in_child=_after_fork_in_child)


def disable_offloads(ns: str, dev: str) -> None:
    """``ethtool -K DEV tso off gso off gro off`` inside *ns* (pyroute2 if ethtool is absent)."""
    if shutil.which("ethtool"):
        cp = run_in(ns, ["ethtool", "-K", dev, "tso", "off", "gso", "off", "gro", "off"],
                    check=False, capture_output=True, text=True)
        if cp.returncode != 0:
            raise NetnsError(f"ethtool -K {dev} tso off gso off gro off (in {ns}) failed: {cp.stderr.strip()}")
        return
    from pyroute2.ethtool import Ethtool

    with entered(ns):
        eth = Ethtool()
        try:
            feats = eth.get_features(dev)
            for name in OFFLOAD_FEATURES:
                if name in feats.features:
                    feats.features[name].enable = False
            eth.set_features(dev, feats)
        finally:
            eth.close()


def offloads(ns: str, dev: str) -> dict[str, bool]:
    """Current state of the segmentation/GRO features of *dev* in *ns*."""
    from pyroute2.ethtool import Ethtool

    with entered(ns):
        eth = Ethtool()
        try:
            feats = eth.get_features(dev).features
            return {n: bool(feats[n].enable) for n in OFFLOAD_FEATURES if n in feats}
        finally:
            eth.close()


def _sysctl(ns: str, key: str, value: str) -> None:
    with entered(ns), contextlib.suppress(OSError):
        Path("/proc/sys", *key.split(".")).write_text(value + "\n")


class Topology(Resource):
    """Client, router and server namespaces joined by veth pairs (see module doc).

    Attributes after :meth:`open`: ``id``, ``clients`` (namespace per client, in
    client order), ``router``, ``server``, ``client_addrs``, ``server_addr``,
    ``client_ifs`` / ``server_if`` (the router's ports, for the emulator),
    ``client_dev`` / ``server_dev`` (the endpoints' device name).
    """

    client_dev = "eth0"
    server_dev = "eth0"
    server_if = "srv"

    def __init__(self, n_clients: int, *, subnet: str = SUBNET) -> None:
        if not 1 <= n_clients <= 200:
            raise ValueError(f"n_clients must be 1..200, got {n_clients}")
        self.n_clients = n_clients
        self.id = ""
        self.clients: list[str] = []
        self.router = ""
        self.server = ""
        self.client_ifs = [f"c{i}" for i in range(1, n_clients + 1)]
        self.client_addrs = [f"{subnet}.{CLIENT_HOST0 + i}" for i in range(1, n_clients + 1)]
        self.server_addr = f"{subnet}.{SERVER_HOST}"
        self._created: list[str] = []
        self._closed = True
        self._pid = os.getpid()

    @property
    def namespaces(self) -> list[str]:
        return list(self._created)

    def open(self) -> None:
        if self._created:
            raise NetnsError("Topology is already open")
        self._closed = False
        self._pid = os.getpid()
        _live.add(self)
        try:
            self._create_namespaces()
            self._wire()
        except BaseException:
            self.close()
            raise

    def _create_namespaces(self) -> None:
        clients = [f"c{i}" for i in range(1, self.n_clients + 1)]
        self.id = create_netns_group(["rtr", "srv", *clients], self._created)
        self.router, self.server = f"{PREFIX}{self.id}-rtr", f"{PREFIX}{self.id}-srv"
        self.clients = [f"{PREFIX}{self.id}-{c}" for c in clients]

    def _veth(self, index: int, router_if: str, peer_ns: str, peer_dev: str, addr: str) -> None:
        with IPRoute(netns=self.router, flags=0) as ipr:
            # Explicit ifindex != 2 (the peer's index in its fresh namespace): equal
            # indices make linkwatch treat the carrier change as non-urgent (~1 s).
            ipr.link("add", index=index, ifname=router_if, kind="veth",
                     peer={"ifname": peer_dev, "net_ns_fd": peer_ns})
        with IPRoute(netns=peer_ns, flags=0) as ipr:
            idx = ipr.link_lookup(ifname=peer_dev)[0]
            ipr.addr("add", index=idx, address=addr, prefixlen=PREFIXLEN)
        _sysctl(peer_ns, f"net.ipv6.conf.{peer_dev}.disable_ipv6", "1")
        _sysctl(self.router, f"net.ipv6.conf.{router_if}.disable_ipv6", "1")
        disable_offloads(self.router, router_if)
        disable_offloads(peer_ns, peer_dev)
        with IPRoute(netns=peer_ns, flags=0) as ipr:
            ipr.link("set", index=ipr.link_lookup(ifname=peer_dev)[0], state="up")
        with IPRoute(netns=self.router, flags=0) as ipr:
            ipr.link("set", index=ipr.link_lookup(ifname=router_if)[0], state="up", promiscuity=1)

    def _wire(self) -> None:
        _sysctl(self.router, "net.ipv6.conf.default.disable_ipv6", "1")
        _sysctl(self.router, "net.ipv6.conf.all.disable_ipv6", "1")
        self._veth(_IFINDEX0, self.server_if, self.server, self.server_dev, self.server_addr)
        for i, (ns, rif, addr) in enumerate(zip(self.clients, self.client_ifs, self.client_addrs, strict=True)):
            self._veth(_IFINDEX0 + 1 + i, rif, ns, self.client_dev, addr)
        for ns, dev in self.endpoints():
            wait_oper_up(ns, dev)

    def endpoints(self) -> list[tuple[str, str]]:
        """(namespace, device) of every host end: the server, then the clients."""
        return [(self.server, self.server_dev), *[(ns, self.client_dev) for ns in self.clients]]

    def close(self) -> None:
        """Kill the processes inside and delete every namespace (idempotent).

        Ctrl-C arriving meanwhile is delivered after the teardown finished.
        """
        if self._closed or os.getpid() != self._pid:  # never from a forked child
            return
        with sigint_deferred():  # a Ctrl-C meanwhile is delivered after the teardown
            errors = delete_netns_all(self._created)
            self._closed = True
            _live.discard(self)
        if errors:
            raise NetnsError("could not remove: " + "; ".join(errors))


_live: LiveHandles[Topology] = LiveHandles(Topology.close)


def _ip(ns: str, *args: str) -> None:
    cp = run_in(ns, list(args), check=False, capture_output=True, text=True)
    if cp.returncode != 0:
        raise NetnsError(f"{' '.join(args)} (in {ns}) failed: {cp.stderr.strip()}")


@contextlib.contextmanager
def kernel_emulator(topo: Topology, rate_mbit: float | None, limit_pkts: int) -> Iterator[None]:
    """Bridge the router's ports; htb at *rate_mbit* + pfifo(*limit_pkts*) towards the server.

    The downlink (towards the clients) is not shaped.  Removed on exit (the
    namespaces go away anyway).
    """
    ns = topo.router
    _ip(ns, "ip", "link", "add", "br0", "type", "bridge", "stp_state", "0", "forward_delay", "0")
    for dev in (topo.server_if, *topo.client_ifs):
        _ip(ns, "ip", "link", "set", dev, "master", "br0")
    _ip(ns, "ip", "link", "set", "br0", "up")
    if rate_mbit is not None:
        rate = f"{round(rate_mbit * 1e6)}bit"
        _ip(ns, "tc", "qdisc", "replace", "dev", topo.server_if, "root", "handle", "1:", "htb", "default", "1")
        _ip(ns, "tc", "class", "add", "dev", topo.server_if, "parent", "1:", "classid", "1:1", "htb",
            "rate", rate, "ceil", rate, "burst", "15k", "cburst", "15k")
        _ip(ns, "tc", "qdisc", "add", "dev", topo.server_if, "parent", "1:1", "handle", "10:", "pfifo",
            "limit", str(limit_pkts))
    else:
        _ip(ns, "tc", "qdisc", "replace", "dev", topo.server_if, "root", "pfifo", "limit", str(limit_pkts))
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            run_in(ns, ["ip", "link", "del", "br0"], check=False, capture_output=True)
