"""Optional Prometheus metrics (metrics.listen = "127.0.0.1:9101"), via prometheus_client.

Exported (a private registry, so nothing of the Python process leaks in):

    ccswitch_flows{cca}                 sockets per congestion control (last tick)
    ccswitch_managed_flows              flows the daemon manages
    ccswitch_switches_total{kind}       switches applied: policy, revert, manual
    ccswitch_switch_failures_total      switch requests the kernel refused
    ccswitch_decisions_total            guard decisions
    ccswitch_tick_seconds               histogram of the control loop's tick duration

The HTTP server is prometheus_client's (a daemon thread); only loopback
addresses are accepted, the metrics carry no flow identities.
"""

from __future__ import annotations

import ipaddress
from typing import Any

TICK_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5)


class Metrics:
    def __init__(self, listen: str):
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

        host, _, port = listen.rpartition(":")
        host = host.strip("[]")
        try:
            if not ipaddress.ip_address(host).is_loopback:
                raise ValueError(f"metrics.listen: {host} is not a loopback address; metrics are local only")
        except ValueError as e:
            if "loopback" in str(e):
                raise
            if host != "localhost":
                raise ValueError(f"metrics.listen: {host!r} is not an address (use 127.0.0.1 or ::1)") from None
        self.registry = reg = CollectorRegistry()
        self.flows = Gauge("ccswitch_flows", "Sockets per congestion control", ["cca"], registry=reg)
        self.managed = Gauge("ccswitch_managed_flows", "Flows the daemon manages", registry=reg)
        self.switches = Counter("ccswitch_switches", "Switches applied", ["kind"], registry=reg)
        self.failures = Counter("ccswitch_switch_failures", "Switch requests the kernel refused", registry=reg)
        self.decisions = Counter("ccswitch_decisions", "Guard decisions", registry=reg)
        self.tick_s = Histogram("ccswitch_tick_seconds", "Control loop tick duration", buckets=TICK_BUCKETS,
                                registry=reg)
        self._seen = {"policy": 0, "revert": 0, "manual": 0, "failed": 0, "decisions": 0}
        self._ccas: set[str] = set()
        self.server, self.thread = start_http_server(int(port), addr=host, registry=reg)

    def tick(self, ctl: Any, ms: float) -> None:
        st = ctl.stats
        self.tick_s.observe(ms / 1e3)
        for kind, now in (("policy", st.switches), ("revert", st.reverts), ("manual", st.manual)):
            if now > self._seen[kind]:
                self.switches.labels(kind).inc(now - self._seen[kind])
                self._seen[kind] = now
        if st.failed > self._seen["failed"]:
            self.failures.inc(st.failed - self._seen["failed"])
            self._seen["failed"] = st.failed
        if st.decisions > self._seen["decisions"]:
            self.decisions.inc(st.decisions - self._seen["decisions"])
            self._seen["decisions"] = st.decisions
        self.managed.set(st.managed)
        t = ctl.last_table
        if t is not None:
            counts = t.value_counts("cca")
            for c in self._ccas - set(counts):
                self.flows.labels(c).set(0)
            for c, n in counts.items():
                self.flows.labels(c).set(n)
            self._ccas |= set(counts)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
