"""The token-bucket (``tbf``) bottleneck qdisc: its defaults, installing or changing it, its counters.

All through iproute2's ``tc`` inside the namespace (the reference encoder:
pyroute2 0.9.7's tbf support only knows the legacy 32-bit rate + rate table).
"""

from __future__ import annotations

import json
from typing import Any

from .netns_lifecycle import NetnsError
from .netns_processes import run_in

MTU = 1500
FRAME_BYTES = MTU + 14
"""Bytes a full-size packet occupies in tbf's accounting (IP MTU + Ethernet header)."""
DEFAULT_QUEUE_MS = 20.0
"""Default tbf queue: this many milliseconds of data at the bottleneck rate."""


def tbf_defaults(
    rate_mbit: float,
    burst_bytes: int | None = None,
    limit_bytes: int | None = None,
    limit_packets: int | None = None,
) -> tuple[int, int]:
    """Resolve tbf ``(burst_bytes, limit_bytes)`` defaults for *rate_mbit*.

    * burst: 1 ms worth of the rate, at least 10 full-size frames (15 140 B);
    * limit: ``limit_bytes``, else ``limit_packets`` full-size frames (1514 B each),
      else 20 ms of queue at the rate; never less than two frames.
    """
    if rate_mbit <= 0:
        raise ValueError(f"rate_mbit must be > 0, got {rate_mbit}")
    if limit_bytes is not None and limit_packets is not None:
        raise ValueError("give limit_bytes or limit_packets, not both")
    rate_bytes_s = rate_mbit * 1e6 / 8
    burst = burst_bytes if burst_bytes is not None else max(int(rate_bytes_s / 1000), 10 * FRAME_BYTES)
    if limit_bytes is not None:
        limit = limit_bytes
    elif limit_packets is not None:
        limit = limit_packets * FRAME_BYTES
    else:
        limit = int(rate_bytes_s * DEFAULT_QUEUE_MS / 1000)
    if burst <= 0:
        raise ValueError(f"burst_bytes must be > 0, got {burst}")
    return burst, max(limit, 2 * FRAME_BYTES)


def set_tbf(
    ns: str,
    dev: str,
    rate_mbit: float,
    *,
    burst_bytes: int | None = None,
    limit_bytes: int | None = None,
    limit_packets: int | None = None,
) -> None:
    """Install or change (``tc qdisc replace``) a root tbf on *dev* inside *ns*.

    Defaults as in :func:`tbf_defaults`.  Replacing keeps the qdisc's counters.
    """
    burst, limit = tbf_defaults(rate_mbit, burst_bytes, limit_bytes, limit_packets)
    rate_bit = round(rate_mbit * 1e6)
    _tc(ns, f"qdisc replace dev {dev} root tbf rate {rate_bit}bit burst {burst} limit {limit}".split())


def clear_qdisc(ns: str, dev: str) -> None:
    """Remove the root qdisc of *dev* in *ns* (back to the default); no-op if none."""
    cp = run_in(ns, ["tc", "qdisc", "del", "dev", dev, "root"], check=False, capture_output=True, text=True)
    if cp.returncode != 0 and "No such file" not in cp.stderr and "Cannot delete" not in cp.stderr:
        raise NetnsError(f"tc qdisc del dev {dev} root (in {ns}) failed: {cp.stderr.strip()}")


def _tc(ns: str, args: list[str]) -> str:
    cp = run_in(ns, ["tc", *args], check=False, capture_output=True, text=True)
    if cp.returncode != 0:
        raise NetnsError(f"tc {' '.join(args)} (in {ns}) failed: {cp.stderr.strip()}")
    return cp.stdout


def qdisc_stats(ns: str, dev: str) -> list[dict[str, Any]]:
    """``tc -s -j qdisc show dev DEV`` inside *ns*, parsed (one dict per qdisc)."""
    out = _tc(ns, ["-s", "-j", "qdisc", "show", "dev", dev])
    return json.loads(out) if out.strip() else []


def qdisc_drops(ns: str, dev: str) -> int:
    """Packets dropped by the tbf qdisc(s) on *dev* in *ns* (cumulative).

    Raises :class:`NetnsError` if *dev* has no tbf qdisc.
    """
    tbfs = [q for q in qdisc_stats(ns, dev) if q.get("kind") == "tbf"]
    if not tbfs:
        raise NetnsError(f"no tbf qdisc on {dev} in {ns}")
    return sum(int(q.get("drops", 0)) for q in tbfs)
