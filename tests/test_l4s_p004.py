"""Paper 004 side by side (issue 13): the vdq_csaqm queue option of the L4S templates, the report's reading of
VDQ-CSAQM runs (per-class delays, policies, CTVs) and the target evaluation.  No kernel, no runs: synthetic
run folders in the runner's layout."""

from __future__ import annotations

import csv
import json
import tomllib
from pathlib import Path

import pytest

from ccswitch.testbed.l4s import make_scenarios as gen
from ccswitch.testbed.l4s import p004_cells, p004_tables, p004_targets, run_experiments
from ccswitch.testbed.l4s.report_phases import analyse
from ccswitch.testbed.l4s.report_read import gold_mbit, vdq_policy
from ccswitch.testbed.l4s.report_tables import markdown

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = REPO / "testbed" / "scenarios"


def _uplink(text: str) -> dict:
    return tomllib.loads(text)["link"]["uplink"]["qdisc"]


def test_queue_option_writes_vdq_twins_and_leaves_dualpi2_files_alone() -> None:
    vdq = gen.all_scenarios(("vdq_csaqm",))
    for cca in gen.CLASSIC_CCAS:
        for kind in ("dyn", "rttmix"):
            name = f"l4s-{kind}-{cca}-vs-prague-vdq"
            q = _uplink(vdq[name])
            assert q["kind"] == "vdq_csaqm" and q["classifier"] == "dscp" and q["l_dscp"] == [gen.PRAGUE_DSCP]
            assert (q["vq0_rate"], q["vq1_rate"], q["target0_ms"], q["target1_ms"]) == (0.9, 0.984, 1, 20)
            assert q["rate_mbit"] == gen.RATE_MBIT and "policies" not in q
            # same flows and link as the DualPI2 file, only the queue differs
            dp = tomllib.loads((SCENARIOS / f"l4s-{kind}-{cca}-vs-prague.toml").read_text())
            tw = tomllib.loads(vdq[name])
            assert tw["flows"] == dp["flows"] and tw["link"]["downlink"] == dp["link"]["downlink"]
            assert (SCENARIOS / f"{name}.toml").read_text() == vdq[name]  # committed as generated
    assert not any("-k4" in n or "a3c" in n for n in vdq)  # DualPI2-only variants
    # ccswitchd on the classic client behind VDQ-CSAQM: the dyn twin plus the daemon table, nothing else
    for cca in gen.CLASSIC_CCAS:
        name = f"l4s-dyn-{cca}-vs-prague-vdq"
        dm, plain = tomllib.loads(vdq[name + "-daemon"]), tomllib.loads(vdq[name])
        assert dm["daemon"] == {"policy": "dqn", "clients": [1]} and plain["daemon"] is False
        assert dm["flows"] == plain["flows"] and dm["link"] == plain["link"]
        assert (SCENARIOS / f"{name}-daemon.toml").read_text() == vdq[name + "-daemon"]  # committed as generated
    for name, text in gen.all_scenarios(("dualpi2",)).items():  # the option changed no DualPI2 file
        assert "vdq" not in name and _uplink(text)["kind"] == "dualpi2"
        assert (SCENARIOS / f"{name}.toml").read_text() == text, name
    with pytest.raises(ValueError, match="DualPI2's"):
        gen.qdisc_toml(coupling=4.0, queue="vdq_csaqm")
    with pytest.raises(ValueError, match="vdq_csaqm's"):
        gen.qdisc_toml(queue="dualpi2", silver_clients=(2,))


def test_goldsilver_template_marks_clients_2_and_4_silver() -> None:
    from ccswitch.testbed.scenario import load_scenario

    sc = load_scenario(SCENARIOS / "l4s-goldsilver-cubic-prague-vdq.toml")
    q = _uplink(sc.text)
    assert [vdq_policy(q, c) for c in (1, 2, 3, 4)] == ["gold", "silver", "gold", "silver"]
    assert {f.client: f.cca for f in sc.flows} == {1: "cubic", 2: "cubic", 3: "prague", 4: "prague"}
    lives = {f.name: (f.start_s, f.start_s + (f.duration_s or sc.duration_s)) for f in sc.flows}
    assert lives == {"CG1": (0, 40), "CS1": (0, 40), "LG1": (20, 60), "LS1": (20, 60)}
    assert gen.client_ip(2) == "10.99.0.12"


def test_vdq_policy_rules() -> None:
    q = {"kind": "vdq_csaqm", "default_policy": "gold",
         "policies": [{"policy": "voice", "src": "10.99.0.11", "dport": 5201},
                      {"policy": "silver", "src": "10.99.0.12"}, {"policy": "silver", "proto": 17}]}
    assert vdq_policy(q, 1) is None  # a port rule might match: undecidable per client
    assert vdq_policy(q, 2) == "silver"
    assert vdq_policy(q, 3) == "gold"  # the UDP rule does not match TCP
    assert vdq_policy({"kind": "vdq_csaqm", "default_policy": "silver"}, 1) == "silver"
    assert vdq_policy({"kind": "dualpi2"}, 1) is None
    assert gold_mbit(0) == float("inf")
    assert gold_mbit(65535) == pytest.approx(0.001)  # r_min = 1 kbit/s
    assert gold_mbit(65535 * (1 - 4 / 8)) == pytest.approx(10.0)  # 10^4 kbit/s


def test_run_experiments_queue_names_and_resume(tmp_path: Path) -> None:
    assert gen.scenario_name("l4s-dyn-cubic-vs-prague", "vdq_csaqm") == "l4s-dyn-cubic-vs-prague-vdq"
    assert gen.scenario_name("l4s-dyn-cubic-vs-prague-vdq", "vdq_csaqm") == "l4s-dyn-cubic-vs-prague-vdq"
    assert gen.scenario_name("l4s-dyn-cubic-vs-prague-vdq", "dualpi2") == "l4s-dyn-cubic-vs-prague"
    seed = tmp_path / "seed-2"
    (seed / "run-01-seed-2").mkdir(parents=True)
    assert run_experiments.finished_run(seed) is None  # an interrupted run is redone
    (seed / "run-01-seed-2" / "summary.json").write_text("{}")
    assert run_experiments.finished_run(seed) == seed / "run-01-seed-2"


# ---------------------------------------------------------------- synthetic runs ---

T0 = 1_700_000_000.0


def fake_run(root: Path, scenario: str, flows: list[tuple[str, int, str, float, float, float]],
             l_ms: float, c_ms: float, seed: int = 1, l_max_ms: dict[int, float] | None = None,
             t_offset: float = 0.0) -> Path:
    """A finished run folder: flows (name, client, cca, start, end, Mbit/s), per-class delays constant but
    for the L queue's max in the intervals *l_max_ms* names (by their end, s); linkemu's intervals end
    *t_offset* s after whole seconds of the scenario clock."""
    src = SCENARIOS / f"{scenario}.toml"
    run = root / scenario / f"seed-{seed}" / f"run-01-seed-{seed}"
    (run / "iperf").mkdir(parents=True)
    (run / "emulator").mkdir()
    (run / "scenario.toml").write_text(src.read_text())
    dur = max(f[4] for f in flows)
    (run / "summary.json").write_text(json.dumps({"meta": {
        "scenario": scenario, "duration_s": dur, "uplink_rate_mbit": gen.RATE_MBIT, "t0_epoch": T0,
        "flows": [{"name": n, "client": c, "cca": cca, "start_s": a, "duration_s": b - a}
                  for n, c, cca, a, b, _ in flows]}}))
    for n, _, _, a, b, mbps in flows:
        ivs = [{"sum": {"start": float(k), "end": float(k + 1), "bytes": mbps * 1e6 / 8}} for k in range(int(b - a))]
        (run / "iperf" / f"{n}.server.json").write_text(json.dumps(
            {"start": {"timestamp": {"timesecs": int(T0 + a)}}, "intervals": ivs}))
    cols = ["t_s", "direction", "client"] + [f"{q}_{k}" for q in "lc" for k in (
        "bytes_out", "marks", "drops", "sojourn_mean_us", "sojourn_p90_us", "sojourn_max_us")]
    with (run / "emulator" / "intervals.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for k in range(1, int(dur) + 1):
            row = [k + t_offset, "uplink", -1]
            for q, ms in (("l", l_ms), ("c", c_ms)):
                peak = (l_max_ms or {}).get(k, 2 * ms) if q == "l" else 2 * ms
                row += [150_000, 1, 0, ms * 1000, ms * 1200, peak * 1000]
            w.writerow(row)
    cls = {"packets_out": 1000, "ecn_marks": 10, "drops_total": 0, "sojourn_us": {
        "mean": 100.0, "p90": 200.0, "p99": 300.0, "max": 900.0}}
    (run / "emulator" / "summary.json").write_text(json.dumps({"run": {"start_unix_s": T0}, "uplink": {
        "classes": {"l4s": cls, "classic": cls},
        "qdisc_stats": {"kind": "vdq_csaqm", "classes": {
            "l4s": {"ctv_mean": 1000.0, "ctv_max": 2000, "queue_drops": 0, "vq_drops": 0},
            "classic": {"ctv_mean": 3000.0, "ctv_max": 4000, "queue_drops": 1, "vq_drops": 2}}}}}))
    return run


def test_report_reads_vdq_classes_policies_and_ctvs(tmp_path: Path) -> None:
    run = fake_run(tmp_path, "l4s-goldsilver-cubic-prague-vdq", [
        ("CG1", 1, "cubic", 0, 40, 39.0), ("CS1", 2, "cubic", 0, 40, 10.0),
        ("LG1", 3, "prague", 20, 60, 30.0), ("LS1", 4, "prague", 20, 60, 10.0)], l_ms=0.2, c_ms=3.0)
    r = analyse(run)
    assert r.queue_kind == "vdq_csaqm"
    assert {f.name: f.policy for f in r.flows} == {"CG1": "gold", "CS1": "silver", "LG1": "gold", "LS1": "silver"}
    assert [p.label for p in r.phases] == ["0-2", "2-2", "2-0"]
    p0, p1, p2 = r.phases
    assert p0.gold_silver == pytest.approx(3.9) and p2.gold_silver == pytest.approx(3.0)
    assert p1.gold_silver == pytest.approx((39 + 30) / 20)
    assert p1.policy_per_flow_mbps == pytest.approx({"Classic gold": 39.0, "Classic silver": 10.0,
                                                     "L4S gold": 30.0, "L4S silver": 10.0})
    assert p1.delay_ms["L4S"]["mean"] == pytest.approx(0.2) and p1.delay_ms["Classic"]["max"] == pytest.approx(6.0)
    assert "L4S" not in p0.delay_ms and "Classic" not in p2.delay_ms  # no flow of the class: no delay reported
    md = markdown([r])
    assert "CTV_0 (L4S VQ) mean / max" in md and "| 1000 / 2000 | 3000 / 4000 | 0 / 0, 1 / 2 |" in md
    assert "do not exist here" in md and "p' mean / max" not in md  # no DualPI2 columns for a VDQ run
    assert "Gold:Silver" in md


def test_a_queue_interval_straddling_a_phase_boundary_counts_in_neither_phase(tmp_path: Path) -> None:
    # flows join at 20.7 s; linkemu's interval 20-21 s holds their first 0.3 s, and a 9 ms L peak in it is
    # the new phase's slow start (inside its settling time), not the steady state of the phase before
    flows = [("C1", 1, "cubic", 0, 60, 20.0), ("L1", 2, "prague", 0, 60, 20.0), ("L2", 3, "prague", 20.7, 60, 5.0)]
    r = analyse(fake_run(tmp_path, "l4s-dyn-cubic-vs-prague-vdq", flows, l_ms=0.3, c_ms=5.0,
                         l_max_ms={21: 9.0, 14: 1.5, 40: 1.7}))
    before, after = r.phases
    assert (before.end_s, after.start_s) == (pytest.approx(20.7), pytest.approx(20.7))
    assert before.delay_ms["L4S"]["max"] == pytest.approx(1.5)  # 5-20 s: the 9 ms interval is not its own
    assert after.delay_ms["L4S"]["max"] == pytest.approx(1.7)  # from 25.7 s: the 26-27 s interval on
    assert after.delay_ms["L4S"]["mean"] == pytest.approx(0.3)
    # iperf3 stamps a start in whole seconds: a join at 21.0-22.0 s reads 21.5.  With linkemu's intervals
    # ending at x.3 s, the one ending at 21.3 may hold the join and is left out; the one before is the last
    flows[2] = ("L2", 3, "prague", 21.2, 60, 5.0)
    r = analyse(fake_run(tmp_path / "late", "l4s-dyn-cubic-vs-prague-vdq", flows, l_ms=0.3, c_ms=5.0,
                         l_max_ms={21: 9.0, 20: 1.5}, t_offset=0.3))
    assert r.phases[0].end_s == pytest.approx(21.5)
    assert r.phases[0].delay_ms["L4S"]["max"] == pytest.approx(1.5)


def test_p004_aligns_seeds_and_evaluates_targets(tmp_path: Path) -> None:
    dyn = [("C1", 1, "cubic", 0, 80, 20.0), ("L1", 2, "prague", 0, 80, 25.0)]
    for seed, late in ((1, 0.0), (2, 3.0)):  # seed 2: the second L flow starts 3 s late, phases still align
        fake_run(tmp_path, "l4s-dyn-cubic-vs-prague", dyn, l_ms=0.4, c_ms=15.0, seed=seed)
        fake_run(tmp_path, "l4s-dyn-cubic-vs-prague-vdq",
                 [*dyn, ("L2", 2, "prague", 20 + late, 40, 5.0), ("C2", 1, "cubic", 40, 60, 5.0)],
                 l_ms=0.3, c_ms=4.0, seed=seed)
    fake_run(tmp_path, "l4s-solo-prague-vdq", [("L1", 1, "prague", 0, 30, 42.0)], l_ms=0.1, c_ms=0.0)
    cells, meta = p004_cells.collect(tmp_path)
    vdq = cells[("l4s-dyn-cubic-vs-prague", "vdq_csaqm")]
    assert [c.slot for c in vdq] == [0, 1, 2, 3] and all(len(c.phases) == 2 for c in vdq)
    assert [c.label for c in vdq] == ["1-1", "2-1", "1-2", "1-1"]
    tg = {t.name.split(" (")[0]: t for t in p004_targets.targets(cells)}
    assert tg["L-queue mean < 1 ms in every phase"].met is True
    assert tg["C-queue mean no higher than DualPI2's"].met is True
    assert tg["one L4S flow alone >= 80 % utilisation"].met is True  # 42 * 1500/1448 / 50 = 87 %
    assert tg["1-1 L:C within [1:4, 4:1]"].met is True
    assert tg["RTT mix Jain >= DualPI2's + 0.1 in every phase"].met is None  # not run
    assert tg["Gold:Silver 1:4 within 25 %"].met is None
    md = p004_tables.markdown(cells, meta, p004_targets.targets(cells))
    assert "| 20-40 s | 2-1 | VDQ-CSAQM | 2 |" in md and "not run" in md


def test_p004_reads_a_variants_twins_under_the_templates_names(tmp_path: Path) -> None:
    dyn = [("C1", 1, "cubic", 0, 80, 20.0), ("L1", 2, "prague", 0, 80, 25.0)]
    fake_run(tmp_path, "l4s-dyn-cubic-vs-prague", dyn, l_ms=0.4, c_ms=15.0)  # the 5 ms original: not read
    fake_run(tmp_path, "l4s-dyn-cubic-vs-prague-rtt40", dyn, l_ms=0.4, c_ms=12.0)
    fake_run(tmp_path, "l4s-dyn-cubic-vs-prague-rtt40-vdq", dyn, l_ms=0.3, c_ms=9.0)
    cells, meta = p004_cells.collect(tmp_path, "-rtt40")
    assert set(cells) == {("l4s-dyn-cubic-vs-prague", "dualpi2"), ("l4s-dyn-cubic-vs-prague", "vdq_csaqm")}
    assert set(meta) == {"l4s-dyn-cubic-vs-prague-rtt40", "l4s-dyn-cubic-vs-prague-rtt40-vdq"}
    c_means = {q: cs[0].phases[0].delay_ms["Classic"]["mean"] for (_, q), cs in cells.items()}
    assert c_means == {"dualpi2": pytest.approx(12.0), "vdq_csaqm": pytest.approx(9.0)}



def test_steady_twins_differ_from_their_vdq_files_only_in_the_ctv_rule() -> None:
    vdq = gen.all_scenarios(("vdq_csaqm",))
    twins = {n for n in vdq if n.endswith("-steady-vdq")}
    plain = {n for n in vdq if n.endswith("-vdq") and not n.endswith("-steady-vdq")}
    assert twins == {gen.steady_name(n) for n in plain} and len(twins) >= 13  # not the -daemon files
    for name in plain:
        a, b = tomllib.loads(vdq[name]), tomllib.loads(vdq[gen.steady_name(name)])
        qa, qb = a["link"]["uplink"].pop("qdisc"), b["link"]["uplink"].pop("qdisc")
        assert qb == qa | gen.STEADY_CTV and qa.get("ctv_rule", "paper") == "paper"
        assert a["flows"] == b["flows"] and a["link"] == b["link"] and a["duration_s"] == b["duration_s"]
        assert (SCENARIOS / f"{gen.steady_name(name)}.toml").read_text() == vdq[gen.steady_name(name)]
    with pytest.raises(ValueError, match="vdq_csaqm's"):
        gen.qdisc_toml(queue="dualpi2", steady=True)


def test_steady_l4s_gain_option_rewrites_the_cut_in_the_twins_only_for_that_call(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(gen, "OUT_DIR", tmp_path)
    name = "l4s-goldsilver-cubic-prague-steady-vdq"
    committed = _uplink((SCENARIOS / f"{name}.toml").read_text())
    assert committed["steady_l4s_gain"] == gen.STEADY_L4S_GAIN  # the twins ship with the cut
    for arg, want in (("0.07", committed | {"steady_l4s_gain": 0.07}),
                      ("0", {k: v for k, v in committed.items() if k != "steady_l4s_gain"})):
        assert gen.main([name, "--steady-l4s-gain", arg]) == 0
        assert tomllib.loads((tmp_path / f"{name}.toml").read_text())["link"]["uplink"]["qdisc"] == want, arg
        assert [p.name for p in tmp_path.iterdir()] == [f"{name}.toml"]
        assert gen.STEADY_CTV["steady_l4s_gain"] == gen.STEADY_L4S_GAIN, "the option leaked into the module's twins"
    with pytest.raises(SystemExit):
        gen.main(["--steady-l4s-gain", "1.5"])
    assert "must be >= 0 and <= 1 (0: without the cut), got 1.5" in capsys.readouterr().err


def test_p004_steady_variant_reads_dualpi2_without_the_suffix(tmp_path: Path) -> None:
    dyn = [("C1", 1, "cubic", 0, 80, 20.0), ("L1", 2, "prague", 0, 80, 25.0)]
    fake_run(tmp_path, "l4s-dyn-cubic-vs-prague", dyn, l_ms=0.4, c_ms=15.0)
    fake_run(tmp_path, "l4s-dyn-cubic-vs-prague-vdq", dyn, l_ms=0.3, c_ms=11.0)  # the paper's CTV: not read
    fake_run(tmp_path, "l4s-dyn-cubic-vs-prague-steady-vdq", dyn, l_ms=0.3, c_ms=7.0)
    fake_run(tmp_path, "l4s-dyn-cubic-vs-prague-rtt40", dyn, l_ms=0.4, c_ms=13.0)
    fake_run(tmp_path, "l4s-dyn-cubic-vs-prague-rtt40-steady-vdq", dyn, l_ms=0.3, c_ms=6.0)
    assert p004_cells.queue_variant("-rtt40-steady", "dualpi2") == "-rtt40"
    assert p004_cells.queue_variant("-rtt40-steady", "vdq_csaqm") == "-rtt40-steady"
    for variant, want in (("-steady", {"dualpi2": 15.0, "vdq_csaqm": 7.0}),
                          ("-rtt40-steady", {"dualpi2": 13.0, "vdq_csaqm": 6.0})):
        cells, _ = p004_cells.collect(tmp_path, variant)
        c_means = {q: cs[0].phases[0].delay_ms["Classic"]["mean"] for (_, q), cs in cells.items()}
        assert c_means == {q: pytest.approx(v) for q, v in want.items()}, variant
