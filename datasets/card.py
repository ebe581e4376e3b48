"""The dataset card of a corpus: its numbers computed from the data, filled into a template.

A card template (``datasets/specs/<name>.card.md``) is Markdown with ``@KEY@``
placeholders; :func:`card_stats` measures the corpus folder and
:func:`render_card` fills them in, refusing to leave one unfilled.
``ccswitch dataset card CORPUS`` writes ``CORPUS/README.md`` (``ccswitch
dataset corpus`` does it after a build when the template exists), so the card
is regenerated with the corpus.

Keys (all measured, none typed in):

    SIZE      MB on disk of every file under the corpus folder (1 MB = 1e6 bytes)
    CAPTURES  capture folders (with manifest.json)
    ROWS      FlowSample rows over every samples.parquet
    LONG      % of rows whose interval_s exceeds LONG_INTERVAL x the capture's interval
    LONGEST   the longest interval_s of any row, s
    SWMED     median delay of a scripted switch (switch_results: t_done_s - at_s), s
    SWMAX     the largest such delay, s
    LATE      agent flows whose first sample ends more than LATE_AFTER intervals after t0
              (they started late: the old sampler's missing first interval accounts for one)
    HELDOUT   the conditions of the default held-out split (envs/replay.py split_conditions)
    TABLE     per condition, each static arm after the warm-up: agent throughput, RTT, loss,
              Jain's index over all flows at the bottleneck, mean reward per interval
              (envs/reward.py defaults), and the best static CCA by that reward
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .trace import CORPUS_INDEX, MANIFEST, SAMPLES, TraceError, find_captures

if TYPE_CHECKING:
    from ccswitch.envs.replay import ReplayCorpus

__all__ = ["CARD", "LATE_AFTER", "LONG_INTERVAL", "card_stats", "render_card", "template_for", "write_card"]

CARD = "README.md"
"""The card's file name inside the corpus folder."""
LONG_INTERVAL = 1.2
"""A row's interval counts as long above this multiple of the capture's sampling interval."""
LATE_AFTER = 2.0
"""An agent flow started late when its first sample ends more than this many intervals after t0."""
HELDOUT_FRACTION = 0.25
"""The held-out share the card marks (models/dqn.py Hyperparameters.test_fraction's default)."""
_PLACEHOLDER = re.compile(r"@([A-Z]+)@")


def template_for(corpus: str | Path) -> Path:
    """The card template of a corpus: datasets/specs/<corpus.json name>.card.md."""
    import json

    root = Path(corpus)
    name = root.name
    index = root / "corpus.json"
    if index.is_file():
        with contextlib.suppress(ValueError):
            name = str(json.loads(index.read_text()).get("name") or name)
    return Path(__file__).resolve().parent / "specs" / f"{name}.card.md"


def _fmt(x: float, digits: int = 1) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def card_stats(corpus: str | Path, replay: ReplayCorpus | None = None) -> dict[str, str]:
    """Every placeholder value of the card of *corpus*, as text (*replay*: the corpus, if loaded)."""
    root = Path(corpus)
    caps = find_captures(root)
    if not caps:
        raise TraceError(f"{root}: no captures ({SAMPLES} with {MANIFEST}) found")
    size = sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and p.name != CARD)
    rows = 0
    long_rows = 0
    longest = 0.0
    delays: list[float] = []
    late = 0
    for c in caps:
        t = c.samples()
        rows += t.num_rows
        iv = t.column("interval_s").to_numpy()
        long_rows += int((iv > LONG_INTERVAL * c.interval_s).sum())
        longest = max(longest, float(iv.max()) if len(iv) else 0.0)
        for s in c.manifest.get("switch_results") or []:
            if s.get("ok") and s.get("t_done_s") is not None:
                delays.append(float(s["t_done_s"]) - float(s["at_s"]))
        agent = c.agent_flow()
        t0 = c.manifest.get("t0_epoch")
        if agent is not None and t0 is not None:
            ts = t.column("ts_s").to_numpy()[t.column("flow_id").to_numpy() == int(agent["flow_id"])]
            if not len(ts) or ts.min() - float(t0) > LATE_AFTER * c.interval_s:
                late += 1
    # an extension corpus (from-matrix --extends) is read with the corpus it extends, and its
    # table lists the conditions it adds to or creates
    own = {c.condition for c in caps if c.condition}
    table, heldout = _condition_table(root, replay or _load_with_base(root), own)
    played = [c for c in caps if "policy" in (c.manifest.get("arm") or {})]
    policies = sorted({c.manifest["arm"]["policy"].get("sha256", "?")[:8] for c in played})
    return {
        "SIZE": _fmt(size / 1e6), "CAPTURES": str(len(caps)), "ROWS": f"{rows:,}",
        "LONG": _fmt(100 * long_rows / max(rows, 1)), "LONGEST": _fmt(longest),
        "SWMED": _fmt(float(np.median(delays)) if delays else math.nan, 2),
        "SWMAX": _fmt(max(delays) if delays else math.nan, 2), "LATE": str(late),
        "HELDOUT": ", ".join(f"`{h}`" for h in heldout) or "none", "TABLE": table,
        "SELFPLAY": (f"{len(played)} self-play captures (policy {', '.join(policies)} on every managed client)"
                     if played else "no self-play captures"),
    }


def _load_with_base(root: Path) -> ReplayCorpus:
    """*root* as the replay reads it: with the corpus it extends (a sibling folder), if any."""
    from ccswitch.envs.replay import ReplayCorpus

    try:
        extends = json.loads((root / CORPUS_INDEX).read_text()).get("extends")
    except (OSError, ValueError):
        extends = None
    return ReplayCorpus.load([root.parent / extends, root] if extends else root, log=lambda m: None)


def _condition_table(root: Path, replay: ReplayCorpus, own: set[str]) -> tuple[str, list[str]]:
    from ccswitch.envs.replay import split_conditions
    from ccswitch.envs.reward import RewardConfig, reward

    cfg = RewardConfig()
    _, heldout = split_conditions(replay.ids(), HELDOUT_FRACTION)
    head = ["condition", *replay.actions, "best"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines.insert(0, "Each cell: throughput Mbit/s / RTT ms / loss % / Jain / reward per interval. "
                    "*Held out*: in the default test split.\n")
    for cid in (c for c in replay.ids() if c in own):
        cond = replay.conditions[cid]
        cells, best, best_r = [], "", -math.inf
        k0 = replay.warmup_bins
        for a, name in enumerate(replay.actions):
            j = cond.static_trace(a)
            if j is None:
                cells.append("-")
                continue
            t = cond.traces[j]
            sl = slice(k0, cond.length)
            rs = [reward(cfg, throughput_mbps=float(t.throughput_mbps[k]), rtt_ms=float(t.rtt_ms[k]),
                         loss=float(t.loss[k]), jain=float(t.jain[k]), thratio=float(t.thratio[k]))[0]
                  for k in range(k0, cond.length)]
            r = float(np.mean(rs))
            if r > best_r:
                best, best_r = name, r
            cells.append(f"{np.mean(t.throughput_mbps[sl]):.1f} / {np.nanmean(t.rtt_ms[sl]):.1f} / "
                         f"{100 * np.mean(t.loss[sl]):.2f} / {np.mean(t.jain[sl]):.2f} / {r:.2f}")
        label = f"`{cid}`" + (" *held out*" if cid in heldout else "")
        lines.append("| " + " | ".join([label, *cells, f"**{best}**"]) + " |")
    wins = {a: sum(1 for line in lines if line.endswith(f"**{a}** |")) for a in replay.actions}
    lines.append("\nBest static CCA per condition: " + ", ".join(f"{a} {n}" for a, n in wins.items()) + ".")
    return "\n".join(lines), [h for h in heldout if h in own]


def render_card(template: str, stats: Mapping[str, Any], where: str = "card template") -> str:
    """Fill @KEY@ placeholders; an unknown or unfilled key is an error naming it."""
    def sub(m: re.Match[str]) -> str:
        key = m.group(1)
        if key not in stats:
            raise KeyError(f"{where}: placeholder @{key}@ has no value (known: {', '.join(sorted(stats))})")
        return str(stats[key])

    return _PLACEHOLDER.sub(sub, template)


def write_card(corpus: str | Path, template: str | Path | None = None) -> Path:
    """Regenerate CORPUS/README.md from *template* (default: :func:`template_for`)."""
    tpl = Path(template) if template is not None else template_for(corpus)
    if not tpl.is_file():
        raise TraceError(f"{tpl}: no card template (write one with @KEY@ placeholders; datasets/card.py)")
    out = Path(corpus) / CARD
    text = render_card(tpl.read_text(), card_stats(corpus), str(tpl))
    out.write_text(text)
    return out
