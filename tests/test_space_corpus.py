"""The committed space corpus (datasets/space/): replayable, from the train split only, with its card.

Fast (reads files, no kernel).  The corpus is built by `ccswitch dataset from-matrix` from
matrix runs of the train split (datasets/specs/space.card.md says how); the kernel test of
that conversion is in tests/test_matrix.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ccswitch.datasets.card import card_stats, render_card
from ccswitch.datasets.trace import find_captures
from ccswitch.envs.replay import ReplayCorpus
from ccswitch.testbed.scenario.generate import param_hash, split_of
from ccswitch.testbed.scenario.space import load_space

REPO = Path(__file__).resolve().parent.parent
SPACE_CORPUS = REPO / "datasets" / "space"
COORDINATION = REPO / "datasets" / "space-coordination"
"""The extension of the space corpus: self-play and unilateral-deviation captures."""
SPACE = REPO / "testbed" / "scenarios" / "space.toml"
MIN_CONDITIONS = 150
"""Issue 11: a corpus of at least 150 conditions from the train split."""

pytestmark = pytest.mark.skipif(not (SPACE_CORPUS / "corpus.json").is_file(), reason="datasets/space not built")


@pytest.fixture(scope="module")
def captures() -> list:
    return find_captures(SPACE_CORPUS) + find_captures(COORDINATION)


@pytest.fixture(scope="module")
def replay() -> ReplayCorpus:
    return ReplayCorpus.load(SPACE_CORPUS, log=lambda m: None)


def test_every_capture_comes_from_the_train_split(captures: list) -> None:
    shares = load_space(SPACE).splits
    held = {p.stem for split in ("dev", "test") for p in (REPO / "testbed/scenarios/matrix" / split).glob("*.toml")}
    scenarios = set()
    for c in captures:
        params = c.manifest["space_params"]
        digest = param_hash(params)
        scenario = c.condition.split("~")[0]
        assert scenario.endswith(digest[:8]), f"{c.path}: name does not match its parameters"
        assert split_of(digest, shares) == "train", f"{c.path}: scenario of the {split_of(digest, shares)} split"
        assert scenario not in held
        scenarios.add(scenario)
    assert len(scenarios) >= 50


def test_the_coordination_corpus_extends_the_space_corpus(replay: ReplayCorpus) -> None:
    """Read together, its self-play captures join the space conditions as the policy's traces
    (never static), and each complete unilateral condition has every CCA with the other
    managed clients on CUBIC; the space corpus alone is unchanged (what the shipped policy
    was trained on: tests/test_dqn.py checks its fingerprint)."""
    both = ReplayCorpus.load([SPACE_CORPUS, COORDINATION], log=lambda m: None)
    assert set(replay.ids()) <= set(both.ids())
    played = [t for c in both.conditions.values() for t in c.traces if t.self_play]
    assert len(played) >= 150 and not any(t.static for t in played)
    solo = [c for c in both.conditions.values() if c.id.endswith(".solo")]
    assert solo, "no complete unilateral condition"
    for c in solo:
        assert {t.start for t in c.traces if t.static} == {0, 1, 2} and not any(t.self_play for t in c.traces)
    for cap in find_captures(COORDINATION):
        if cap.condition.endswith(".solo"):
            assert cap.manifest["arm"]["others"] == "cubic"
    # models/ceiling.py reads both kinds: population and unilateral conditions apart, self-play beside them
    from ccswitch.models.ceiling import report

    text = report(both)
    assert "Self-play runs" in text and f"Unilateral conditions (one managed client deviates from cubic, " \
                                      f"the others stay): {len(solo)} " in text
    tpl = REPO / "datasets" / "specs" / "space-coordination.card.md"
    want = render_card(tpl.read_text(), card_stats(COORDINATION, both))
    assert (COORDINATION / "README.md").read_text() == want, "regenerate: ccswitch dataset card " \
                                                              "datasets/space-coordination"


def test_replayable_with_every_cca_per_condition(captures: list, replay: ReplayCorpus) -> None:
    assert len(replay.conditions) >= MIN_CONDITIONS
    for cond in replay.conditions.values():
        assert {t.start for t in cond.traces if t.static} == {0, 1, 2}
    train, held = replay.split(0.25)
    assert not {c.split("~")[0] for c in train} & {c.split("~")[0] for c in held}  # by scenario
    # managed and unmanaged competitors are both in it (the self-play reading and the hosts we do not control)
    kinds = {(f["managed"]) for c in captures for f in c.flows if f["role"] == "competitor"}
    assert kinds == {True, False}


def test_card_matches_the_data(replay: ReplayCorpus) -> None:
    tpl = REPO / "datasets" / "specs" / "space.card.md"
    want = render_card(tpl.read_text(), card_stats(SPACE_CORPUS, replay))
    assert (SPACE_CORPUS / "README.md").read_text() == want, "regenerate: ccswitch dataset card datasets/space"
    index = json.loads((SPACE_CORPUS / "corpus.json").read_text())
    assert index["backend"] == "matrix" and index["ccas"] == ["cubic", "bbr", "pcc"]


def test_ceiling_of_one_cca_per_condition(replay: ReplayCorpus) -> None:
    """models/ceiling.py: the hindsight choice bounds every fixed choice and every learned one,
    and the cross-validated classifier only ever picks an arm's real outcome."""
    from ccswitch.models.ceiling import cross_validated_choice, outcomes

    o = outcomes(replay)
    assert len(o.ids) >= MIN_CONDITIONS and o.static.shape == (len(o.ids), 3)
    best = o.static.max(1)
    assert all(best.mean() >= o.static[:, a].mean() for a in range(3))
    got = cross_validated_choice(o.context, o)
    assert np.all((got >= o.static.min(1) - 1e-12) & (got <= best + 1e-12))
    # meeting the targets includes the min-share one
    assert np.all(o.static[o.met] >= 0.8) and 0 < o.met.sum() < o.met.size
    # every scenario's conditions share its outcome (min share is a property of the whole run)
    for g in set(o.groups):
        rows = o.static[o.groups == g]
        assert np.allclose(rows, rows[0], atol=0.05), g


def test_from_matrix_reads_only_run_folders_not_attempts_set_aside() -> None:
    """The matrix runner moves an interrupted attempt to seed-N.failed-M (kept, with whatever it wrote);
    conversion takes seed-N folders only."""
    from ccswitch.datasets.from_matrix import _seed_of

    assert [_seed_of(Path(n)) for n in ("seed-1", "seed-12", "seed-1.failed-1", "seed-x")] == [1, 12, None, None]
