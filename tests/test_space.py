"""The scenario space and its generator (testbed/scenario/space.py, generate.py), and the
committed dev/test splits: validation, determinism, disjoint splits, coverage, traces."""

from __future__ import annotations

import csv
import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from ccswitch.testbed.scenario import ScenarioError, load_scenario
from ccswitch.testbed.scenario.generate import (
    draw,
    draw_split,
    generate,
    param_hash,
    split_of,
    tags,
)
from ccswitch.testbed.scenario.space import load_space, parse_space
from ccswitch.testbed.scenario.traces import read_trace, write_trace

REPO = Path(__file__).resolve().parents[1]
SPACE = REPO / "testbed" / "scenarios" / "space.toml"
MATRIX = REPO / "testbed" / "scenarios" / "matrix"
CCAS = ["bbr", "cubic", "pcc", "prague", "reno"]


@pytest.fixture(scope="module")
def space():
    return load_space(SPACE)


def _mutate(old: str, new: str) -> str:
    text = SPACE.read_text()
    assert old in text, old
    return text.replace(old, new, 1)


@pytest.mark.parametrize(("old", "new", "expect"), [
    ("count = [2, 6]", "count = [6, 2]", "clients.count: must satisfy"),
    ("count = [2, 6]", "count = [2.5, 6]", "clients.count: must be two integers"),
    ("train = 0.70", "train = 0.60", "splits: the shares must sum to 1"),
    ("reno = 0.15 }", "vegas = 0.15 }", "ccas.mix.vegas: unknown choice 'vegas'"),
    ("unmanaged_p = 0.25", "unmanaged_p = 1.5", "clients.unmanaged_p: must be <= 1"),
    ("max_ms = 300", "max_ms = 300\nmax_rtt = 1", "rtt.max_rtt: unknown field"),
    ('real_traces = "traces/real"', 'real_traces = "nowhere"', "bottleneck.real_traces: no *.trace file"),
    ("duration_s = 30 ", "duration_s = \"30\" ", "duration_s: must be a number"),
])
def test_space_errors_are_one_line_naming_the_field(old: str, new: str, expect: str) -> None:
    with pytest.raises(ScenarioError) as e:
        parse_space(_mutate(old, new), "space.toml", base_dir=SPACE.parent)
    msg = str(e.value)
    assert msg.startswith("space.toml: ") and expect in msg and "\n" not in msg


def test_missing_space_file_names_the_shipped_one(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match=r"testbed/scenarios/space\.toml"):
        load_space(tmp_path / "nope.toml")


def test_draws_are_deterministic_and_split_by_hash_alone(space) -> None:
    a = draw_split(space, "dev", 8, seed=3)
    b = draw_split(space, "dev", 8, seed=3)
    assert [d.params for d in a] == [d.params for d in b]
    for d in a:
        assert d.digest == param_hash(d.params) and split_of(d.digest, space.splits) == "dev"
    # the same candidate index under another seed draws other scenarios
    assert {d.digest for d in draw_split(space, "dev", 8, seed=4)}.isdisjoint({d.digest for d in a})


def test_splits_are_disjoint_and_shares_match(space) -> None:
    """Over 2,000 candidates the hash assigns each parameter set to one split in the shares
    asked for (70/15/15; binomial sd ~1 point, tolerance 4 points)."""
    seen: dict[str, str] = {}
    counts: Counter[str] = Counter()
    for i in range(2000):
        p = draw(space, np.random.default_rng([1, i]))
        h = param_hash(p)
        s = split_of(h, space.splits)
        assert seen.setdefault(h, s) == s
        counts[s] += 1
    for s, share in space.splits.items():
        assert abs(counts[s] / 2000 - share) < 0.04, counts


def test_space_coverage(space) -> None:
    """500 draws reach every dimension the space promises (issue 10, section 1)."""
    ps = [draw(space, np.random.default_rng([7, i])) for i in range(500)]
    assert {p["clients"] for p in ps} == {2, 3, 4, 5, 6}
    bases = [p["rtt_base_ms"] for p in ps]
    assert min(bases) < 3 and max(bases) > 80
    ratios = [max(p["client_rtt_ms"]) / p["rtt_base_ms"] for p in ps]
    assert max(ratios) > 6 and sum(r == 1 for r in ratios) > 100
    assert all(max(p["client_rtt_ms"]) <= space.rtt_max_ms + 0.01 for p in ps)
    rates = [p["rate_mbit"] for p in ps]
    assert min(rates) < 12 and max(rates) > 170
    assert {p["bottleneck"] for p in ps} == {"constant", "step", "ramp", "variable", "real"}
    assert {p["loss"]["kind"] for p in ps} == {"none", "bernoulli", "gilbert"}
    assert max(p["loss"].get("p", 0) for p in ps) > 0.015
    assert {p["wifi"] for p in ps} == {"none", "light", "heavy"}
    assert any(p["rate_anomaly"] for p in ps)
    assert {p["queue"]["kind"] for p in ps} == {"pfifo", "codel", "dualpi2"}
    bdps = [p["queue"]["bdp"] for p in ps if p["queue"]["kind"] == "pfifo"]
    assert min(bdps) < 0.3 and max(bdps) > 3.5
    assert {c for p in ps for c in p["ccas"]} == {"cubic", "bbr", "pcc", "reno"}
    assert any(not all(p["managed"]) for p in ps) and all(any(p["managed"]) for p in ps)
    assert any(p["late_joiner"] for p in ps) and any(p["early_stopper"] for p in ps) and any(p["web"] for p in ps)


def test_generated_files_are_scenarios(space, tmp_path: Path) -> None:
    files = generate(space, "train", 12, 5, tmp_path)
    assert len(files) == 12
    with (tmp_path / "index.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert [r["file"] for r in rows] == [f.name for f in files]
    for f, row in zip(files, rows, strict=True):
        sc = load_scenario(f, ccas=CCAS)
        p = json.loads(row["params"])
        assert sc.clients == p["clients"] and [fl.cca for fl in sc.flows if fl.kind == "bulk"] == p["ccas"]
        assert row["split"] == "train" and split_of(row["hash"], space.splits) == "train"
        assert sc.daemon is not None and (sc.daemon.clients == () or len(sc.daemon.clients) < sc.clients)
        assert set(row["tags"].split(";")) == set(tags(p))


@pytest.mark.parametrize("kind", ["step", "ramp", "variable", "real"])
def test_trace_mean_rate(space, tmp_path: Path, kind: str) -> None:
    """A written trace carries the drawn mean rate: step and ramp by construction (within 2 %
    from rounding to whole opportunities); variable and real over a 45 s trace within 35 %
    (an AR(1) with sigma 0.25 and a real trace window are not their long-run mean)."""
    p = next(p for i in range(2000) if (p := draw(space, np.random.default_rng([9, i])))["bottleneck"] == kind)
    path = tmp_path / "t.trace"
    per_opp = write_trace(p, space, path)
    ms = read_trace(path)
    assert ms == sorted(ms) and ms[0] >= 0
    period_s = ms[-1] / 1000
    mean = len(ms) * per_opp * 8 / period_s / 1e6
    seconds = math.ceil(period_s)
    if kind == "step":  # the rate is factor x rate between down_at and up_at (shares of the run)
        low = sum(1 for k in range(seconds)
                  if p["profile"]["down_at"] * p["duration_s"] <= k < p["profile"]["up_at"] * p["duration_s"])
        expect = (seconds - low + low * p["profile"]["factor"]) / seconds
    elif kind == "ramp":  # linear between factor and 1 over the run, flat after it
        lo, dur = p["profile"]["factor"], p["duration_s"]
        xs = [min(k / dur, 1.0) for k in range(seconds)]
        expect = sum(lo + (1 - lo) * (x if p["profile"]["up"] else 1 - x) for x in xs) / seconds
    if kind in ("step", "ramp"):
        assert mean == pytest.approx(p["rate_mbit"] * expect, rel=0.02)
    else:
        assert mean == pytest.approx(p["rate_mbit"], rel=0.35)


def _splits() -> list[str]:
    return [s for s in ("dev", "test") if (MATRIX / s).is_dir()]


def test_committed_splits_match_their_index_and_hash() -> None:
    """The committed dev and test splits: >= 30 scenarios each, each file's parameters hash to
    its split, no parameter set in both, every file a valid scenario."""
    space = load_space(SPACE)
    assert _splits() == ["dev", "test"]
    hashes: dict[str, set[str]] = {}
    for split in _splits():
        with (MATRIX / split / "index.csv").open() as fh:
            rows = list(csv.DictReader(fh))
        assert len(rows) >= 30
        hashes[split] = set()
        for r in rows:
            assert r["split"] == split and param_hash(json.loads(r["params"])) == r["hash"]
            assert split_of(r["hash"], space.splits) == split
            sc = load_scenario(MATRIX / split / r["file"], ccas=CCAS)
            assert sc.name == r["name"] and sc.duration_s <= 40
            hashes[split].add(r["hash"])
        assert len(list((MATRIX / split).glob("*.toml"))) == len(rows)
    assert hashes["dev"].isdisjoint(hashes["test"])
