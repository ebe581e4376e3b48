"""What the logged LFQ experiments support (models/lfq_ceiling.py), on synthetic experiments with a known optimum.

The synthetic flows earn b x (1 - 0.06 x octaves from their optimum^2) with no queue term, the optimum at
k x BDP: with k = 1 for Reno and 0.43 for CUBIC (the textbook buffer needs) the privileged critic must find
a Reno:CUBIC ratio near 1 / 0.43 = 2.3 and a limit that follows the BDP; with the same k for both, a ratio
near 1.  Tolerances: the critic sees 600 noisy samples (2 % of b noise) over a log-uniform limit grid and
picks its argmax on a grid of 5 points per octave, so the ratio is read to within ~+-20 %.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from ccswitch.models.lfq_actor import ALPHA, reward
from ccswitch.models.lfq_ceiling import analyse, reward_at


def _rows(k_reno: float, k_cubic: float, n: int = 600, seed: int = 3) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        b, rtt = rng.uniform(5, 25), rng.uniform(5, 25)
        cca = str(rng.choice(["reno", "cubic"]))
        bdp = b * 1e6 / 8 * rtt / 1e3 / 1500
        opt = max(1.0, (k_reno if cca == "reno" else k_cubic) * bdp)
        lim = max(1, round(2 ** rng.uniform(0, 8)))
        u = max(0.05, 1 - 0.06 * (math.log2(lim) - math.log2(opt)) ** 2) + rng.normal(0, 0.02)
        rows.append({"draw": {"bandwidth_mbit": b, "rtt_ms": rtt, "cca": cca, "t_exp_s": rng.uniform(1, 3)},
                     "limit_exp": lim, "bdp_pkts": bdp, "throughput_mbit": b * u, "mean_queue_pkts": 0.0})
    return rows


def test_reward_at_is_the_actors_reward_at_the_shipped_price() -> None:
    row = {"throughput_mbit": 12.0, "mean_queue_pkts": 7.5}
    assert reward_at(row, ALPHA) == pytest.approx(reward(12e6 / 8, 7.5))
    assert reward_at(row, 0.0) == pytest.approx(1.5)


def test_the_delay_reward_prices_the_queue_in_bdps_and_training_can_use_it() -> None:
    from ccswitch.models.lfq_actor import KAPPA, delay_reward
    from ccswitch.models.lfq_ceiling import delay_normalised
    from ccswitch.models.lfq_samples import sample_reward

    # 9 of 10 Mbit/s with a queue of half a BDP: 0.9 - KAPPA / 2; above b the utilisation is clipped at 1
    assert delay_reward(9.0, 10.0, 10.0, 20.0) == pytest.approx(0.9 - KAPPA / 2)
    assert delay_reward(11.0, 10.0, 0.0, 20.0) == 1.0
    # the same queue costs twice as much at half the BDP (a shorter RTT): the paper's reward cannot tell
    assert delay_reward(9.0, 10.0, 10.0, 10.0) < delay_reward(9.0, 10.0, 10.0, 20.0)
    row = {"draw": {"bandwidth_mbit": 10.0}, "throughput_mbit": 9.0, "mean_queue_pkts": 10.0, "bdp_pkts": 20.0,
           "reward": 1.234}
    assert sample_reward(row, "paper") == 1.234
    assert sample_reward(row, "delay") == pytest.approx(0.9 - KAPPA / 2)
    assert delay_normalised([row], KAPPA)[0] == pytest.approx(0.9 - KAPPA / 2)
    # paper-share: the paper's reward (MB/s) over b in the same unit (10 Mbit/s = 1.25 MB/s)
    assert sample_reward(row, "paper-share") == pytest.approx(1.234 / 1.25)


def test_training_on_the_empty_inputs_needs_samples_that_logged_them(tmp_path) -> None:
    """``train --empty`` on samples collected before linkemu reported empty_frac: one line naming the file and
    the fix, not a shape error deep in TensorFlow."""
    from ccswitch.models.lfq_actor import SampleInputsError, sample_inputs
    from ccswitch.models.lfq_train import train

    rows = [{"obs": [0.0] * 60, "empty": [0.5] * 10}, {"obs": [0.0] * 60, "empty": [0.0] * 10}]
    assert sample_inputs(rows, with_empty=True).shape == (2, 70)
    old = tmp_path / "old.jsonl"
    old.write_text("".join(json.dumps(r) + "\n" for r in [*rows, {"obs": [0.0] * 60}]))
    with pytest.raises(SampleInputsError) as e:
        train([old], tmp_path / "a.json", None, 1, with_empty=True)
    msg = str(e.value)
    assert "1 of 3 samples" in msg and "old.jsonl" in msg and "without --empty" in msg and "\n" not in msg


def test_finds_the_textbook_ratio_and_the_bdp_dependence() -> None:
    res = analyse(_rows(1.0, 0.43), [ALPHA], critics=2, epochs=60)[ALPHA]
    s = res["privileged"]
    assert 1.8 <= s["reno_cubic"] <= 2.9, s
    assert s["reno"]["corr_bdp_pkts"] >= 0.85, s
    assert s["reno"]["limit_over_bdp_median"] == pytest.approx(1.0, abs=0.3)
    # no model: in every BDP tercile Reno's best octave is at least CUBIC's
    best = res["best_octaves"]
    for (cca, tercile), octave in best.items():
        if cca == "reno":
            assert octave[0] >= best[("cubic", tercile)][0]


def test_no_ratio_where_the_ccas_need_the_same_buffer() -> None:
    s = analyse(_rows(0.7, 0.7), [ALPHA], critics=2, epochs=60)[ALPHA]["privileged"]
    assert 0.75 <= s["reno_cubic"] <= 1.33, s


def test_missing_samples_file_is_one_clear_error(tmp_path) -> None:
    p = subprocess.run([sys.executable, "-m", "ccswitch.models.lfq_ceiling", "--data", str(tmp_path / "no.jsonl")],
                       capture_output=True, text=True)
    assert p.returncode == 2
    assert "no samples file" in p.stderr and "lfq_train collect" in p.stderr


def test_bic_samples_take_the_loss_based_slot_and_may_not_mix(tmp_path) -> None:
    from ccswitch.models.lfq_ceiling import loss_based_slot, markdown

    rows = _rows(1.0, 0.25, n=8)
    for r in rows:
        r["draw"]["cca"] = "bic" if r["draw"]["cca"] == "cubic" else r["draw"]["cca"]
    assert loss_based_slot(rows) == "BIC"
    assert {r["draw"]["cca"] for r in rows} == {"reno", "cubic"}  # analysed in the one loss-based slot
    assert "mean limit Reno : BIC (target >= 2)" in markdown({}, None, "BIC")
    mixed = _rows(1.0, 0.43, n=8)
    mixed[0]["draw"]["cca"], mixed[1]["draw"]["cca"] = "bic", "cubic"
    f = tmp_path / "mixed.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in mixed))
    p = subprocess.run([sys.executable, "-m", "ccswitch.models.lfq_ceiling", "--data", str(f)],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "the samples mix bic and cubic: give files of one of them" in p.stderr


def test_samples_keep_one_sender_profile(tmp_path) -> None:
    """Samples of two sender profiles (testbed/runs/tcp_senders.py) are not pooled, and collect refuses
    to append another profile's samples to a file (one line, exit 2, the file untouched)."""
    from ccswitch.models.lfq_ceiling import MixedSamplesError, samples_sender

    legacy = _rows(1.0, 0.43, n=4)
    assert samples_sender(legacy) == "linux"  # samples from before profiles were recorded
    bic = _rows(1.0, 0.25, n=4)
    for r in bic:
        r["draw"]["cca"] = "bic" if r["draw"]["cca"] == "cubic" else r["draw"]["cca"]
    assert samples_sender(bic) == "bic"
    tagged = [{**r, "sender": "no-sack-reno-bic"} for r in bic]
    assert samples_sender(tagged) == "no-sack-reno-bic"
    with pytest.raises(MixedSamplesError, match="mix senders bic and no-sack-reno-bic"):
        samples_sender(bic + tagged)
    f = tmp_path / "train.jsonl"
    text = "".join(json.dumps(r) + "\n" for r in tagged)
    f.write_text(text)
    p = subprocess.run([sys.executable, "-m", "ccswitch.models.lfq_train", "collect", "--data", str(f),
                        "--sender", "bic", "--episodes", "1"], capture_output=True, text=True)
    assert p.returncode == 2 and p.stderr.count("\n") <= 2, p.stderr
    assert "holds samples of sender no-sack-reno-bic, not bic: give --sender no-sack-reno-bic" in p.stderr
    assert f.read_text() == text


@pytest.mark.parametrize("critic_only", [False, True], ids=["all-samples", "half-critic-only"])
def test_privileged_critics_teach_the_actor_what_the_router_sees(tmp_path, monkeypatch, critic_only) -> None:
    """``train --critic privileged`` (an asymmetric actor-critic): the critics see the flow's draw, the actor
    only the router's 60 inputs.  Synthetic experiments as above (Reno's best limit 1 BDP, CUBIC's 0.43), whose
    features carry the bandwidth (out_rate_pps), the RTT (since_loss_s) and the CCA (queue_std_pkts) as a
    router could estimate them: the actor must give Reno about 2.3x CUBIC's limit and follow the BDP.  The
    router-input critics must learn the same from the features; the privileged ones only from the draw.
    Tolerances: 2 critics, 600 noisy samples, as the ceiling tests (+-25 % on the ratio).
    ``half-critic-only``: half the samples, without the router's inputs, go to ``critic_data`` (the critics
    only); the actor, trained on the other half's states, must still learn the same."""
    from ccswitch.models import lfq_train
    from ccswitch.models.lfq_actor import OBS_FEATURES, load_actor

    monkeypatch.setitem(lfq_train.HP, "critics", 2)
    monkeypatch.setitem(lfq_train.HP, "critic_epochs", 60)
    monkeypatch.setitem(lfq_train.HP, "actor_epochs", 120)
    rows = _rows(1.0, 0.43)
    idx = {n: OBS_FEATURES.index(f"{n}[0]") for n in ("out_rate_pps", "since_loss_s", "queue_std_pkts")}
    for i, r in enumerate(rows):
        obs = np.zeros(len(OBS_FEATURES))
        d = r["draw"]
        obs[idx["out_rate_pps"]] = d["bandwidth_mbit"] * 1e6 / 8 / 1500 / 1000  # scaled as observation()
        obs[idx["since_loss_s"]] = d["rtt_ms"] / 25.0
        obs[idx["queue_std_pkts"]] = 1.0 if d["cca"] == "reno" else 0.0
        r.update(obs=obs.tolist(), reward=reward_at(r, ALPHA), episode=i, t=0.0, sender="linux")
    f, g = tmp_path / "s.jsonl", tmp_path / "c.jsonl"
    mine, theirs = (rows[::2], rows[1::2]) if critic_only else (rows, [])
    f.write_text("".join(json.dumps(r) + "\n" for r in mine))
    g.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "obs"}) + "\n" for r in theirs))
    info = lfq_train.train([f], tmp_path / "a.json", None, 1, critic_inputs="privileged",
                           critic_data=[g] if critic_only else None)
    assert "privileged critics" in info["algorithm"]
    assert (info["samples"], info["critic_only_samples"]) == (len(mine), len(theirs))
    if critic_only:  # the critic-only samples need privileged critics: one line, before TensorFlow starts
        with pytest.raises(lfq_train.MixedSamplesError, match="needs --critic privileged"):
            lfq_train.train([f], tmp_path / "b.json", None, 1, critic_data=[g])
    actor = load_actor(tmp_path / "a.json")
    lims = np.array(actor.act_batch(np.array([r["obs"] for r in rows], np.float32)))
    lims = np.array([2.0 ** (4 * (a + 1)) for a in lims])
    reno = np.array([r["draw"]["cca"] == "reno" for r in rows])
    bdp = np.array([r["bdp_pkts"] for r in rows])
    ratio = lims[reno].mean() / lims[~reno].mean()
    assert 1.7 <= ratio <= 3.0, ratio
    assert np.corrcoef(bdp[reno], lims[reno])[0, 1] >= 0.8


def test_train_hp_overrides_are_checked_names_and_types(capsys) -> None:
    """``train --hp NAME=VALUE`` overrides a training hyperparameter of the same type; a wrong name, type or
    form (or the control interval, which belongs to the data) is argparse's one-line error, exit 2."""
    from ccswitch.models.lfq_train import _hp_arg, main

    assert _hp_arg("pessimism=0.5") == ("pessimism", 0.5) and _hp_arg("critics=3") == ("critics", 3)
    for bad, words in (("foo=1", "NAME one of leak"), ("pessimism", "expected NAME=VALUE"),
                       ("critics=1.5", "critics takes an integer"), ("interval_s=0.1", "expected NAME=VALUE")):
        with pytest.raises(SystemExit) as e:
            main(["train", "--hp", bad])
        err = capsys.readouterr().err.strip().splitlines()
        assert e.value.code == 2 and words in err[-1], (bad, err)


def test_min_round_trips_keeps_the_flows_that_lasted_them(tmp_path, capsys) -> None:
    """``train --min-round-trips N`` trains on the flows whose duration / RTT reached N (the space's samples
    of before durations were drawn in round trips); none left: argparse's one line naming the longest, exit 2,
    no actor file written."""
    from ccswitch.models.lfq_samples import long_enough, round_trips
    from ccswitch.models.lfq_train import main

    rows = [{"draw": {"duration_s": d, "rtt_ms": r}} for d, r in ((5.0, 10.0), (5.0, 50.0), (12.0, 100.0))]
    assert [round_trips(r) for r in rows] == pytest.approx([500, 100, 120])
    assert long_enough(rows, 110, []) == [rows[0], rows[2]] and long_enough(rows, 0, []) == rows
    f = tmp_path / "s.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(SystemExit) as e:
        main(["train", "--data", str(f), "--min-round-trips", "600", "--out", str(tmp_path / "a.json")])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert e.value.code == 2 and "lasted 600 round trips" in err and "longest: 500" in err, err
    assert not (tmp_path / "a.json").exists()
