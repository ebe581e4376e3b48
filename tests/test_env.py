"""The Gymnasium env: checker, replay of recorded samples, reward formula, seeding, features."""

from __future__ import annotations

import math
from pathlib import Path

import gymnasium as gym
import numpy as np
import pyarrow.parquet as pq
import pytest
from gymnasium.utils.env_checker import check_env

import ccswitch.envs
from ccswitch.datasets.synthetic import make_corpus
from ccswitch.datasets.trace import find_captures
from ccswitch.envs.cc_env import CongestionControlEnv
from ccswitch.envs.features import (
    OBS_DIM,
    Normalisation,
    ObservationBuilder,
    base_features,
    competition_features,
    feature_names,
)
from ccswitch.envs.replay import DEFAULT_CORPUS, ReplayCorpus, split_conditions
from ccswitch.envs.reward import RewardConfig, eval_scores, evaluation_choice, reward

DURATION = 12


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_corpus(tmp_path_factory.mktemp("syn") / "corpus", n_conditions=4, duration_s=DURATION)


@pytest.fixture(scope="module")
def replay(corpus_dir: Path) -> ReplayCorpus:
    return ReplayCorpus.load(corpus_dir)


def make_env(replay: ReplayCorpus, **kw: object) -> CongestionControlEnv:
    return CongestionControlEnv(replay, **kw)


def test_env_checker_passes(replay: ReplayCorpus) -> None:
    env = make_env(replay)
    check_env(env, skip_render_check=True)
    assert env.observation_space.shape == (OBS_DIM,) == (30,)
    assert env.action_space.n == 3 and env.actions == ("cubic", "bbr", "pcc")
    assert env.feature_names == feature_names()


def test_registered_id(corpus_dir: Path) -> None:
    env = gym.make(ccswitch.envs.ENV_ID, corpus=str(corpus_dir), split="train")
    obs, info = env.reset(seed=3)
    assert env.observation_space.contains(obs) and info["condition"] in env.unwrapped.train_ids
    env.close()


def test_replay_returns_the_recorded_next_sample(replay: ReplayCorpus, corpus_dir: Path) -> None:
    """Read the capture's Parquet directly and compare with what the env hands out."""
    env = make_env(replay, start="first")
    cond = replay.ids()[0]
    obs, info = env.reset(seed=0, options={"condition": cond, "start_cca": "cubic"})
    k = info["bin"]
    obs, _r, _term, _trunc, info = env.step(env.actions.index("pcc"))
    assert info["bin"] == k + 1 and info["cca"] == "pcc" and info["switched"]
    cap = next(c for c in find_captures(corpus_dir) if c.id == info["trace"])
    assert cap.manifest["arm"]["start"] == "pcc" or cap.manifest["arm"]["switches"]
    t = pq.read_table(cap.path / "samples.parquet").to_pylist()
    agent = cap.agent_flow()["flow_id"]
    ts = cap.manifest["t0_epoch"] + (k + 2) * cap.interval_s  # bin k+1 ends at t0 + (k+2) dt
    row = next(x for x in t if x["flow_id"] == agent and abs(x["ts_s"] - ts) < 1e-6)
    assert row["cca"] == "pcc"
    assert info["throughput_mbps"] == pytest.approx(row["throughput_bps"] / 1e6)
    assert info["rtt_ms"] == pytest.approx(row["rtt_us"] / 1e3)
    expected = env.normalisation.apply(base_features({c: np.array([row[c]]) for c in row}))[0]
    assert obs[18:24] == pytest.approx(expected.astype(np.float32), abs=1e-6)  # the newest window slot
    assert list(obs[24:27]) == [0.0, 0.0, 1.0]  # one-hot: pcc


def test_staying_keeps_the_trace_and_a_recorded_switch_is_used(replay: ReplayCorpus) -> None:
    env = make_env(replay, start="first")
    cond = replay.ids()[1]
    _, info = env.reset(seed=0, options={"condition": cond, "start_cca": "cubic"})
    trace0 = info["trace"]
    mid = DURATION // 2
    while info["bin"] < mid - 1:
        _, _, _, _, info = env.step(0)
        assert info["trace"] == trace0 and not info["switched"]
    _, _, _, _, info = env.step(1)  # cubic -> bbr exactly when the switch arm switched
    assert info["trace"].endswith(f"cubic-bbr@{mid:g}--s1")


def test_reward_matches_the_formula_by_hand() -> None:
    cfg = RewardConfig()
    r, terms = reward(cfg, throughput_mbps=20.0, rtt_ms=10.0, loss=0.01, jain=0.8, switched=True)
    by_hand = 0.5 * math.log(20) - 0.25 * math.log(10) - 0.25 * math.log(0.01) + 2.0 * (0.8 - 1) - 0.1
    assert r == pytest.approx(by_hand)
    assert terms["fairness"] == pytest.approx(-0.4) and terms["switch"] == -0.1
    # floors: zero loss -> 0.1 %, sub-millisecond RTT -> 1 ms, starvation -> 0.1 Mbit/s
    r0, _ = reward(cfg, throughput_mbps=0.0, rtt_ms=0.05, loss=0.0)
    assert r0 == pytest.approx(0.5 * math.log(0.1) - 0.0 - 0.25 * math.log(1e-3))
    cfg2 = RewardConfig(fairness="thratio", w_fairness=1.0, w_switch=0.0)
    r2, t2 = reward(cfg2, throughput_mbps=5.0, rtt_ms=2.0, loss=0.1, thratio=0.25)
    assert t2["fairness"] == pytest.approx(-abs(math.log(0.25)))
    assert r2 == pytest.approx(0.5 * math.log(5) - 0.25 * math.log(2) - 0.25 * math.log(0.1) - math.log(4))
    with pytest.raises(ValueError, match="fairness"):
        RewardConfig(fairness="max-min")


def test_utilisation_term_is_off_by_default_and_pays_for_a_full_link() -> None:
    kw = {"throughput_mbps": 20.0, "rtt_ms": 10.0, "loss": 0.01}
    r_off, terms = reward(RewardConfig(), utilisation=0.5, **kw)
    assert "utilisation" not in terms and r_off == reward(RewardConfig(), **kw)[0]
    cfg = RewardConfig(w_utilisation=2.0)
    _, half = reward(cfg, utilisation=0.5, **kw)
    _, over = reward(cfg, utilisation=1.3, **kw)     # above the nominal rate (measurement): capped at 1
    _, nan = reward(cfg, utilisation=math.nan, **kw)  # rate unknown (trace-driven link): no term
    _, starved = reward(cfg, utilisation=0.0, **kw)  # floored at 1/20
    assert half["utilisation"] == pytest.approx(2.0 * math.log(0.5)) and over["utilisation"] == 0.0
    assert "utilisation" not in nan and starved["utilisation"] == pytest.approx(2.0 * math.log(1 / 20))


def test_replayed_utilisation_is_the_bottleneck_total_over_the_rate(replay: ReplayCorpus) -> None:
    checked = 0
    for cond in replay.conditions.values():
        rate = cond.link.get("rate_mbit")
        for t in cond.traces:
            assert t.utilisation is not None and t.utilisation.shape == t.min_share.shape
            if not rate:
                assert np.isnan(t.utilisation).all()
                continue
            # Two active flows (the synthetic corpus: agent + one CUBIC): the other's throughput is the
            # agent's / thratio, so the total is known independently of how utilisation was summed.
            two = (t.n_flows == 2) & (t.throughput_mbps > 0) & np.isfinite(t.thratio) & (t.thratio > 0)
            total = t.throughput_mbps[two] * (1 + 1 / t.thratio[two])
            np.testing.assert_allclose(t.utilisation[two], total / rate, rtol=1e-6)
            checked += int(two.sum())
    assert checked > 0


def test_env_reward_is_the_formula_on_the_replayed_interval(replay: ReplayCorpus) -> None:
    cfg = RewardConfig(w_switch=0.3)
    env = make_env(replay, reward_config=cfg)
    _, info = env.reset(seed=5)
    for a in (0, 1, 1, 2):
        prev = info.get("cca")
        _obs, r, _term, trunc, info = env.step(a)
        expected, _ = reward(cfg, throughput_mbps=info["throughput_mbps"], rtt_ms=info["rtt_ms"], loss=info["loss"],
                             jain=info["jain"], switched=env.actions[a] != prev)
        assert r == pytest.approx(expected)
        if trunc:
            break


def test_seeded_episodes_are_reproducible(replay: ReplayCorpus) -> None:
    def rollout(seed: int) -> list[tuple[float, str]]:
        env = make_env(replay)
        env.action_space.seed(seed)
        obs, info = env.reset(seed=seed)
        out = [(float(obs.sum()), info["trace"])]
        while True:
            obs, r, term, trunc, info = env.step(env.action_space.sample())
            out.append((r, info["trace"]))
            if term or trunc:
                return out

    assert rollout(11) == rollout(11)
    assert rollout(11) != rollout(12)


def test_evaluation_function_and_oracle() -> None:
    s = eval_scores([10.0, 20.0, 15.0], [5.0, 10.0, 5.0], [0.0, 0.01, 0.0])
    assert s == pytest.approx([0.7 * 0.5 + 0.2 + 0.1, 0.7 + 0.2 * 0.5 + 0.0, 0.7 * 0.75 + 0.2 + 0.1])
    assert evaluation_choice(s, current=0) == 2  # 0.825 > 0.8: latency and loss outweigh 25 % throughput
    assert evaluation_choice(np.array([1.0, 1.0, 0.5]), current=1) == 1  # ties keep the current CCA


def test_oracle_prefers_the_good_cca_of_the_synthetic_corpus(replay: ReplayCorpus) -> None:
    env = make_env(replay, start="first")
    for cid in replay.ids():
        good = cid.rsplit("-", 1)[1]
        _, info = env.reset(seed=0, options={"condition": cid, "start_cca": "cubic"})
        assert env.actions[info["oracle_action"]] == good


def test_split_is_deterministic_and_disjoint() -> None:
    ids = [f"c{i}" for i in range(10)]
    train, test = split_conditions(ids, 0.25)
    assert len(test) == 3 and not set(train) & set(test) and sorted(train + test) == ids
    assert split_conditions(list(reversed(ids)), 0.25) == (train, test)
    assert split_conditions(["a"], 0.5) == (["a"], [])


def test_observation_builder_matches_the_env(replay: ReplayCorpus, corpus_dir: Path) -> None:
    """The daemon's builder, fed the capture's rows, produces the env's observation."""
    env = make_env(replay, start="first")
    cid = replay.ids()[2]
    obs, info = env.reset(seed=0, options={"condition": cid, "start_cca": "bbr"})
    cap = next(c for c in find_captures(corpus_dir) if c.id == info["trace"])
    table = cap.samples()
    builder = ObservationBuilder(env.normalisation)
    ts = table.column("ts_s").to_numpy()
    t0, dt = cap.manifest["t0_epoch"], cap.interval_s
    agent = cap.agent_flow()["flow_id"]
    for k in range(info["bin"] + 1):
        ids, got = builder.update(table.filter(np.abs(ts - (t0 + (k + 1) * dt)) < 1e-6))
    mine = got[list(ids).index(agent)]
    assert mine == pytest.approx(obs, abs=1e-5)


def test_competition_features() -> None:
    thr = np.array([10.0, 30.0, 5.0, 1.0])
    ctx = competition_features(thr, np.array([1, 1, 2, 2]), np.array([True, True, True, False]))
    assert ctx[0] == pytest.approx([0.25, 0.25, (40**2) / (2 * (100 + 900))])
    assert ctx[2] == pytest.approx([0.0, 1.0, 1.0])  # alone among active flows of host 2
    assert ctx[3] == pytest.approx([0.25, 1 / 6, 36 / (2 * 26)])  # inactive: computed as if active


def test_normalisation_clips_and_ignores_nan() -> None:
    raw = np.array([[1.0, np.nan, 0, 0, 0, 0], [3.0, 2.0, 0, 0, 0, 0]])
    n = Normalisation.fit(raw)
    assert n.mean[0] == pytest.approx(2.0) and n.mean[1] == pytest.approx(2.0)
    z = n.apply(np.array([[1e9, np.nan, 0, 0, 0, 0]]))
    assert z[0, 0] == n.clip and z[0, 1] == 0.0


def test_default_env_replays_the_shipped_sample() -> None:
    assert (DEFAULT_CORPUS / "corpus.json").is_file()  # datasets/sample is in the repository
    env = gym.make(ccswitch.envs.ENV_ID)
    obs, _ = env.reset(seed=0)
    total, n = 0.0, 0
    while True:
        obs, r, term, trunc, _info = env.step(env.action_space.sample())
        total += r
        n += 1
        assert env.observation_space.contains(obs) and math.isfinite(r)
        if term or trunc:
            break
    assert n >= 5


def _flow_table(ids: list[int], tick: int) -> object:
    """FlowSample rows for flows *ids* (values depend on flow and tick), two hosts."""
    import pyarrow as pa

    from ccswitch.schema import FLOW_SAMPLE_SCHEMA

    n = len(ids)
    f = np.asarray(ids, dtype=np.float64)
    cols: dict[str, object] = {fld.name: np.zeros(n) for fld in FLOW_SAMPLE_SCHEMA}
    cols.update(ts_s=np.full(n, 1.7e9 + tick), interval_s=np.ones(n), flow_id=np.asarray(ids, np.uint64),
                netns_cookie=(np.asarray(ids) % 2).astype(np.uint64), cgroup_id=np.zeros(n, np.uint64),
                src=["10.0.0.1"] * n, dst=["10.0.0.2"] * n, sport=np.asarray(ids, np.uint16),
                dport=np.full(n, 443, np.uint16), cca=[("cubic", "bbr", "pcc", "reno")[i % 4] for i in ids],
                throughput_bps=1e6 * (f + tick), sending_rate_bps=1.1e6 * (f + tick), rtt_us=1e3 * (f + 2 * tick),
                min_rtt_us=np.full(n, 500.0), loss_rate=0.001 * f, jitter_us=10.0 * f,
                sndq_bytes=np.full(n, 1000, np.uint32))
    cols["rtt_ratio"] = cols["rtt_us"] / 500.0  # type: ignore[operator]
    return pa.Table.from_arrays([pa.array(cols[fld.name], type=fld.type) for fld in FLOW_SAMPLE_SCHEMA],
                                schema=FLOW_SAMPLE_SCHEMA)


def test_observation_builder_same_flows_fast_path_matches_lookup() -> None:
    """Tables listing the same flows in the same order reuse the last slots (no per-flow lookup);
    the result equals a builder fed the rows in another order every tick (per-flow lookup), a flow
    that leaves and comes back after forget_after ticks starts a fresh window, and the CCA one-hot
    comes from pyarrow (update) exactly as from names (update_arrays)."""
    norm = Normalisation.fit(np.random.default_rng(0).normal(size=(50, 6)))
    fast, slow, named = (ObservationBuilder(norm, forget_after=2) for _ in range(3))
    flows = [1, 2, 3, 4, 5]
    for tick in range(40):
        present = flows if not 10 <= tick < 30 else flows[:3]  # flows 4, 5 away for 20 ticks (expired)
        t = _flow_table(present, tick)
        ids_f, obs_f = fast.update(t)
        perm = list(reversed(range(len(present)))) if tick % 2 else list(range(len(present)))
        ids_s, obs_s = slow.update(t.take(perm))
        order = np.argsort(ids_s)
        assert list(ids_f) == present and list(ids_s[order]) == present
        assert obs_f == pytest.approx(obs_s[order], abs=0)
        cols = {c: t.column(c).to_numpy(zero_copy_only=False) for c in t.column_names}
        _, obs_n = named.update_arrays(cols, t.column("cca").to_pylist())
        assert obs_n == pytest.approx(obs_f, abs=0)
        if tick == 30:  # flow 4 is back: its window is its first sample repeated
            w = obs_f[3, :24].reshape(4, 6)
            assert (w == w[-1]).all()
    assert list(obs_f[3, 24:27]) == [1.0, 0.0, 0.0] and list(obs_f[2, 24:27]) == [0.0, 0.0, 0.0]  # reno: none


def test_several_corpus_folders_read_as_one(corpus_dir: Path, tmp_path: Path) -> None:
    """`ccswitch train --data A --data B`: the conditions of both, one fingerprint, no id in both."""
    import shutil

    from ccswitch.datasets.trace import TraceError

    a, b = tmp_path / "a", tmp_path / "b"
    conds = sorted(p for p in corpus_dir.iterdir() if p.is_dir())
    for i, c in enumerate(conds):
        shutil.copytree(c, (a if i % 2 else b) / c.name)
    one, both = ReplayCorpus.load(corpus_dir), ReplayCorpus.load([a, b])
    assert both.ids() == one.ids() and len(ReplayCorpus.load(a).ids()) < len(one.ids())
    assert both.fingerprint == one.fingerprint  # the same captures, wherever they sit
    assert both.sources == [str(a), str(b)]
    with pytest.raises(TraceError, match="in both"):
        ReplayCorpus.load([corpus_dir, a])


def test_self_play_trace_is_the_policy_not_a_counterfactual(corpus_dir: Path, tmp_path: Path) -> None:
    """A self-play capture (datasets/from_matrix.py, a run with the policy on every managed client):
    the agent stays in it while it does what the policy did, it can start an episode, and it is
    never taken as "had the flow run X all along" (the static arms are)."""
    import json
    import shutil

    from ccswitch.datasets.from_matrix import _played_arm
    from ccswitch.datasets.trace import Capture

    src = next(c for c in find_captures(corpus_dir) if c.manifest["arm"] == {"start": "cubic", "switches": []})
    dst = tmp_path / "corpus"
    shutil.copytree(corpus_dir, dst)
    sp = dst / src.path.relative_to(corpus_dir).parent / "selfplay-feedbeef--s1"
    shutil.copytree(src.path, sp)
    man = json.loads((sp / "manifest.json").read_text())
    # the arm as from_matrix derives it from the samples: no CCA change -> no switch, still the policy's
    arm = _played_arm(Capture(sp, man).samples(), int(src.agent_flow()["flow_id"]),
                      {"meta": {"t0_epoch": man["t0_epoch"]}}, "feedbeef" * 8)
    assert arm == {"start": "cubic", "switches": [], "policy": {"sha256": "feedbeef" * 8}}
    man.update(id=man["id"] + "-selfplay", arm=arm)
    (sp / "manifest.json").write_text(json.dumps(man))
    replay = ReplayCorpus.load(dst)
    cond = replay.conditions[src.condition]
    played = [j for j, t in enumerate(cond.traces) if t.self_play]
    assert len(played) == 1 and not cond.traces[played[0]].static
    assert cond.static_trace(0) != played[0] and cond.static_trace(0) is not None
    # episodes starting on cubic begin in the static cubic trace or the self-play one, both seen
    env = make_env(replay, start="first")
    seen = {env.reset(seed=s, options={"condition": cond.id, "start_cca": "cubic"})[1]["trace"] for s in range(12)}
    assert seen == {cond.traces[played[0]].id, cond.traces[cond.static_trace(0)].id}
    # a bbr start never begins in it (its agent runs cubic)
    for s in range(6):
        assert env.reset(seed=s, options={"condition": cond.id, "start_cca": "bbr"})[1]["trace"] != cond.traces[
            played[0]].id
    # doing what the policy did keeps the agent in its run; moving to bbr leaves it for a bbr trace
    for s in range(12):
        _, info = env.reset(seed=s, options={"condition": cond.id, "start_cca": "cubic"})
        if info["trace"] == cond.traces[played[0]].id:
            break
    _, _, _, _, info = env.step(0)
    assert info["trace"] == cond.traces[played[0]].id
    _, _, _, _, info = env.step(1)
    assert info["trace"] != cond.traces[played[0]].id and not cond.traces[
        [t.id for t in cond.traces].index(info["trace"])].self_play


def test_an_extension_corpus_adds_captures_to_the_base_conditions(corpus_dir: Path, tmp_path: Path) -> None:
    """`from-matrix --extends BASE`: a folder whose corpus.json says "extends": BASE's name adds its
    captures to BASE's conditions when both are read (the base and its fingerprint stay as they
    are); without that line a shared condition id is still an error."""
    import json
    import shutil

    from ccswitch.datasets.trace import TraceError

    src = next(c for c in find_captures(corpus_dir) if c.manifest["arm"] == {"start": "cubic", "switches": []})
    ext = tmp_path / "ext"
    cap = ext / src.condition / "selfplay-feedbeef--s1"
    shutil.copytree(src.path, cap)
    man = json.loads((cap / "manifest.json").read_text())
    man.update(id=man["id"] + "-selfplay", arm={"start": "cubic", "switches": [], "policy": {"sha256": "f" * 64}})
    (cap / "manifest.json").write_text(json.dumps(man))
    with pytest.raises(TraceError, match="must not share condition ids"):
        ReplayCorpus.load([corpus_dir, ext])
    index = corpus_dir / "corpus.json"  # the synthetic corpus has none: the folder's name is its name
    base_name = json.loads(index.read_text()).get("name") if index.is_file() else corpus_dir.name
    (ext / "corpus.json").write_text(json.dumps({"format": "ccswitch-corpus", "extends": base_name}))
    base, both = ReplayCorpus.load(corpus_dir), ReplayCorpus.load([corpus_dir, ext])
    assert both.ids() == base.ids() and both.fingerprint != base.fingerprint
    cond = both.conditions[src.condition]
    assert len(cond.traces) == len(base.conditions[src.condition].traces) + 1
    assert [t.id for t in cond.traces if t.self_play] == [man["id"]]
