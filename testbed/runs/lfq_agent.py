"""Paper 001's agent beside linkemu: sets every lfq flow's buffer limit from an actor file each control interval.

The observation, action mapping, reward and the actor file are defined in
:mod:`ccswitch.models.lfq_actor` (module docstring: what the agent sees and does,
and where it deviates from paper 001); this module is the loop that runs it
against a live linkemu through its control socket (:mod:`.linkemu_control`).
The testbed runner starts one for every lfq queue whose scenario table names an
``agent``.

Each interval (``actor.interval_s``, 10 ms as trained; the paper runs its
network every 10th packet, 5..24 ms at 25..5 Mbit/s):

1. ``state`` of the direction, only its ``flows`` (each active flow's queue,
   5-tuple, limit, backlog, counters and the paper's 60 features);
2. one batched forward pass of the actor over all flows -> a limit per flow
   (a flow younger than the actor's start-up, if it has one, gets the start-up limit:
   :class:`ccswitch.models.lfq_actor.Startup`); with ``share_floor_bdp``, no limit below that
   fraction of the flow's fair-share BDP, with ``share_floor_min_pkts`` none below that many
   packets (:func:`ccswitch.models.lfq_floor.share_floor`);
3. one ``set`` with the flows whose limit changes (none: no request).

A flow that ends between 1 and 3 makes linkemu refuse the whole set ("no active
flow in queue Q"): the loop logs it and goes on (the next state no longer lists
the flow).  Anything else (linkemu gone) ends the loop with one log line, kept in
``error``; the flows keep the limits they last got.  Cost per step is in
``cpu_s / steps`` (docs/network/lfq.md has the measured numbers).
"""

from __future__ import annotations

import csv
import logging
import time
from pathlib import Path
from typing import Any

from ccswitch.models.lfq_actor import Actor
from ccswitch.models.lfq_floor import share_floor

from .linkemu_control import LinkemuControlError
from .router_agent import RouterAgentLoop

__all__ = ["STATE_FIELDS", "AgentLoop"]

log = logging.getLogger(__name__)

STATE_FIELDS = ("flows", "backlog_pkts", "bytes_out")
"""The keys of the direction's state the loop asks for (the flows carry the features)."""


class AgentLoop(RouterAgentLoop):
    """The LFQ agent beside a running linkemu: a thread that sets per-flow limits every ``interval_s``.

    ``start()`` connects (raising :class:`LinkemuControlError` if the socket is not there); ``stop()``
    joins.  With *log_csv*: one row per flow and interval (time, queue, backlog, limit before, limit
    set, the flow's handshake RTT in ms: empty when linkemu has none).  With ``trace=True`` the loop also
    keeps ``(t_s, backlog_pkts, bytes_out, {queue: limit})`` per interval in :attr:`trace` (the
    reproduction driver's queue samples).
    """

    name = "lfq-agent"

    def __init__(self, socket_path: str | Path, actor: Actor, *, direction: str = "uplink",
                 interval_s: float | None = None, log_csv: str | Path | None = None, trace: bool = False,
                 share_floor_bdp: float | None = None, share_floor_min_pkts: int | None = None) -> None:
        super().__init__(socket_path, direction=direction, interval_s=interval_s or actor.interval_s,
                         log_csv=log_csv)
        self.actor = actor
        self.share_floor_bdp = share_floor_bdp
        self.share_floor_min_pkts = share_floor_min_pkts
        self.keep_trace = trace
        self.trace: list[tuple[float, int, int, dict[int, int]]] = []
        self.sets = 0
        self.refused = 0

    def step(self) -> dict[str, Any]:
        """One control step (state -> limits -> set); returns the direction's state it acted on."""
        assert self._ctl is not None
        st = self._ctl.state(self.direction, fields=STATE_FIELDS)
        d = st[self.direction]
        flows = d.get("flows") or []
        limits = self.actor.limits_of(flows)
        if self.share_floor_bdp or self.share_floor_min_pkts:
            limits = share_floor(flows, limits, self.share_floor_bdp or 0.0, self.share_floor_min_pkts or 0)
        changes = [{"queue": f["queue"], "limit_pkts": lim} for f, lim in zip(flows, limits, strict=True)
                   if lim != f.get("limit_pkts")]
        if changes:
            try:
                self._ctl.set(self.direction, flows=changes)
                self.sets += 1
            except LinkemuControlError as e:
                if "no active flow" not in str(e):
                    raise
                self.refused += 1
                log.info("lfq agent: a flow ended before its limit was set (%s); next interval", e)
        self.steps += 1
        if self.keep_trace:
            self.trace.append((float(st["t_s"]), int(d.get("backlog_pkts", 0)), int(d.get("bytes_out", 0)),
                               {int(f["queue"]): lim for f, lim in zip(flows, limits, strict=True)}))
        d["_limits"] = limits
        d["_t_s"] = float(st["t_s"])
        return d

    def _run(self) -> None:
        out = None
        writer = None
        if self.log_csv is not None:
            out = self.log_csv.open("w", newline="")
            writer = csv.writer(out)
            writer.writerow(["t_s", "queue", "backlog_pkts", "limit_was", "limit_set", "handshake_rtt_ms"])
        interval_s, stopped, wait = self.interval_s, self._stop.is_set, self._stop.wait
        thread_time, monotonic = time.thread_time, time.monotonic
        next_t = monotonic()
        try:
            while not stopped():
                c0 = thread_time()
                d = self.step()
                if writer is not None:
                    for f, lim in zip(d.get("flows") or [], d["_limits"], strict=True):
                        rtt = f.get("handshake_rtt_s")
                        writer.writerow([f"{d['_t_s']:.4f}", f["queue"], f.get("backlog_pkts"),
                                         f.get("limit_pkts"), lim, "" if rtt is None else f"{1e3 * rtt:.3f}"])
                self.cpu_s += thread_time() - c0
                next_t += interval_s
                wait(max(next_t - monotonic(), 0.0))
        except (LinkemuControlError, OSError, KeyError, ValueError, TypeError) as e:
            self.error = f"{type(e).__name__}: {e}"
            log.warning("lfq agent stopped (%s); the flows keep the limits they last got", self.error)
        finally:
            if out is not None:
                out.close()
