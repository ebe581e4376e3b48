"""A router-side floor under the LFQ actor's per-flow limits (a deviation from paper 001, which has none).

The learned limit is kept unless it falls below a fraction of the flow's fair-share BDP; the router loop
(testbed/runs/lfq_agent.py) applies it after the actor when the scenario's lfq table sets
``share_floor_bdp``.  Why: the errors of an actor trained offline on ~10^3-10^4 noisy experiments are not
alike.  A limit too large costs queueing delay; one too small starves a loss-based flow under fair queuing,
whose idle share goes to the others (a Reno flow at 84 Mbit/s and 18 ms held at 3 packets got 4 % of its
share).  Half a BDP keeps Reno's sawtooth (0.75..1.5 BDP) above ~95 % utilisation; CUBIC needs less.
docs/network/lfq.md "A floor under the limits" has the measurements.

A floor in packets (``min_pkts``) covers what a BDP cannot: when the fair share's BDP is a couple of
packets (six flows sharing 13-46 Mbit/s at 4-25 ms), one BDP is 2-3 packets, and a Reno or CUBIC flow
with a few packets of queue beside BBR or PCC loses the window it needs to recover from a loss by fast
retransmit (a window of at least 4 after halving, so 8 before it) and the bursts of WiFi aggregation:
it got 0.31-0.72 of its share where FQ-CoDel, with no per-flow limit, gave 0.80-0.98.
16 packets is the configuration to run (queue ``lfq-space-floor1-min16``); docs/network/lfq.md "The third
held-out draw; a floor in packets" has the measurements.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from .lfq_actor import handshake_rtt_s, limit_for

__all__ = ["share_floor"]


def share_floor(flows: Sequence[Mapping[str, Any]], limits: Sequence[int], bdp_fraction: float,
                min_pkts: int = 0) -> list[int]:
    """Each flow's limit raised to at least *bdp_fraction* x its fair share's BDP, and to *min_pkts*.

    The fair share is the mean out-rate of the flows that have one (linkemu's ``out_rate_pps`` at its
    fastest weight, reported once a flow has sent 32 packets): under fair queuing a link kept busy gives
    each backlogged flow that, whatever one starved flow sends, so a flow whose limit is too small does not
    shrink its own floor.  The BDP is that share times the flow's handshake RTT (linkemu's
    ``handshake_rtt_s``); a flow without one (seen from its middle: started before the router, or a
    repeated SYN) takes the median of the flows that have one, a guess that errs no worse than the
    actor's own (no flow has one: no floor).  *min_pkts* holds under every flow, also before any has a
    rate or an RTT (the module docstring says why).  The floor is capped at the action's largest limit
    (256)."""
    top = limit_for(1.0)  # the action's largest limit
    least = min(max(int(min_pkts), 0), top)
    limits = [max(int(lim), least) for lim in limits]
    rates = [float((f.get("features") or {}).get("out_rate_pps", [0.0])[0] or 0.0) for f in flows]
    sending = [r for r in rates if r > 0.0]
    if not sending or bdp_fraction <= 0.0:
        return limits
    share_pps = sum(sending) / len(sending)
    rtts = [handshake_rtt_s(f) for f in flows]
    known = [r for r in rtts if r is not None]
    fallback = statistics.median(known) if known else None
    out = []
    for rtt, lim in zip(rtts, limits, strict=True):
        rtt = rtt if rtt is not None else fallback
        floor = math.ceil(bdp_fraction * share_pps * rtt) if rtt is not None else 0
        out.append(max(int(lim), min(floor, top)))
    return out

