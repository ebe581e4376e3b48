"""Per-run overhead of the matrix runner and of its Ray path against a bare `ccswitch testbed run`.

    sudo .venv/bin/python bench/matrix_overhead.py [--pairs 3] [--duration 8]

The same tiny scenario (2 clients, 20 Mbit/s, linkemu, --duration seconds) is
run three ways, alternating in each pair so that the machine's load hits all
alike:

    bare     ccswitch testbed run SCENARIO --out DIR          (the runner + report, one process)
    matrix   ccswitch testbed matrix run FOLDER --arms static  (child process, bound, report)
    ray      the same with --ray on a local one-node Ray cluster started once
             (ray.cluster_utils; its start-up is not counted, each run's
             packing, transfer and unpacking is)

and prints each way's wall time per run (min / median / max) and the ratios
matrix/bare and ray/bare per pair.  Run it as root on a quiet machine; a
second line gives the 4-scenario x 2-arm speed-up of a two-node local Ray
cluster over --jobs 1 with --speedup (on 2 cores expect ~1: the runs share
the same cores).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from test_matrix import TINY  # the tiny scenario of the matrix tests  # noqa: E402


def _wall(argv: list[str]) -> float:
    t0 = time.monotonic()
    cp = subprocess.run(argv, capture_output=True, text=True)
    if cp.returncode != 0:
        sys.exit(f"matrix_overhead: error: {' '.join(argv[:6])} ... failed: {cp.stderr.strip()[-300:]}")
    return time.monotonic() - t0


def _stats(xs: list[float]) -> str:
    return f"min {min(xs):6.1f}  median {statistics.median(xs):6.1f}  max {max(xs):6.1f} s"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--duration", type=int, default=8)
    ap.add_argument("--speedup", action="store_true", help="also the 2-node Ray vs --jobs 1 speed-up")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("matrix_overhead: error: needs root (network namespaces, BPF); rerun with sudo")
    try:
        import ray
        from ray.cluster_utils import Cluster
    except ImportError:
        sys.exit("matrix_overhead: error: Ray is missing; .venv/bin/pip install -e '.[cluster]'")
    cli = [sys.executable, "-m", "ccswitch.cli", "testbed"]
    tmp = Path(tempfile.mkdtemp(prefix="ccswitch-bench-matrix-"))
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    try:
        split = tmp / "split"
        split.mkdir()
        scen = split / "tiny.toml"
        scen.write_text(TINY.format(name="tiny", rate=20).replace("duration_s = 8", f"duration_s = {args.duration}"))
        walls: dict[str, list[float]] = {"bare": [], "matrix": [], "ray": []}
        for i in range(args.pairs):
            order = ["bare", "matrix", "ray"] if i % 2 == 0 else ["ray", "matrix", "bare"]
            for way in order:
                out = tmp / f"{way}-{i}"
                if way == "bare":
                    argv = [*cli, "run", str(scen), "--out", str(out), "--quiet"]
                else:
                    argv = [*cli, "matrix", "run", str(split), "--arms", "static", "--out", str(out), "--quiet"]
                    if way == "ray":
                        argv += ["--ray", cluster.address, "--runs-per-node", "1"]
                walls[way].append(_wall(argv))
        print(f"matrix_overhead: {args.pairs} pairs of one {args.duration} s scenario (wall time per run)")
        for way, xs in walls.items():
            print(f"  {way:7s} {_stats(xs)}")
        for way in ("matrix", "ray"):
            ratios = [w / b for w, b in zip(walls[way], walls["bare"], strict=True)]
            print(f"  {way}/bare ratio per pair: {', '.join(f'{r:.2f}' for r in ratios)} "
                  f"(median {statistics.median(ratios):.2f})")
        if args.speedup:
            for i in range(4):
                (split / f"tiny-{i}.toml").write_text(TINY.format(name=f"tiny-{i}", rate=20 + 5 * i)
                                                      .replace("duration_s = 8", f"duration_s = {args.duration}"))
            scen.unlink()
            cluster.add_node(num_cpus=2)
            cluster.wait_for_nodes()
            base = [*cli, "matrix", "run", str(split), "--arms", "static,daemon-static-bbr", "--quiet"]
            t_local = _wall([*base, "--out", str(tmp / "speed-local")])
            t_ray = _wall([*base, "--out", str(tmp / "speed-ray"), "--ray", cluster.address, "--runs-per-node", "1"])
            print(f"  4 scenarios x 2 arms: --jobs 1 {t_local:.0f} s, 2-node Ray (1 run per node) {t_ray:.0f} s: "
                  f"speed-up {t_local / t_ray:.2f} on {os.cpu_count()} cores")
    finally:
        ray.shutdown()
        cluster.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
