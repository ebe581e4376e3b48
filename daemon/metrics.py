"""Optional Prometheus metrics (metrics.listen = "127.0.0.1:9101"), via prometheus_client.

Exported (a private registry, so nothing of the Python process leaks in):

    ccswitch_flows{cca}                 sockets per congestion control (last tick)
    ccswitch_managed_flows              flows the daemon manages
    ccswitch_switches_total{kind}       switches applied: policy, revert, manual
    ccswitch_switch_failures_total      switch requests the kernel refused
    ccswitch_decisions_total            guard decisions
    ccswitch_tick_seconds               histogram of the control loop's tick duration

and with a policy server (policy.remote), from the first tick that uses one:

    ccswitch_remote_rows_total{answered}      policy rows decided by the server or locally
                                              (answered = "server" | "local": after a fallback)
    ccswitch_remote_fallbacks_total{reason}   requests that fell back to the local policy, by
                                              reason (timeout, unreachable, refused, garbage, ...)
    ccswitch_remote_answer_seconds            histogram of request-to-answer times

The HTTP server is prometheus_client's (a daemon thread); only loopback
addresses are accepted, the metrics carry no flow identities.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from ccswitch.daemon.policies import remote_policy

TICK_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5)
ANSWER_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)


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
        self._remote: dict[str, Any] | None = None  # the remote series, made on first use
        self._remote_seen: dict[str, int] = {}
        self._remote_src: Any = None  # the RemotePolicy the cursors belong to (a SIGHUP makes a new one)
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
        rp = remote_policy(ctl.decider)
        if rp is not None:
            self._tick_remote(rp)

    def _tick_remote(self, rp: Any) -> None:
        """Carry the RemotePolicy's and its client's running counters over as Prometheus deltas."""
        if self._remote is None:
            from prometheus_client import Counter, Histogram

            reg = self.registry
            self._remote = {
                "rows": Counter("ccswitch_remote_rows", "Policy rows decided by the server or locally",
                                ["answered"], registry=reg),
                "fallbacks": Counter("ccswitch_remote_fallbacks", "Requests that fell back to the local policy",
                                     ["reason"], registry=reg),
                "answer": Histogram("ccswitch_remote_answer_seconds", "Policy server request-to-answer time",
                                    buckets=ANSWER_BUCKETS, registry=reg)}
        if rp is not self._remote_src:  # a new policy (SIGHUP): its counters start from 0
            self._remote_src, self._remote_seen = rp, {}
        client, seen = rp.client, self._remote_seen
        for label, now in (("server", rp.remote_rows), ("local", rp.local_rows)):
            if now > seen.get(label, 0):
                self._remote["rows"].labels(label).inc(now - seen.get(label, 0))
                seen[label] = now
        for reason, now in dict(client.fallbacks).items():
            key = f"fallback:{reason}"
            if now > seen.get(key, 0):
                self._remote["fallbacks"].labels(reason).inc(now - seen.get(key, 0))
                seen[key] = now
        new = client.rtts_total - seen.get("answers", 0)
        if new > 0:  # the newest answers (at most the client's window of 4096 between two ticks)
            for rtt in list(client.rtts_s)[-min(new, len(client.rtts_s)):]:
                self._remote["answer"].observe(rtt)
            seen["answers"] = client.rtts_total

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
