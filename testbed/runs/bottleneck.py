"""The :class:`Bottleneck` topology (sender and receiver namespaces, a veth pair, a tbf) and veth plumbing.

::

    with Bottleneck(rate_mbit=50) as bn:
        run_in(bn.receiver, ["iperf3", "-s", "-1"])  ...
        with entered(bn.sender):
            ...  # this thread now lives in the sender namespace

:func:`wait_oper_up` (a device's qdisc is active) is shared with the scenario
topology (testbed/runs/topology.py).
"""

from __future__ import annotations

import contextlib
import random
import time
from pathlib import Path

from pyroute2 import IPRoute

from .netns_lifecycle import PREFIX, NetnsError, create_netns_group, delete_netns_all, sigint_deferred
from .netns_processes import LiveHandles, Resource, entered
from .netns_tbf import qdisc_drops, set_tbf, tbf_defaults

DEFAULT_RATE_MBIT = 50.0
"""Default bottleneck rate of :class:`Bottleneck`."""

_SENDER_IFINDEX = 10


def wait_oper_up(ns: str, dev: str, timeout_s: float = 3.0) -> None:
    """Wait until *dev* in *ns* reports operstate UP (its qdisc is active)."""
    deadline = time.monotonic() + timeout_s
    with IPRoute(netns=ns, flags=0) as ipr:
        while True:
            links = ipr.get_links(ifname=dev)
            state = links[0].get_attr("IFLA_OPERSTATE") if links else None
            if state == "UP":
                return
            if time.monotonic() > deadline:
                raise NetnsError(f"{dev} in {ns} did not come up (operstate {state})")
            time.sleep(0.01)


class Bottleneck(Resource):
    """Sender and receiver namespaces joined by a veth pair with a tbf bottleneck.

    Topology (``ID`` is 6 random hex digits, ``A.B.C`` a random 10/8 subnet)::

        ccs-ID-snd                              ccs-ID-rcv
        snd0 10.A.B.C+1/30  ==== veth ====  rcv0 10.A.B.C+2/30
        (root tbf: rate_mbit, burst, limit)

    Parameters:
        rate_mbit: bottleneck rate in Mbit/s (10^6 bit/s) on the sender's egress;
            default 50.  ``None`` installs no qdisc (unshaped veth).
        burst_bytes: tbf bucket size; default 1 ms at the rate, >= 10 frames.
        limit_bytes: tbf queue size in bytes; default 20 ms at the rate.
        limit_packets: alternative to *limit_bytes*, in 1514-byte frames.
        disable_ipv6: turn IPv6 off on both veth ends (no RS/DAD noise in captures).
        router: put a forwarding router namespace (``ccs-ID-rtr``) between sender and
            receiver and the tbf on its egress towards the receiver, so queue overflow
            is real packet loss for the sender (see :attr:`shaper`).

    Use as a context manager; leaving it (also through an exception or Ctrl-C)
    kills the processes inside and removes both namespaces.  Attributes:
    ``sender``, ``receiver`` (namespace names), ``sender_dev``, ``receiver_dev``,
    ``sender_addr``, ``receiver_addr`` (IPv4 strings), ``prefixlen``, ``id``.
    """

    sender_dev = "snd0"
    receiver_dev = "rcv0"
    router_devs = ("rtr0", "rtr1")  # towards the sender, towards the receiver
    prefixlen = 30

    def __init__(
        self,
        rate_mbit: float | None = DEFAULT_RATE_MBIT,
        *,
        burst_bytes: int | None = None,
        limit_bytes: int | None = None,
        limit_packets: int | None = None,
        disable_ipv6: bool = True,
        router: bool = False,
    ) -> None:
        if rate_mbit is not None:
            tbf_defaults(rate_mbit, burst_bytes, limit_bytes, limit_packets)  # validate
        self.rate_mbit = rate_mbit
        self.burst_bytes = burst_bytes
        self.limit_bytes = limit_bytes
        self.limit_packets = limit_packets
        self.disable_ipv6 = disable_ipv6
        self.router = ""  # router namespace name when router=True
        self._with_router = router
        self.id = ""
        self.sender = ""
        self.receiver = ""
        rnd = random.SystemRandom()
        base = f"10.{rnd.randint(1, 254)}.{rnd.randint(0, 255)}.{rnd.randrange(0, 256, 8)}"  # two /30s: .0-.7
        net = base.rsplit(".", 1)
        self.sender_addr = f"{net[0]}.{int(net[1]) + 1}"
        self.receiver_addr = f"{net[0]}.{int(net[1]) + 2}"
        if router:  # sender net .0/30 (router .2), receiver net .4/30 (router .5, receiver .6)
            self.router_addrs = (f"{net[0]}.{int(net[1]) + 2}", f"{net[0]}.{int(net[1]) + 5}")
            self.receiver_addr = f"{net[0]}.{int(net[1]) + 6}"
        self._created: list[str] = []
        self._closed = False

    # -- lifecycle --

    def open(self) -> None:
        """Create the namespaces, veth pair, addresses and qdisc."""
        if self._created:
            raise NetnsError("Bottleneck is already open")
        _live.add(self)
        self._closed = False
        try:
            self._create_namespaces()
            self._configure()
        except BaseException:
            self.close()
            raise

    def _create_namespaces(self) -> None:
        roles = ("snd", "rcv", "rtr") if self._with_router else ("snd", "rcv")
        self.id = create_netns_group(roles, self._created)
        self.sender, self.receiver = f"{PREFIX}{self.id}-snd", f"{PREFIX}{self.id}-rcv"
        if self._with_router:
            self.router = f"{PREFIX}{self.id}-rtr"

    def _configure(self) -> None:
        if self.router:
            self._configure_routed()
        else:
            self._configure_direct()
        if self.disable_ipv6:
            for ns, dev in self._ends():
                with entered(ns), contextlib.suppress(OSError):
                    Path(f"/proc/sys/net/ipv6/conf/{dev}/disable_ipv6").write_text("1\n")
        if self.rate_mbit is not None:
            self.set_rate(
                self.rate_mbit,
                burst_bytes=self.burst_bytes,
                limit_bytes=self.limit_bytes,
                limit_packets=self.limit_packets,
            )

    def _ends(self) -> list[tuple[str, str]]:
        ends = [(self.sender, self.sender_dev), (self.receiver, self.receiver_dev)]
        if self.router:
            ends += [(self.router, self.router_devs[0]), (self.router, self.router_devs[1])]
        return ends

    @property
    def shaper(self) -> tuple[str, str]:
        """(namespace, device) whose egress holds the tbf: the router's side
        towards the receiver when routed, else the sender's own veth."""
        return (self.router, self.router_devs[1]) if self.router else (self.sender, self.sender_dev)

    def _veth(self, ns: str, dev: str, addr: str, peer_ns: str, peer_dev: str, peer_addr: str,
              index: int) -> None:
        with IPRoute(netns=ns, flags=0) as ipr:
            ipr.link("add", index=index, ifname=dev, kind="veth",
                     peer={"ifname": peer_dev, "net_ns_fd": peer_ns})
            idx = ipr.link_lookup(ifname=dev)[0]
            ipr.addr("add", index=idx, address=addr, prefixlen=self.prefixlen)
            ipr.link("set", index=idx, state="up")
        with IPRoute(netns=peer_ns, flags=0) as ipr:
            idx = ipr.link_lookup(ifname=peer_dev)[0]
            ipr.addr("add", index=idx, address=peer_addr, prefixlen=self.prefixlen)
            ipr.link("set", index=idx, state="up")
        wait_oper_up(ns, dev)
        wait_oper_up(peer_ns, peer_dev)

    def _configure_routed(self) -> None:
        """sender --veth-- router --veth-- receiver; the router forwards and shapes.

        Drops at the router are real losses for the sender's TCP, whereas a full
        qdisc on the sender's own device only makes its stack hold packets back.
        """
        r_snd, r_rcv = self.router_devs
        self._veth(self.sender, self.sender_dev, self.sender_addr, self.router, r_snd,
                   self.router_addrs[0], _SENDER_IFINDEX)
        self._veth(self.router, r_rcv, self.router_addrs[1], self.receiver, self.receiver_dev,
                   self.receiver_addr, _SENDER_IFINDEX + 1)
        with entered(self.router):
            Path("/proc/sys/net/ipv4/ip_forward").write_text("1\n")
        for ns, gw in ((self.sender, self.router_addrs[0]), (self.receiver, self.router_addrs[1])):
            with IPRoute(netns=ns, flags=0) as ipr:
                ipr.route("add", dst="0.0.0.0/0", gateway=gw)

    def _configure_direct(self) -> None:
        with IPRoute(netns=self.sender, flags=0) as ipr:
            # Explicit ifindex: the peer gets ifindex 2 in its fresh namespace; were
            # ours 2 as well, the kernel's linkwatch would treat the carrier change as
            # non-urgent and keep the devices' qdiscs inactive for ~1 s.
            ipr.link(
                "add",
                index=_SENDER_IFINDEX,
                ifname=self.sender_dev,
                kind="veth",
                peer={"ifname": self.receiver_dev, "net_ns_fd": self.receiver},
            )
            idx = ipr.link_lookup(ifname=self.sender_dev)[0]
            ipr.addr("add", index=idx, address=self.sender_addr, prefixlen=self.prefixlen)
            ipr.link("set", index=idx, state="up")
        with IPRoute(netns=self.receiver, flags=0) as ipr:
            idx = ipr.link_lookup(ifname=self.receiver_dev)[0]
            ipr.addr("add", index=idx, address=self.receiver_addr, prefixlen=self.prefixlen)
            ipr.link("set", index=idx, state="up")
        wait_oper_up(self.sender, self.sender_dev)
        wait_oper_up(self.receiver, self.receiver_dev)

    def close(self) -> None:
        """Kill processes inside and remove both namespaces (idempotent).

        Ctrl-C arriving meanwhile is delivered after the teardown finished.
        """
        if self._closed:
            return
        with sigint_deferred():
            errors = delete_netns_all(self._created)
            self._closed = True
            _live.discard(self)
        if errors:
            raise NetnsError("teardown incomplete: " + "; ".join(errors))

    # -- runtime --

    @property
    def namespaces(self) -> list[str]:
        """Names of the namespaces currently owned by this instance."""
        return list(self._created)

    def set_rate(
        self,
        rate_mbit: float,
        *,
        burst_bytes: int | None = None,
        limit_bytes: int | None = None,
        limit_packets: int | None = None,
    ) -> None:
        """Change (or install) the bottleneck tbf (see :attr:`shaper`, :func:`set_tbf`)."""
        set_tbf(
            *self.shaper,
            rate_mbit,
            burst_bytes=burst_bytes,
            limit_bytes=limit_bytes,
            limit_packets=limit_packets,
        )
        self.rate_mbit = rate_mbit

    def drops(self) -> int:
        """Cumulative drops of the bottleneck tbf."""
        return qdisc_drops(*self.shaper)

    def __repr__(self) -> str:
        return (
            f"Bottleneck(sender={self.sender!r}, receiver={self.receiver!r}, "
            f"receiver_addr={self.receiver_addr!r}, rate_mbit={self.rate_mbit})"
        )


_live: LiveHandles[Bottleneck] = LiveHandles(Bottleneck.close)
