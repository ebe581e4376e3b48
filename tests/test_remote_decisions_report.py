"""testbed/reports/remote_decisions.py: a remote arm's runs read back with their control path."""

from __future__ import annotations

import json
from pathlib import Path

from ccswitch.testbed.reports.remote_decisions import arm_table, read_arms


def _run(root: Path, arm: str, seed: int, share: float, util: float, answers: list[tuple[float, float]],
         l_p90_us: float | None, server: dict[str, float] | None = None) -> None:
    run = root / "sc-a" / arm / f"seed-{seed}"
    run.mkdir(parents=True)
    lh = {"min_share": share, "jain": 0.99, "utilisation": util}
    meta = {"policy_server": {"stats": server}} if server is not None else {}
    (run / "summary.json").write_text(json.dumps({"metrics": {"last_half": lh}, "meta": meta}))
    for i, (p50, p99) in enumerate(answers):
        d = run / "daemon" / f"C{i + 1}"
        d.mkdir(parents=True)
        (d / "ccswitchd.log").write_text(
            "ts=1 level=info msg=started\n"
            f"ts=2 level=info msg=stopped ticks=9 remote_rows=50 remote_local_rows={i} remote_fallbacks=0 "
            f"remote_answer_ms_p50={p50} remote_answer_ms_p99={p99}\n")
    classes = {"classic": {"sojourn_us": {"count": 10, "p90": 15000.0}}}
    if l_p90_us is not None:
        classes["l4s"] = {"sojourn_us": {"count": 5, "p90": l_p90_us}}
    (run / "emulator").mkdir()
    # a FIFO bottleneck has no classes: linkemu writes null
    (run / "emulator" / "summary.json").write_text(json.dumps({"uplink": {"classes": classes if l_p90_us else None}}))


def test_counters_targets_and_the_l_queue_per_arm(tmp_path: Path) -> None:
    _run(tmp_path, "dqn-remote", 1, 0.95, 0.93, [(20.0, 60.0), (30.0, 80.0)], None)
    _run(tmp_path, "dqn-remote-l4s", 1, 0.95, 0.89, [(10.0, 40.0), (12.0, 50.0)], 150.0,
         {"serving_wall_s": 40.0, "serving_cpu_s": 0.2})
    arms = read_arms(tmp_path)
    assert list(arms) == ["dqn-remote", "dqn-remote-l4s"]
    classic, l4s = arms["dqn-remote"][0], arms["dqn-remote-l4s"][0]
    assert classic.met and not l4s.met  # utilisation 0.89 < 0.90
    assert classic.answers_ms == [(20.0, 60.0), (30.0, 80.0)] and classic.rows == 100 and classic.local_rows == 1
    assert classic.l_queue_p90_us is None and l4s.l_queue_p90_us == 150.0
    table = arm_table(arms)
    assert "| dqn-remote | 1 | 1 | 0.95 |" in table and "25.0 (20.0-30.0)" in table
    assert "0.15 ms (max of runs)" in table and "1 of 100" in table
    # the server's CPU share: 0.2 s over 40 s = 0.50 % of a core; a run without the stats leaves it empty
    assert classic.server_cpu_share is None and l4s.server_cpu_share == 0.005
    assert "| 0.50 (0.50) |" in table and table.splitlines()[2].endswith("no L4S packets | |")
