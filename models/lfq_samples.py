"""The samples ``lfq_train collect`` logs, as training reads them: the file, the reward, the filters.

One sample (a JSON line written by :mod:`ccswitch.envs.lfq_env`) is one flow's experiment: its draw (rate,
RTT, CCA, duration), the router's inputs when its limit changed, the limit tried and the reward it earned.
:mod:`.lfq_train` fits the critics and the actor on them; this module only selects and scores them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from .lfq_actor import Startup
from .lfq_ceiling import MixedSamplesError, delay_reward_at, share_of

__all__ = ["REWARDS", "load_samples", "long_enough", "round_trips", "sample_reward", "samples_startup"]


def load_samples(data: Path) -> list[dict[str, Any]]:
    """The samples of one JSON-lines file, in the order they were logged (blank lines skipped)."""
    return [json.loads(line) for line in data.open() if line.strip()]


REWARDS = ("paper", "paper-share", "delay")
"""``paper``: paper 001's reward as logged (lfq_actor.reward); ``paper-share``: the same divided by the flow's fair
share b (in the reward's units, MB/s): per state b is a constant, so the best limit of every state is the same,
but the critics no longer spend their fit on the spread of b between flows, which is most of the reward's
variance; ``delay``: lfq_actor.delay_reward (a deviation)."""


def samples_startup(rows: list[dict[str, Any]], files: list[Path]) -> Startup | None:
    """The start-up all samples were collected behind (None: none); samples of several: one error line."""
    kinds = {json.dumps(r.get("startup"), sort_keys=True) for r in rows}
    if len(kinds) > 1:
        raise SystemExit(f"lfq train: the samples in {', '.join(map(str, files))} were collected behind different "
                         f"start-ups ({', '.join(sorted(kinds))}); an actor is trained behind one: give only the "
                         f"files of one --startup")
    one = rows[0].get("startup") if rows else None
    return Startup.from_dict(one) if one else None


def sample_reward(row: dict[str, Any], kind: str) -> float:
    """The reward a logged experiment is trained on (REWARDS)."""
    if kind == "paper":
        return float(row["reward"])
    if kind == "paper-share":
        return float(row["reward"]) / (share_of(row) / 8)
    return delay_reward_at(row)


def round_trips(row: dict[str, Any]) -> float:
    """How many round trips a logged flow lasted: its duration over its drawn RTT."""
    return row["draw"]["duration_s"] / (row["draw"]["rtt_ms"] / 1000.0)


def long_enough(rows: list[dict[str, Any]], min_round_trips: float, files: list[Path]) -> list[dict[str, Any]]:
    """The rows whose flow lasted at least *min_round_trips* (``train --min-round-trips``); none left: one
    error line."""
    if min_round_trips <= 0 or not rows:
        return rows
    kept = [r for r in rows if round_trips(r) >= min_round_trips]
    if not kept:
        raise MixedSamplesError(f"no sample in {', '.join(map(str, files))} lasted {min_round_trips:g} round trips "
                                f"(the longest: {max(map(round_trips, rows)):.0f}): give a lower --min-round-trips")
    print(f"lfq train: {len(kept)} of {len(rows)} samples lasted >= {min_round_trips:g} round trips",
          file=sys.stderr)
    return kept
