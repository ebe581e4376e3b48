"""Issue 10: without --ray, ``ccswitch testbed matrix run`` never imports Ray (an optional extra,
testbed/runs/cluster.py; importing it costs seconds and ~100 MB)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from test_matrix import TINY

NO_RAY = textwrap.dedent("""
    import os, sys
    from pathlib import Path

    import ccswitch.cli
    import ccswitch.cli_matrix
    import ccswitch.testbed.runs.matrix as runs_matrix
    from ccswitch.testbed.runs.matrix import plan

    def no_runs(*args, **kwargs):
        raise AssertionError("a run was started: the test's fake runs no longer count as finished")

    runs_matrix._run_local = no_runs  # never a network experiment, whatever changes

    folder, results = Path(sys.argv[1]), Path(sys.argv[2])
    tasks = plan(folder, ["static", "daemon-static-bbr"], 1)
    assert len(tasks) == 4, tasks
    # The whole run command, up to the dispatch of the runs: every run is finished already, so
    # nothing is started.  Its root check is the only part that needs root; pretend to pass it.
    os.geteuid = lambda: 0
    try:
        ccswitch.cli.cli.main(["testbed", "matrix", "run", str(folder), "--arms", "static,daemon-static-bbr",
                               "--out", str(results), "--quiet"], prog_name="ccswitch")
    except SystemExit as e:
        assert e.code in (0, None), e.code
    bad = sorted(m for m in sys.modules if m.split(".")[0] == "ray")
    assert not bad, f"the matrix run path without --ray imported {bad[:3]}"
    print("ok")
""")


def test_matrix_run_without_ray_never_imports_ray(tmp_path: Path) -> None:
    folder = tmp_path / "split"
    folder.mkdir()
    results = tmp_path / "results"
    for i in range(2):
        (folder / f"tiny-{i}.toml").write_text(TINY.format(name=f"tiny-{i}", rate=20 + 10 * i))
        for arm in ("static", "daemon-static-bbr"):  # finished runs (runs.matrix.finished)
            run = results / f"tiny-{i}" / arm / "seed-1"
            run.mkdir(parents=True)
            (run / "summary.json").write_text(json.dumps({"metrics": {"last_half": {"targets_met": True}}}))
    cp = subprocess.run([sys.executable, "-c", NO_RAY, str(folder), str(results)],
                        capture_output=True, text=True, timeout=120)
    assert cp.returncode == 0 and cp.stdout.strip() == "ok", cp.stderr[-2000:]
    assert "all 4 runs already finished" in cp.stderr
