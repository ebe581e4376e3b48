"""Unit tests of the daemon's pure parts: config, aggregation, reward, heuristic, recorder, vectorised
bookkeeping, install.

The guard and the controller have their own files: tests/test_daemon_guard.py (fake clock) and
tests/test_daemon_controller.py (fake data plane).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ccswitch.daemon.aggregate import aggregate
from ccswitch.daemon.config import ConfigError, load_config, parse_config, render_default
from ccswitch.daemon.policies import HeuristicDecider, build_decider, eval_scores_batch
from ccswitch.daemon.recorder import Recorder, RecordError
from ccswitch.daemon.unfairness import fairness, rewards
from ccswitch.envs.reward import RewardConfig, eval_scores, reward
from ccswitch.models.policy import PolicyError
from ccswitch.schema import FLOW_SAMPLE_SCHEMA

from daemon_fakes import flow_table

REPO = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------- config
def test_default_config_file_matches_the_schema() -> None:
    assert (REPO / "daemon" / "ccswitch.toml").read_text() == render_default()
    cfg = load_config(REPO / "daemon" / "ccswitch.toml")
    assert cfg.get("daemon.tick_s") == 0.2 and cfg.policy["kind"] == "dqn"


def test_config_errors_name_every_bad_key(tmp_path: Path) -> None:
    f = tmp_path / "c.toml"
    f.write_text('[guard]\nmin_dwell_s = -1\nmargn = 1\n[policy]\nkind = "magic"\n[bogus]\nx = 1\n'
                 '[flows]\nports = [0]\ndst_prefixes = ["10.0.0.0/33"]\n[daemon]\ntick_s = "fast"\n')
    with pytest.raises(ConfigError) as e:
        load_config(f)
    text = "\n".join(e.value.problems)
    for key in ("guard.min_dwell_s: must be >= 0", "guard.margn: unknown key", "policy.kind: must be one of",
                "bogus: unknown section", "flows.ports:", "flows.dst_prefixes:", "daemon.tick_s: must be a number"):
        assert key in text, text
    assert len(e.value.problems) == 7
    with pytest.raises(ConfigError, match="not valid TOML"):
        f.write_text("[guard\n")
        load_config(f)
    with pytest.raises(ConfigError, match="no such file"):
        load_config(tmp_path / "missing.toml")
    assert parse_config({}).get("guard.consecutive") == 3


def test_check_config_cli(tmp_path: Path) -> None:
    """`ccswitchd --check-config`: exit 0 and a summary, or exit 1 and one line per problem."""
    good = tmp_path / "good.toml"
    good.write_text('[policy]\nkind = "heuristic"\n')
    run = [sys.executable, "-m", "ccswitch.daemon.main", "--check-config", "--config"]
    ok = subprocess.run([*run, str(good)], capture_output=True, text=True)
    assert ok.returncode == 0 and "is valid; policy: heuristic" in ok.stdout
    bad = tmp_path / "bad.toml"
    bad.write_text('[guard]\nconsecutive = 0\n[log]\nlevel = "loud"\n')
    cp = subprocess.run([*run, str(bad)], capture_output=True, text=True)
    lines = cp.stderr.strip().splitlines()
    assert cp.returncode == 1 and len(lines) == 2, cp.stderr
    assert all(ln.startswith(f"ccswitchd: error: {bad}: ") for ln in lines)
    assert "guard.consecutive" in lines[0] and "log.level" in lines[1]


def test_bad_policy_file_refuses_unless_a_fallback_is_named(tmp_path: Path) -> None:
    corrupt = tmp_path / "p.json"
    corrupt.write_text((REPO / "models" / "policy.json").read_text().replace('"relu"', '"tanh"', 1))
    cfg = parse_config({"policy": {"file": str(corrupt)}})
    with pytest.raises(PolicyError, match=r"checksum mismatch.*policy\.fallback"):
        build_decider(dict(cfg.policy))
    cfg = parse_config({"policy": {"file": str(tmp_path / "none.json"), "fallback": "heuristic"}})
    dec, warning = build_decider(dict(cfg.policy))
    assert dec.kind == "heuristic" and warning and "no such file" in warning
    cp = subprocess.run([sys.executable, "-m", "ccswitch.daemon.main", "--check-config", "--config",
                         str(_write(tmp_path / "c.toml", f'[policy]\nfile = "{corrupt}"\n'))],
                        capture_output=True, text=True)
    assert cp.returncode == 1 and cp.stderr.count("\n") == 1 and "checksum mismatch" in cp.stderr


def _write(p: Path, text: str) -> Path:
    p.write_text(text)
    return p

# --------------------------------------------------------- data functions
def test_aggregate_means_over_time_and_sums_counters() -> None:
    t = flow_table([
        {"flow_id": 1, "interval_s": 0.2, "throughput_bps": 10e6, "sent_segs": 100, "retrans_segs": 0,
         "rtt_us": 1000.0, "jitter_us": 100.0, "rtt_samples": 11, "cca": "cubic"},
        {"flow_id": 2, "interval_s": 0.2, "throughput_bps": 1e6, "sent_segs": 10, "cca": "bbr", "jitter_us": math.nan},
        {"flow_id": 1, "interval_s": 0.6, "throughput_bps": 20e6, "sent_segs": 100, "retrans_segs": 10,
         "rtt_us": 3000.0, "jitter_us": 300.0, "rtt_samples": 31, "cca": "bbr"},
    ])
    a = {r["flow_id"]: r for r in aggregate(t).to_pylist()}
    assert a[1]["interval_s"] == pytest.approx(0.8)
    assert a[1]["throughput_bps"] == pytest.approx((10e6 * 0.2 + 20e6 * 0.6) / 0.8)
    assert a[1]["sent_segs"] == 200 and a[1]["loss_rate"] == pytest.approx(10 / 200)
    assert a[1]["rtt_us"] == 3000.0 and a[1]["cca"] == "bbr"  # newest state
    assert a[1]["jitter_us"] == pytest.approx((100 * 10 + 300 * 30) / 40)
    assert a[2]["throughput_bps"] == 1e6 and math.isnan(a[2]["jitter_us"])


def test_vectorised_reward_equals_envs_reward() -> None:
    t = flow_table([
        {"flow_id": 1, "dst": "10.0.0.2", "throughput_bps": 30e6, "rtt_us": 20e3, "loss_rate": 0.01,
         "sndq_bytes": 1},
        {"flow_id": 2, "dst": "10.0.0.2", "throughput_bps": 10e6, "rtt_us": 25e3, "loss_rate": 0.0, "sndq_bytes": 1},
        {"flow_id": 3, "dst": "10.0.0.9", "throughput_bps": 5e6, "rtt_us": math.nan, "loss_rate": 0.0,
         "sndq_bytes": 1},
    ])
    f = fairness(t, "dst")
    assert f.thratio[:2] == pytest.approx([1.5, 0.5]) and f.thratio[2] == 1.0
    jain = 40 ** 2 / (2 * (30 ** 2 + 10 ** 2))
    assert f.jain[:2] == pytest.approx([jain, jain]) and f.jain[2] == 1.0
    cfg = RewardConfig()
    got = rewards(cfg, t, f)
    want = [reward(cfg, throughput_mbps=30, rtt_ms=20, loss=0.01, jain=jain)[0],
            reward(cfg, throughput_mbps=10, rtt_ms=25, loss=0.0, jain=jain)[0],
            reward(cfg, throughput_mbps=5, rtt_ms=math.nan, loss=0.0, jain=1.0)[0]]
    assert got == pytest.approx(want)
    ms = RewardConfig(fairness="minshare")  # the group's smallest Thratio: 0.5 on 10.0.0.2, alone 1 on .9
    want = [reward(ms, throughput_mbps=30, rtt_ms=20, loss=0.01, min_share=0.5)[0],
            reward(ms, throughput_mbps=10, rtt_ms=25, loss=0.0, min_share=0.5)[0],
            reward(ms, throughput_mbps=5, rtt_ms=math.nan, loss=0.0, min_share=1.0)[0]]
    assert rewards(ms, t, f) == pytest.approx(want)
    assert want[0] < reward(cfg, throughput_mbps=30, rtt_ms=20, loss=0.01, jain=jain)[0]  # 2 ln 0.5 < 2 (J-1)
    assert fairness(t, "host").jain[2] < 1.0  # all three compete when grouped per host


def test_batched_eval_scores_equal_paper_function() -> None:
    rng = np.random.default_rng(3)
    thr, rtt, loss = rng.uniform(0, 50, (20, 3)), rng.uniform(1, 100, (20, 3)), rng.uniform(0, 0.05, (20, 3))
    got = eval_scores_batch(thr, rtt, loss)
    for i in range(20):
        assert got[i] == pytest.approx(eval_scores(thr[i], rtt[i], loss[i]))
    thr[0, 2] = np.nan
    assert np.isnan(eval_scores_batch(thr, rtt, loss)[0, 2])


def test_heuristic_scores_only_what_it_has_seen() -> None:
    h = HeuristicDecider(memory_s=10)
    t = flow_table([{"flow_id": 1, "dst": "a", "throughput_bps": 10e6, "rtt_us": 10e3, "cca": "cubic"},
                {"flow_id": 2, "dst": "a", "throughput_bps": 30e6, "rtt_us": 10e3, "cca": "bbr"}])
    s = h.scores(t, np.zeros(2, dtype=np.int64), now=0.0)
    # flow 1 sees bbr through flow 2 on the same path: bbr scores higher; pcc unknown
    assert s.values[0, 1] > s.values[0, 0] and np.isnan(s.values[0, 2])
    # later the flow's own memory of bbr wins over the path mean; stale memories are dropped
    t2 = flow_table([{"flow_id": 1, "dst": "a", "throughput_bps": 5e6, "rtt_us": 10e3, "cca": "bbr"}])
    s2 = h.scores(t2, np.zeros(1, dtype=np.int64), now=20.0)
    assert np.isnan(s2.values[0, 0]) and s2.values[0, 1] == pytest.approx(1.0)
    # an idle connection on the path (iperf3's control connection on pcc) is no measurement of pcc
    t3 = flow_table([{"flow_id": 3, "dst": "a", "throughput_bps": 20e6, "rtt_us": 10e3, "cca": "cubic"},
                 {"flow_id": 4, "dst": "a", "throughput_bps": 1e3, "sndq_bytes": 0, "cca": "pcc"}])
    assert np.isnan(h.scores(t3, np.zeros(2, dtype=np.int64), now=30.0).values[0, 2])


def test_recorder_refuses_an_existing_record_and_writes_readable_files(tmp_path: Path) -> None:
    rec = tmp_path / "r.parquet"
    with Recorder(rec, tmp_path / "d.jsonl") as r:
        r.samples(flow_table([{"flow_id": 1}]))
        r.samples(FLOW_SAMPLE_SCHEMA.empty_table())
        r.samples(flow_table([{"flow_id": 2}]))
        r.decision({"flow": 1, "q": {"cubic": math.nan}})
    t = pq.read_table(rec)
    assert t.schema.equals(FLOW_SAMPLE_SCHEMA) and t.num_rows == 2
    assert pq.ParquetFile(rec).num_row_groups == 2
    assert json.loads((tmp_path / "d.jsonl").read_text()) == {"flow": 1, "q": {"cubic": None}}
    with pytest.raises(RecordError, match="exists"):
        Recorder(rec)


# --------------------------------------------------- vectorised bookkeeping
def test_live_observations_equal_the_envs_builder() -> None:
    """The daemon's vectorised builder gives ObservationBuilder's observations exactly, over updates
    in which flows appear, pause (shorter and longer than forget_after) and vanish."""
    from ccswitch.daemon.flowindex import string_codes
    from ccswitch.daemon.observations import LiveObservations
    from ccswitch.envs.features import Normalisation, ObservationBuilder

    rng = np.random.default_rng(7)
    norm = Normalisation(tuple(rng.uniform(-1, 1, 6)), tuple(rng.uniform(0.5, 2, 6)))
    ref, live = ObservationBuilder(norm), LiveObservations(norm)
    pool = np.arange(1, 400, dtype=np.uint64) * 977
    for step in range(60):
        present = pool[rng.random(len(pool)) < (0.3 if step % 7 else 0.9)]
        present = rng.permutation(present[: 40 + step * 3])
        n = len(present)
        t = flow_table([{"flow_id": int(f), "throughput_bps": float(rng.uniform(0, 5e7)),
                     "rtt_us": float(rng.uniform(1e3, 1e5)), "rtt_ratio": float(rng.uniform(1, 4)),
                     "loss_rate": float(rng.uniform(0, 0.05)),
                     "jitter_us": float(rng.uniform(0, 5e3)) if i % 5 else math.nan,
                     "sending_rate_bps": float(rng.uniform(0, 5e7)), "sndq_bytes": int(i % 3),
                     "netns_cookie": int(i % 4), "cca": ("cubic", "bbr", "pcc", "reno")[i % 4]}
                    for i, f in enumerate(present)])
        ids_r, obs_r = ref.update(t)
        cols = {c: t.column(c).to_numpy(zero_copy_only=False) for c in (
            "throughput_bps", "rtt_us", "rtt_ratio", "loss_rate", "jitter_us", "sending_rate_bps", "flow_id",
            "sndq_bytes", "netns_cookie")}
        ids_l, obs_l = live.update(cols, *string_codes(t.column("cca")))
        assert n == len(ids_l) and (ids_r == ids_l).all()
        assert np.array_equal(obs_r, obs_l), step
        assert len(ref) == len(live)


def test_flow_index_and_string_codes() -> None:
    from ccswitch.daemon.flowindex import FlowIndex, string_codes

    ix = FlowIndex()
    s, new = ix.slots_for(np.array([50, 30, 2**63 + 5], dtype=np.uint64))
    assert new.all() and sorted(s.tolist()) == [0, 1, 2]
    assert ix.lookup(np.array([2**63 + 5, 7, 30], dtype=np.uint64)).tolist() == [s[2], -1, s[1]]
    freed = ix.retain(np.array([30], dtype=np.uint64))
    assert sorted(freed.tolist()) == sorted([s[0], s[2]]) and len(ix) == 1
    s2, new2 = ix.slots_for(np.array([30, 8, 9], dtype=np.uint64))
    assert new2.tolist() == [False, True, True] and s2[0] == s[1] and set(s2[1:].tolist()) == set(freed.tolist())
    assert ix.size == 3  # freed slots reused, no growth
    col = pa.chunked_array([pa.array(["cubic", "bbr"]), pa.array(["pcc", None, "fd00::1", "cubic"]).slice(0, 4)])
    codes, values = string_codes(col)
    assert [values[c] for c in codes] == ["cubic", "bbr", "pcc", "", "fd00::1", "cubic"]
    assert len(values) == 5 and string_codes(pa.array([], pa.string()))[1] == []


def test_flow_selector_ports_and_prefixes() -> None:
    from ccswitch.daemon.config import defaults
    from ccswitch.daemon.selection import FlowSelector

    cfg = {**defaults().flows, "dst_prefixes": ["10.0.0.0/24", "fd00::/8"], "ports": [5201]}
    t = flow_table([{"flow_id": i + 1, "dst": d, "dport": p} for i, (d, p) in enumerate(
        [("10.0.0.5", 5201), ("10.0.1.5", 5201), ("fd00::1", 5201), ("10.0.0.9", 22), ("10.0.0.5", 5201)])])
    assert FlowSelector(cfg).select(t).tolist() == [True, False, True, False, True]
    assert FlowSelector(defaults().flows).select(t).all()


def test_daemon_install_places_unit_and_config_idempotently(tmp_path: Path) -> None:
    """`ccswitch daemon install --root`: unit with this installation's ccswitchd, default config;
    a second run changes nothing; an administrator's config is never overwritten.  An installation
    under /tmp (hidden by the unit's PrivateTmp=yes, seen as a CI failure under real systemd) gets a
    drop-in that binds it back read-only, removed again once the installation is elsewhere."""
    from ccswitch.daemon.install import CONFIG_DST, TMP_DROPIN_DST, UNIT_DST, install, unit_text

    first = install(tmp_path, install_paths=[Path("/opt/ccswitch/.venv/bin/ccswitchd")])
    assert (tmp_path / UNIT_DST).read_text() == unit_text() and "@CCSWITCHD@" not in unit_text()
    assert "PrivateTmp=yes" in unit_text()
    assert any("installed (defaults)" in line for line in first)
    assert not (tmp_path / TMP_DROPIN_DST).exists()
    again = install(tmp_path, install_paths=[Path("/opt/ccswitch/.venv/bin/ccswitchd")])
    assert any("unit" in line and "up to date" in line for line in again)
    (tmp_path / CONFIG_DST).write_text("[daemon]\ntick_s = 0.5\n")
    assert any("modified by the administrator" in line for line in install(tmp_path, install_paths=[]))
    assert (tmp_path / CONFIG_DST).read_text() == "[daemon]\ntick_s = 0.5\n"

    in_tmp = [Path("/tmp/ci-clone/.venv/bin/ccswitchd"), Path("/tmp/ci-clone"), Path("/var/tmp/py/bin/python")]
    lines = install(tmp_path, install_paths=in_tmp)
    dropin = (tmp_path / TMP_DROPIN_DST).read_text()
    assert "BindReadOnlyPaths=/tmp/ci-clone\n" in dropin and "BindReadOnlyPaths=/var/tmp/py\n" in dropin
    assert dropin.count("BindReadOnlyPaths=") == 2 and "[Service]" in dropin
    assert any("PrivateTmp" in line for line in lines)
    assert not any("drop-in" in line for line in install(tmp_path, install_paths=in_tmp))  # idempotent
    assert any("removed" in line for line in install(tmp_path, install_paths=[Path("/opt/x/bin/ccswitchd")]))
    assert not (tmp_path / TMP_DROPIN_DST).exists()
