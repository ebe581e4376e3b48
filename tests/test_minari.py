"""The corpus as a Minari dataset (datasets/minari_export.py): written, loaded back by Minari, and
equal to what the env replays."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("minari")

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "datasets" / "sample"


def test_export_loads_back_and_matches_the_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import gymnasium  # noqa: F401
    import minari

    from ccswitch.datasets.minari_export import export_minari
    from ccswitch.envs.cc_env import CongestionControlEnv
    from ccswitch.envs.replay import ReplayCorpus

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    export_minari(SAMPLE, "ccswitch/sample-test-v0", out_root=tmp_path, random_episodes=1, log=lambda m: None)
    ds = minari.load_dataset("ccswitch/sample-test-v0")
    replay = ReplayCorpus.load(SAMPLE, log=lambda m: None)
    n_cond = len(replay.ids())
    assert ds.total_episodes == n_cond * 3 * 2  # conditions x starting CCAs x (keep + 1 sticky-random)
    assert ds.action_space.n == 3 and ds.observation_space.shape == (30,)
    episodes = list(ds.iterate_episodes())
    keep = episodes[0]  # the first condition, starting on cubic, keeping it
    assert len(keep.observations) == len(keep.actions) + 1 and set(keep.actions.tolist()) == {0}
    assert keep.truncations[-1] and not keep.terminations.any()
    # the same actions through the env give the same observations and rewards
    env = CongestionControlEnv(replay, split="all", start="first")
    obs, _ = env.reset(seed=0, options={"condition": replay.ids()[0], "start_cca": "cubic"})
    assert np.allclose(obs, keep.observations[0])
    rewards = [env.step(int(a))[1] for a in keep.actions]
    assert np.allclose(rewards, keep.rewards)
    switched = sum(int((np.diff(e.actions) != 0).sum()) for e in episodes[1::2])
    assert switched > 0  # the sticky-random episodes do switch
    description = ds.storage.metadata["description"]
    assert "fingerprint" in description and "normalisation" in description


def test_cli_refuses_a_bad_id_and_an_existing_dataset(tmp_path: Path) -> None:
    cli = [sys.executable, "-m", "ccswitch.cli", "dataset", "minari", str(SAMPLE), "--out", str(tmp_path)]
    bad = subprocess.run([*cli, "--id", "no-version"], capture_output=True, text=True)
    assert bad.returncode != 0 and bad.stderr.count("\n") == 1 and "NAMESPACE/NAME-vN" in bad.stderr
    ok = subprocess.run([*cli, "--id", "ccswitch/s-v0", "--random-episodes", "0"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    again = subprocess.run([*cli, "--id", "ccswitch/s-v0"], capture_output=True, text=True)
    assert again.returncode != 0 and "exists" in again.stderr and again.stderr.count("\n") == 1
