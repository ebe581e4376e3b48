"""Record traces from the ccswitch monitor: live on a host, or in a tbf bottleneck.

Two producers of captures (``trace.py`` has the format):

* :func:`record_live` -- the monitor of this host (or of one namespace) for a
  while; every flow it sees, or the ones matching a port filter
  (``ccswitch dataset record``).
* :func:`capture_bottleneck` -- one *arm* of one *condition* of the corpus
  (``corpus.py``): a sender and a receiver namespace joined through a router
  namespace whose egress holds a tbf (rate, queue); the agent flow and the
  competing flows are iperf3 flows from the sender namespace, the monitor
  runs there, and the arm's scripted switches are applied to the agent flow
  right after the sample at their time (so every interval has one CCA).
  There is no netem on these kernels, so RTT varies only through the queue.

Both sample on a fixed clock: sample k ends at t0 + (k+1) * interval.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ccswitch.schema import FLOW_SAMPLE_SCHEMA

from .trace import write_capture

__all__ = [
    "AGENT",
    "BASE_CPORT",
    "BASE_PORT",
    "DISCOVERY_DELAY_S",
    "Arm",
    "CaptureError",
    "Condition",
    "capture_bottleneck",
    "record_live",
]

BASE_PORT = 5201
"""iperf3 server port of the agent flow; competitor i uses BASE_PORT + 1 + i."""
BASE_CPORT = 61001
"""iperf3 --cport of the agent flow (above the ephemeral range); competitor i: + 1 + i."""
DISCOVERY_DELAY_S = 0.25
"""An extra sample this long after the start: the sampler reports a socket from its
second sighting on, so without it the first interval of every flow would be lost."""
AGENT = "agent"

Progress = Callable[[float, float, dict[str, tuple[str, float]]], None]
"""progress(elapsed_s, total_s, {flow name: (cca, goodput bit/s)})"""


class CaptureError(RuntimeError):
    """A capture could not be carried out (one-line message)."""


# ------------------------------------------------------------- conditions ---


def _num(x: float) -> str:
    return f"{x:g}".replace(".", "p")


@dataclass(frozen=True)
class Condition:
    """Link conditions and competing traffic: what stays fixed across the arms."""

    rate_mbit: float
    """Bottleneck rate, Mbit/s."""
    queue_ms: float = 20.0
    """Bottleneck queue, in milliseconds of data at the rate (the only RTT knob without netem)."""
    competitors: tuple[str, ...] = ()
    """CCAs of competing flows on the agent's host (its monitor sees them), 0 to 4."""
    remote_competitors: tuple[str, ...] = ()
    """CCAs of competing flows on other clients (runner backend; invisible to the host)."""
    delay_ms: float = 0.0
    """One-way propagation delay (runner backend with linkemu)."""
    loss: float = 0.0
    """Random (Bernoulli) loss probability per packet (runner backend with linkemu)."""
    wifi: str = ""
    """WiFi preset of corpus_spec.WIFI_PRESETS ("" = wired) (runner backend with linkemu)."""

    @property
    def id(self) -> str:
        parts = [f"r{_num(self.rate_mbit)}", f"q{_num(self.queue_ms)}"]
        if self.delay_ms:
            parts.append(f"d{_num(self.delay_ms)}")
        if self.loss:
            parts.append(f"l{_num(self.loss)}")
        if self.wifi:
            parts.append(f"w{self.wifi}")
        parts.append("L" + ("+".join(self.competitors) or "none"))
        if self.remote_competitors:
            parts.append("R" + "+".join(self.remote_competitors))
        return "-".join(parts)

    @property
    def queue_bytes(self) -> int:
        return int(self.rate_mbit * 1e6 / 8 * self.queue_ms / 1e3)

    def as_link(self, emulator: str) -> dict[str, Any]:
        return {"emulator": emulator, "rate_mbit": self.rate_mbit, "queue_ms": self.queue_ms,
                "queue_bytes": self.queue_bytes, "delay_ms": self.delay_ms, "loss": self.loss,
                "wifi": self.wifi or None}

    def competitor_list(self) -> list[dict[str, Any]]:
        return ([{"cca": c, "local": True} for c in self.competitors]
                + [{"cca": c, "local": False} for c in self.remote_competitors])


@dataclass(frozen=True)
class Switch:
    at_s: float
    cca: str
    inherit: str = "limited"


@dataclass(frozen=True)
class Arm:
    """The agent flow's script: its starting CCA and scripted switches."""

    start: str
    switches: tuple[Switch, ...] = ()

    @property
    def id(self) -> str:
        return "-".join([self.start, *(f"{s.cca}@{_num(s.at_s)}" for s in self.switches)])

    def as_dict(self) -> dict[str, Any]:
        return {"start": self.start,
                "switches": [{"at_s": s.at_s, "cca": s.cca, "inherit": s.inherit} for s in self.switches]}


# --------------------------------------------------------------- sampling ---


@dataclass
class _FlowSpec:
    name: str
    role: str
    cca: str
    port: int
    cport: int
    local: bool = True
    flow_id: int | None = None


@dataclass
class _Collector:
    """Keeps the rows of the flows of interest and remembers their ids."""

    by_cport: dict[int, _FlowSpec] | None  # None: keep every flow
    tables: list[pa.Table] = field(default_factory=list)
    latest: dict[str, tuple[str, float]] = field(default_factory=dict)
    seen: dict[int, dict[str, Any]] = field(default_factory=dict)  # flow_id -> first row (record mode)

    def add(self, table: pa.Table) -> None:
        if self.by_cport is not None:
            cports = pa.array(sorted(self.by_cport), pa.uint16())
            table = table.filter(pc.is_in(table["sport"], value_set=cports))
            keep = []
            for i, r in enumerate(table.select(["flow_id", "sport", "dport", "cca", "goodput_bps"]).to_pylist()):
                spec = self.by_cport[r["sport"]]
                if r["dport"] != spec.port:
                    continue
                keep.append(i)
                if spec.flow_id is None:
                    spec.flow_id = r["flow_id"]
                self.latest[spec.name] = (r["cca"], r["goodput_bps"])
            table = table.take(pa.array(keep, pa.int64()))
        else:
            for r in table.select(["flow_id", "src", "sport", "dst", "dport", "cca", "goodput_bps"]).to_pylist():
                self.seen.setdefault(r["flow_id"], r)
                self.latest[str(r["flow_id"])] = (r["cca"], r["goodput_bps"])
        if table.num_rows:
            self.tables.append(table)

    def table(self) -> pa.Table:
        return pa.concat_tables(self.tables) if self.tables else FLOW_SAMPLE_SCHEMA.empty_table()


def _sample_loop(dp: Any, collector: _Collector, t0: float, interval_s: float, duration_s: float,
                 switches: Sequence[tuple[float, Callable[[], None]]] = (),
                 progress: Progress | None = None, looks: Sequence[float] = (DISCOVERY_DELAY_S,)) -> None:
    """Sample at t0 + k*interval until duration; extra looks; switches right after their sample."""
    pending = sorted(switches, key=lambda s: s[0])
    extra = sorted(t for t in looks if (t % interval_s) > 0.1 * interval_s)
    k = 1
    while True:
        next_tick = t0 + k * interval_s
        next_look = t0 + extra[0] if extra else math.inf
        wake = min(next_tick, next_look)
        time.sleep(max(0.0, wake - time.monotonic()))
        now = time.monotonic()
        collector.add(dp.sample())
        if now >= next_tick - 1e-4:
            k = max(k + 1, int((now - t0) / interval_s + 1e-6) + 1)
            while extra and t0 + extra[0] <= now + 1e-4:
                extra.pop(0)
        else:
            extra.pop(0)
        elapsed = now - t0
        while pending and elapsed >= pending[0][0] - 1e-3:
            pending.pop(0)[1]()
        if progress is not None:
            progress(min(elapsed, duration_s), duration_s, dict(collector.latest))
        if elapsed >= duration_s - 1e-3:
            return


# ------------------------------------------------------------ record live ---


def record_live(out_dir: str | Path, *, duration_s: float, interval_s: float = 1.0,
                ports: Sequence[int] = (), capture_id: str | None = None,
                progress: Progress | None = None, netns: str | None = None) -> Path:
    """Record every flow the monitor sees (or those with a local/remote port in *ports*)."""
    from ccswitch.dataplane import DataPlane, install_signal_handlers
    from ccswitch.sampler import check_interval

    check_interval(interval_s)
    if not duration_s > 0:
        raise ValueError(f"duration must be > 0 s, got {duration_s}")
    install_signal_handlers()
    collector = _Collector(None)
    ns_ctx: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
    if netns:
        from ccswitch.testbed.runs.netns import entered

        ns_ctx = entered(netns)
    with ns_ctx, DataPlane(pcc=False) as dp:
        dp.sample()
        t0, t0_epoch = time.monotonic(), time.time()
        _sample_loop(dp, collector, t0, interval_s, duration_s, progress=progress, looks=())
    table = collector.table()
    if ports:
        want = pa.array(sorted(set(ports)), pa.uint16())
        table = table.filter(pc.or_(pc.is_in(table["sport"], value_set=want),
                                    pc.is_in(table["dport"], value_set=want)))
    ids = set(table.column("flow_id").to_pylist())
    flows = [{"flow_id": fid, "name": f"{r['src']}:{r['sport']}->{r['dst']}:{r['dport']}", "role": "observed",
              "cca": r["cca"], "local": True} for fid, r in sorted(collector.seen.items()) if fid in ids]
    name = capture_id or Path(out_dir).name
    return write_capture(out_dir, table, {
        "id": name, "source": "monitor", "interval_s": interval_s, "t0_epoch": t0_epoch,
        "duration_s": duration_s, "flows": flows, "condition": None, "arm": None,
        "scenario": {"netns": netns, "ports": list(ports)},
    })


# ------------------------------------------------------- bottleneck capture ---


def capture_bottleneck(out_dir: str | Path, cond: Condition, arm: Arm, *, seed: int = 1,
                       duration_s: float = 30.0, interval_s: float = 1.0,
                       progress: Progress | None = None) -> Path:
    """Run one arm of one condition through a routed tbf bottleneck; write the capture."""
    from ccswitch.bpf.switcher import SwitchError
    from ccswitch.dataplane import DataPlane
    from ccswitch.testbed.runs.iperf import IperfError, start_flow, start_server
    from ccswitch.testbed.runs.netns import Bottleneck, entered

    for what, value in (("delay_ms", cond.delay_ms), ("loss", cond.loss), ("wifi", cond.wifi),
                        ("remote_competitors", cond.remote_competitors)):
        if value:
            raise CaptureError(f"condition {cond.id}: {what} needs the runner backend with linkemu "
                               "(the tbf bottleneck has rate and queue only)")
    if len(cond.competitors) > 4:
        raise CaptureError(f"condition {cond.id}: at most 4 competing flows, got {len(cond.competitors)}")
    specs = [_FlowSpec(AGENT, "agent", arm.start, BASE_PORT, BASE_CPORT)]
    specs += [_FlowSpec(f"comp{i + 1}", "competitor", c, BASE_PORT + 1 + i, BASE_CPORT + 1 + i)
              for i, c in enumerate(cond.competitors)]
    collector = _Collector({s.cport: s for s in specs})
    out = Path(out_dir)
    (out / "iperf").mkdir(parents=True, exist_ok=True)
    switch_log: list[dict[str, Any]] = []
    agent = specs[0]

    def do_switch(sw: Switch) -> Callable[[], None]:
        def run() -> None:
            entry: dict[str, Any] = {"at_s": sw.at_s, "t_s": round(time.monotonic() - t0, 4), "cca": sw.cca,
                                     "inherit": sw.inherit}
            if agent.flow_id is None:
                entry.update(ok=False, error="agent flow not seen yet")
            else:
                try:
                    entry.update(dp.switch(agent.flow_id, sw.cca, sw.inherit).as_dict())
                except SwitchError as e:
                    entry.update(ok=False, error=str(e))
            switch_log.append(entry)
        return run

    with Bottleneck(rate_mbit=cond.rate_mbit, router=True,
                    limit_bytes=max(cond.queue_bytes, 2 * 1514)) as bn, contextlib.ExitStack() as stack:
        for s in specs:
            stack.enter_context(start_server(bn.receiver, s.port, bind=bn.receiver_addr))
        with entered(bn.sender), DataPlane(pcc=True) as dp:
            dp.sample()
            t0, t0_epoch = time.monotonic(), time.time()
            flows = {s.name: stack.enter_context(start_flow(bn.sender, bn.receiver_addr, s.port, cca=s.cca,
                                                            seconds=duration_s, interval=interval_s,
                                                            cport=s.cport))
                     for s in specs}
            _sample_loop(dp, collector, t0, interval_s, duration_s,
                         switches=[(sw.at_s, do_switch(sw)) for sw in arm.switches], progress=progress)
        iperf_totals = {}
        for name, h in flows.items():
            try:
                res = h.wait(timeout=duration_s + 20.0)
            except IperfError as e:
                raise CaptureError(f"condition {cond.id} arm {arm.id}: {e}") from None
            (out / "iperf" / f"{name}.json").write_text(h.stdout())
            iperf_totals[name] = {"sender_mbps": res.sender_mbps, "receiver_mbps": res.receiver_mbps,
                                  "retransmits": res.retransmits, "congestion": res.congestion}
        drops = bn.drops()
    missing = [s.name for s in specs if s.flow_id is None]
    if missing:
        raise CaptureError(f"condition {cond.id} arm {arm.id}: the monitor never saw flow(s) {', '.join(missing)}")
    failed = [e for e in switch_log if not e.get("ok")]
    if failed:
        raise CaptureError(f"condition {cond.id} arm {arm.id}: switch at {failed[0]['at_s']:g} s failed: "
                           f"{failed[0].get('error')}")
    return write_capture(out, collector.table(), {
        "id": f"{cond.id}--{arm.id}--s{seed}", "source": "bottleneck", "interval_s": interval_s,
        "t0_epoch": t0_epoch, "duration_s": duration_s, "seed": seed,
        "condition": cond.id, "arm": arm.as_dict(), "link": cond.as_link("tbf (router namespace)"),
        "competitors": cond.competitor_list(),
        "flows": [{"flow_id": s.flow_id, "name": s.name, "role": s.role, "cca": s.cca, "local": s.local,
                   "port": s.port, "cport": s.cport} for s in specs],
        "switch_results": switch_log, "iperf3": iperf_totals, "bottleneck_drops": drops,
        "scenario": {"backend": "bottleneck", "topology": "sender -> router (tbf) -> receiver"},
    })
