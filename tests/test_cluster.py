"""Matrix runs on a real local Ray cluster (testbed/runs/cluster.py).

Two Ray nodes on this machine (ray.cluster_utils.Cluster: a head and a second
raylet, one CPU each), a 4-scenario folder of tiny scenarios, arms static and
daemon-static-bbr: every run finishes and comes back into RESULTS in the local
layout, the report has the same sections as a local run's, and a node removed
while its runs are under way does not lose them (Ray retries them on the other).
"""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path

import pytest
from test_matrix import LINKEMU, TINY

from ccswitch.testbed.reports.matrix import report
from ccswitch.testbed.runs.matrix import finished, run_matrix

pytestmark = [pytest.mark.kernel, pytest.mark.slow]


def _headings(doc: Path) -> list[str]:
    return [ln for ln in doc.read_text().splitlines() if ln.startswith("## ")]


def test_matrix_on_a_two_node_ray_cluster(tmp_path: Path, require) -> None:
    require(LINKEMU.is_file(), f"linkemu is not built ({LINKEMU}); run scripts/setup.sh")
    try:
        from ray.cluster_utils import Cluster
    except ImportError:
        require(False, "Ray is not installed (pip install -e '.[cluster]'; scripts/setup.sh installs .[dev])")
    import ray

    split = tmp_path / "split"
    split.mkdir()
    for i in range(3):  # 6 runs on two 1-run nodes: the kill at 12 s lands mid-matrix
        (split / f"tiny-{i}.toml").write_text(TINY.format(name=f"tiny-{i}", rate=20 + 5 * i)
                                              .replace("duration_s = 8", "duration_s = 6"))
    before = {n for n in os.listdir("/run/netns") if n.startswith("ccs-")} if os.path.isdir("/run/netns") else set()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    worker = cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    killed: list[float] = []

    def kill_worker_mid_run() -> None:  # once the runs are under way, the second node goes away
        time.sleep(12.0)
        cluster.remove_node(worker, allow_graceful=False)
        killed.append(time.monotonic())

    killer = threading.Thread(target=kill_worker_mid_run, daemon=True)
    res = tmp_path / "ray-results"
    try:
        killer.start()
        outcomes = run_matrix(split, ["static", "daemon-static-bbr"], 1, res, timeout_s=150,
                              ray_address=cluster.address, runs_per_node=1, progress=False)
        killer.join()
    finally:
        ray.shutdown()
        cluster.shutdown()
    assert killed, "the worker node was not removed during the matrix"
    assert len(outcomes) == 6
    assert all(o.ok for o in outcomes), [o.error for o in outcomes if not o.ok]
    for o in outcomes:
        assert finished(o.task.run_dir(res)) and o.task.log_path(res).is_file()
    # the same layout and report sections as a local run of the same matrix (one scenario of it here)
    local = tmp_path / "local-results"
    assert all(o.ok for o in run_matrix(split, ["static", "daemon-static-bbr"], 1, local, progress=False,
                                        scenarios=["tiny-0"]))
    ray_doc, local_doc = report(res), report(local)
    assert _headings(ray_doc) == _headings(local_doc)
    assert re.search(r"\| static \| 3 \|", ray_doc.read_text())
    from ccswitch.testbed.runs.netns import owner_alive

    def leaked() -> set[str]:  # new namespaces without a live owner: another testbed user's are not ours
        now = set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()
        return {n for n in now - before if n.startswith("ccs-") and owner_alive(n) is not True}

    deadline = time.monotonic() + 30  # a run orphaned by the removed node finishes and tears down by itself
    while leaked() and time.monotonic() < deadline:
        time.sleep(1.0)
    assert not leaked()
