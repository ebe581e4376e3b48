"""Matrix runs and their report (testbed/runs/matrix.py, testbed/reports/matrix.py).

The kernel test runs a real two-scenario matrix locally (namespaces, linkemu,
iperf3, ccswitchd); the report test also has a synthetic counterpart that
checks the statistics on numbers it can predict.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ccswitch.testbed.reports.matrix import load_results, met_share, report, wilson
from ccswitch.testbed.runs.matrix import MatrixError, check_same_guard, finished, plan, run_matrix, unscored_reason
from ccswitch.testbed.scenario.daemon_config import effective_guard
from ccswitch.testbed.scenario.model import DaemonSettings

REPO = Path(__file__).resolve().parents[1]
LINKEMU = REPO / "testbed" / "linkemu" / "target" / "release" / "linkemu"

TINY = """
name = "{name}"
description = "tiny matrix scenario"
duration_s = 8
clients = 2
seeds = [1]
[link]
emulator = "linkemu"
[link.uplink]
rate_mbit = {rate}
delay_ms = 1.0
qdisc = {{ kind = "pfifo", limit_pkts = 30 }}
[link.downlink]
rate_mbit = {rate}
delay_ms = 1.0
qdisc = {{ kind = "pfifo", limit_pkts = 1000 }}
[[flows]]
name = "C1"
client = 1
cca = "cubic"
[[flows]]
name = "C2"
client = 2
cca = "bbr"
[daemon]
policy = "dqn"
[capture]
tshark = false
"""


def _folder(tmp_path: Path, n: int = 2) -> Path:
    d = tmp_path / "split"
    d.mkdir()
    for i in range(n):
        (d / f"tiny-{i}.toml").write_text(TINY.format(name=f"tiny-{i}", rate=20 + 10 * i))
    return d


def test_plan_checks_arms_and_folder(tmp_path: Path) -> None:
    d = _folder(tmp_path)
    tasks = plan(d, ["static", "daemon-static-bbr"], 2)
    assert len(tasks) == 2 * 2 * 2 and len({t.key for t in tasks}) == 8
    with pytest.raises(ValueError, match="unknown arm 'dqnn'"):
        plan(d, ["dqnn"], 1)
    # the deviation arms: only for the managed clients a scenario has (2 here), one client off CUBIC
    dev = plan(d, ["daemon-deviate"], 1)
    assert sorted({t.arm for t in dev}) == [f"daemon-deviate-{k}-{x}" for k in (1, 2) for x in ("bbr", "pcc")]
    assert len(dev) == 2 * 2 * 2
    from ccswitch.testbed.scenario import load_scenario
    from ccswitch.testbed.scenario.arms import arm_scenario
    from ccswitch.testbed.scenario.daemon_config import daemon_config

    sc = arm_scenario(load_scenario(d / "tiny-0.toml"), "daemon-deviate-2-pcc")
    assert [daemon_config(sc.daemon, [f for f in sc.flows if f.client == c])["policy"]["static_cca"]
            for c in (1, 2)] == ["cubic", "pcc"]
    with pytest.raises(ValueError, match="has 2 managed clients"):
        arm_scenario(load_scenario(d / "tiny-0.toml"), "daemon-deviate-3-bbr")
    for bad in ("daemon-deviate-0-bbr", "daemon-deviate-1-reno", "daemon-deviate-x-bbr"):
        with pytest.raises(ValueError, match="unknown arm"):
            plan(d, [bad], 1)
    # the space the scenarios were drawn from may sit in the folder (testbed/scenarios does): not a scenario
    (d / "space.toml").write_text((REPO / "testbed" / "scenarios" / "space.toml").read_text())
    assert [t.scenario for t in plan(d, ["static"], 1, scenarios=["tiny-1"])] == ["tiny-1"]
    assert len(plan(d, ["static"], 1)) == 2
    with pytest.raises(MatrixError, match="no such folder"):
        plan(tmp_path / "nope", ["static"], 1)
    with pytest.raises(MatrixError, match=r"no \*\.toml"):
        plan(tmp_path, ["static"], 1)


def test_cli_errors_are_one_line(tmp_path: Path) -> None:
    cp = subprocess.run([sys.executable, "-m", "ccswitch.cli", "testbed", "matrix", "run", str(_folder(tmp_path)),
                         "--arms", "static,bogus", "--out", str(tmp_path / "r")], capture_output=True, text=True)
    assert cp.returncode == 1 and cp.stderr.count("\n") == 1 and "unknown arm 'bogus'" in cp.stderr


def _fake_run(results: Path, scenario: str, arm: str, seed: int, met: bool, min_share: float,
              monitor_gap_s: float | None = None) -> None:
    d = results / scenario / arm / f"seed-{seed}"
    d.mkdir(parents=True)
    lh = {"targets_met": met, "min_share": min_share, "jain": 0.99 if met else 0.8,
          "utilisation": 0.95, "rtt_p95_ms": 20.0 + seed, "cca_changes": {"C1": [{"t_s": 3}]}}
    if monitor_gap_s is not None:
        lh["monitor"] = {"max_gap_s": monitor_gap_s, "limit_s": 3.0, "scored": monitor_gap_s <= 3.0}
    (d / "summary.json").write_text(json.dumps({"metrics": {"last_half": lh}}))


def test_resume_keeps_the_guard_the_daemons_ran_with(tmp_path: Path) -> None:
    """matrix.json records the effective [guard]; a resume that would change it is refused.

    The daemon's defaults can change between versions: a folder whose first
    seed ran with the post-switch evaluation on must not get later seeds with
    it off just because nobody passed --guard either time.
    """
    ran = effective_guard(DaemonSettings(guard=(("eval_window_s", 3.0), ("jitter_s", 0.0))))
    assert ran is not None and ran["eval_window_s"] == 3.0 and "min_dwell_s" in ran
    (tmp_path / "matrix.json").write_text(json.dumps({"guard": [], "guard_effective": ran}))
    now_default = effective_guard(DaemonSettings())
    with pytest.raises(MatrixError, match=r"ran its daemons with guard eval_window_s=3.0, jitter_s=0.0; .*"
                                          r"resume with --guard eval_window_s=3.0 --guard jitter_s=0.0"):
        check_same_guard(tmp_path, [], now_default)
    # the same effective settings spelled differently are the same folder
    check_same_guard(tmp_path, ["eval_window_s=3", "jitter_s=0.0"], ran)
    # a key the daemon gained since (absent from the record) is no change at its default, a change otherwise
    older = {k: v for k, v in ran.items() if k != "escape_max_rtt_ratio"}
    (tmp_path / "matrix.json").write_text(json.dumps({"guard": [], "guard_effective": older}))
    check_same_guard(tmp_path, ["eval_window_s=3", "jitter_s=0.0"], ran)
    with pytest.raises(MatrixError, match=r"escape_max_rtt_ratio=None; .*escape_max_rtt_ratio=1.5"):
        check_same_guard(tmp_path, [], {**ran, "escape_max_rtt_ratio": 1.5})
    # a folder from before the effective record: the flags are compared
    (tmp_path / "matrix.json").write_text(json.dumps({"guard": ["jitter_s=0"]}))
    check_same_guard(tmp_path, ["jitter_s=0"], now_default)
    with pytest.raises(MatrixError, match="holds runs with --guard jitter_s=0"):
        check_same_guard(tmp_path, [], now_default)


def test_report_statistics_on_synthetic_results(tmp_path: Path) -> None:
    """Synthetic counterpart of the real matrix below: 4 scenarios, 2 arms, 2 seeds.
    Arm a meets s0-s2 in seed 1 and s0-s1 in seed 2 (shares 0.75, 0.5: mean 0.625, t interval
    0.625 +- 12.706 * 0.177 / sqrt 2); arm b never; s3 is met by no arm."""
    res = tmp_path / "res"
    for seed, met_a in ((1, {"s0", "s1", "s2"}), (2, {"s0", "s1"})):
        for s in ("s0", "s1", "s2", "s3"):
            _fake_run(res, s, "static", seed, s in met_a, 0.9 if s in met_a else 0.5)
            _fake_run(res, s, "dqn", seed, False, 0.3)
    runs = load_results(res)
    assert len(runs) == 16
    m, lo, hi, how = met_share([r for r in runs if r.arm == "static"], ["s0", "s1", "s2", "s3"])
    assert m == pytest.approx(0.625) and how == "t over 2 seeds"
    assert hi - m == pytest.approx(min(1.0, m + 12.706 * math.sqrt(0.03125) / math.sqrt(2)) - m)
    assert lo == 0.0  # clipped
    assert wilson(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-3)
    doc = report(res)
    text = doc.read_text()
    assert "3 of 4 scenarios are met by at least one arm" in text
    assert "| s3 |" in text.split("## Scenarios no arm makes fair")[1].split("## Every scenario")[0]
    assert (doc.parent / "report-plots" / "matrix-cdfs.png").stat().st_size > 10_000


def test_report_leaves_out_runs_whose_monitor_fell_behind(tmp_path: Path) -> None:
    """A run whose flow monitor fell behind (run_metrics.monitor_check) is listed, not scored: it
    changes neither the share met nor the medians, and the Runs column counts it apart."""
    res = tmp_path / "res"
    for s, met in (("s0", True), ("s1", True), ("s2", False)):
        _fake_run(res, s, "static", 1, met, 0.9 if met else 0.5, monitor_gap_s=1.0)
    _fake_run(res, "s3", "static", 1, False, 0.0, monitor_gap_s=17.0)  # a flow with no sample: share 0
    runs = load_results(res)
    assert [r.scored for r in runs] == [True, True, True, False] and runs[3].monitor_gap_s == 17.0
    text = report(res).read_text()
    row = next(line for line in text.splitlines() if line.startswith("| static |"))
    assert "| 3 (+1 not scored) | 67 %" in row  # 2 of the 3 scored scenarios, not 2 of 4
    assert "| 0.90 |" in row  # median min share over s0-s2 (0.9, 0.9, 0.5), not with s3's 0.0
    unscored = text.split("## Runs not scored")[1]
    assert "| s3/static/seed-1 | 17.0 | 0.00 |" in unscored
    assert "| s3 |" not in text.split("## Every scenario")[1].split("## Runs not scored")[0]
    # a resume runs it again: it is not finished, and the run's outcome says why
    assert finished(res / "s0" / "static" / "seed-1") and unscored_reason(res / "s0" / "static" / "seed-1") == ""
    assert not finished(res / "s3" / "static" / "seed-1")
    assert "fell behind (samples 17.0 s apart, limit 3.0 s)" in unscored_reason(res / "s3" / "static" / "seed-1")
    # every run unscored: a clear error, not an empty report
    only = tmp_path / "only"
    _fake_run(only, "s0", "static", 1, False, 0.0, monitor_gap_s=9.0)
    with pytest.raises(ValueError, match="fell behind in every run"):
        report(only)


@pytest.mark.kernel
@pytest.mark.slow
def test_local_matrix_runs_resumes_and_reports_failures(tmp_path: Path, require) -> None:
    """Two tiny scenarios x (daemon-static-cubic, daemon-deviate-2-bbr), 1 seed, for real: every
    run finishes with metrics; a second invocation repeats nothing; the runs become a replay
    corpus (population and unilateral conditions); a run that cannot finish within its bound
    is one FAILED line naming its log, the others still run, no namespace is left."""
    require(LINKEMU.is_file(), f"linkemu is not built ({LINKEMU}); run scripts/setup.sh")
    d = _folder(tmp_path)
    res = tmp_path / "res"
    arms = ["daemon-static-cubic", "daemon-deviate-2-bbr"]
    before = set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()
    out = run_matrix(d, arms, 1, res, jobs=2, progress=False, timeout_s=120)  # two at a time, like the docs' runs
    assert len(out) == 4 and all(o.ok for o in out), [o.error for o in out]
    for o in out:
        assert finished(o.task.run_dir(res)) and o.task.log_path(res).is_file()
    cubic = json.loads((res / "tiny-0" / "daemon-static-cubic" / "seed-1" / "summary.json").read_text())
    assert cubic["meta"]["daemon"]["policy"] == "static" and cubic["meta"]["daemon"]["cca"] == "cubic"
    assert run_matrix(d, arms, 1, res, progress=False) == []
    # the same runs as a replay corpus (datasets/from_matrix.py): one condition per managed flow,
    # and one unilateral condition per flow of the deviating client (C2 on bbr, C1 kept on cubic)
    from ccswitch.datasets.from_matrix import corpus_from_matrix
    from ccswitch.datasets.trace import find_captures

    mc = corpus_from_matrix(res, tmp_path / "corpus", ccas=("cubic",), log=lambda m: None)
    assert (mc.scenarios, mc.conditions, mc.captures, mc.incomplete) == (2, 6, 8, [])
    caps = find_captures(tmp_path / "corpus")
    assert sorted({c.condition for c in caps}) == ["tiny-0~C1", "tiny-0~C2", "tiny-0~C2.solo", "tiny-1~C1",
                                                    "tiny-1~C2", "tiny-1~C2.solo"]
    for c in caps:
        c.validate()
        agent = c.agent_flow()
        assert agent is not None and agent["name"] == c.condition.split("~")[1].removesuffix(".solo")
        assert [f["role"] for f in c.flows].count("competitor") == 1 and not any(f["local"] for f in c.flows
                                                                                  if f["role"] != "agent")
        ccas = {r["flow_id"]: r["cca"] for r in c.samples().to_pylist()}  # each flow's last CCA
        other = next(f["flow_id"] for f in c.flows if f["role"] == "competitor")
        if c.condition.endswith(".solo"):
            assert c.manifest["arm"]["others"] == "cubic" and c.manifest["arm"]["start"] in ("cubic", "bbr")
            assert ccas[agent["flow_id"]] == c.manifest["arm"]["start"] and ccas[other] == "cubic"
        else:
            assert c.manifest["arm"] == {"start": "cubic", "switches": []}
            assert ccas[agent["flow_id"]] == ccas[other] == "cubic"  # the daemon moved C2 off bbr
    assert corpus_from_matrix(res, tmp_path / "corpus", ccas=("cubic",), log=lambda m: None).written == 0
    # a second seed with a bound too short for any run: every run fails, one line each, no leftovers
    res2 = tmp_path / "res2"
    out2 = run_matrix(d, ["static"], 1, res2, jobs=2, progress=False, timeout_s=3)
    assert len(out2) == 2 and not any(o.ok for o in out2)
    assert all("timed out after 3 s" in o.error for o in out2)
    lines = (res2 / "failures.jsonl").read_text().splitlines()
    assert len(lines) == 2 and all(Path(json.loads(ln)["log"]).is_file() for ln in lines)
    after = set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()
    # ours = new ccs- namespaces without a live owner (every run's process is gone by now); another
    # testbed user on the machine (a live owner) is not a leak of this test
    from ccswitch.testbed.runs.netns import owner_alive

    assert not {n for n in after - before if n.startswith("ccs-") and owner_alive(n) is not True}
    doc = report(res)
    assert "## Targets met, per arm" in doc.read_text()


def test_coordination_counts_agreement_switches_and_returns(tmp_path: Path) -> None:
    """testbed/reports/coordination.py on a run folder whose answer is known: two managed
    bulk flows and one unmanaged, 20 s; in the last half (10-19 s) C1 goes cubic -> bbr (12 s)
    -> cubic (16 s), C2 stays on cubic: they agree in 6 of the 10 seconds (10, 11, 16-19),
    2 switches over 2 managed flows, 1 return.  The unmanaged flow and the first half do not
    count; a run without a daemon has no coordination numbers."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ccswitch.testbed.reports.coordination import coordination, summarise_arm

    def run(folder: Path, clients: list[int]) -> Path:
        folder.mkdir(parents=True)
        meta = {"t0_epoch": 1000.0, "duration_s": 20, "daemon": {"clients": clients},
                "flows": [{"name": n, "kind": "bulk"} for n in ("C1", "C2", "U")]}
        (folder / "summary.json").write_text(json.dumps({"meta": meta}))
        pq.write_table(pa.table({"flow_id": [1, 2, 3], "client": [1, 2, 3], "flow": ["C1", "C2", "U"]}),
                       folder / "flows.parquet")
        rows = []
        for t in range(20):
            c1 = "bbr" if 12 <= t < 16 else ("pcc" if t < 5 else "cubic")  # a first-half switch: not counted
            rows += [(1000.0 + t, 1, c1), (1000.0 + t, 2, "cubic"), (1000.0 + t, 3, "bbr" if t % 2 else "reno")]
        ts, fid, cca = zip(*rows, strict=True)
        pq.write_table(pa.table({"ts_s": list(ts), "flow_id": list(fid), "cca": list(cca)}),
                       folder / "samples.parquet")
        return folder

    c = coordination(run(tmp_path / "s1" / "dqn" / "seed-1", [1, 2]))
    assert c is not None and c.managed_flows == 2
    assert c.agreement == pytest.approx(0.6) and c.switches_per_flow == 1.0 and c.returns == 1
    assert coordination(run(tmp_path / "s1" / "static" / "seed-1", [])) is None
    s = summarise_arm(tmp_path, "dqn")
    assert s["runs"] == 1 and s["all_agree_runs"] == 0.0 and s["returns_per_run"] == 1.0
    assert summarise_arm(tmp_path, "dqn", {"other"}) == {"runs": 0}


def _pcc_still_there() -> bool:
    import time

    from ccswitch.host import available_ccas

    deadline = time.monotonic() + 3.0  # a struct_ops link goes with its owner's fds
    while "pcc" in available_ccas() and time.monotonic() < deadline:
        time.sleep(0.05)
    return "pcc" in available_ccas()


def _pcc_after(code: str) -> bool:
    """Run *code* in a child Python (which registers or shares PCC and exits); is pcc available after?"""
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    return _pcc_still_there()


@pytest.mark.kernel
def test_parallel_matrix_holds_pcc_so_a_run_ending_cannot_take_it_away(require) -> None:
    """A registration nobody uses any more ends (its holder exits: bpf/holder.py); while the matrix
    process uses PCC (--jobs > 1) a run's process that shares it, and exits, leaves it registered
    (before the holder, the run that registered it took it away: one of 60 parallel runs failed)."""
    from ccswitch.bpf.pcc import pcc_held  # what run_matrix holds with pcc_held(jobs > 1)
    from ccswitch.host import available_ccas

    require("pcc" not in available_ccas(), "pcc is registered by another process (a daemon or testbed run)")
    child = "from ccswitch.bpf.pcc import ensure_pcc; h = ensure_pcc(); print(h.source)"
    assert not _pcc_after(child)  # the race: the registrar ended, pcc is gone
    with pcc_held(True):  # --jobs 2
        assert "pcc" in available_ccas()
        assert _pcc_after(child)  # the child only shared it
    assert not _pcc_still_there()  # released with the matrix
    with pcc_held(False):  # --jobs 1
        assert "pcc" not in available_ccas()  # one job: nothing held, runs register their own


def test_evaluate_fills_a_missing_baseline_with_static_and_the_shipped_policy(tmp_path: Path) -> None:
    """`ccswitch evaluate --split`: a fresh clone has no baseline runs (run folders are not
    committed); evaluate then runs static and the shipped policy there first, only static when
    the candidate is the shipped policy, nothing when the folder holds the user's own runs, and it
    resumes a fill it started (its mark file)."""
    from ccswitch.models.evaluate_matrix import BASELINE_MARK, baseline_plan
    from ccswitch.models.policy import DEFAULT_POLICY

    other = tmp_path / "candidate.json"
    other.write_bytes(DEFAULT_POLICY.read_bytes() + b" ")  # another file, same content but one byte
    base = tmp_path / "matrix-dev"
    assert baseline_plan(other, base) == ["static", "dqn"]
    assert baseline_plan(DEFAULT_POLICY, base) == ["static"]
    _fake_run(base, "s1", "static", 1, True, 0.9)
    assert baseline_plan(other, base) == []  # the user's own baseline: left as it is
    (base / BASELINE_MARK).write_text("filled by ccswitch evaluate\n")
    assert baseline_plan(other, base) == ["static", "dqn"]  # ours, interrupted: resumed
