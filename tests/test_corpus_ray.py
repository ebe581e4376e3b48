"""``ccswitch dataset corpus --ray``: corpus runs as Ray tasks (datasets/corpus_ray.py, testbed/runs/raypool.py).

* A real local Ray instance (``ray.init(num_cpus=2)``), a 2-run corpus of 4 s bottleneck
  captures: both runs come back into OUT at the paths a local capture writes, every
  capture validates, the index counts them, and a second invocation captures nothing.
* Without ``--ray`` the corpus command never imports Ray (a subprocess on a finished corpus).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from ccswitch.datasets.corpus import build_corpus
from ccswitch.datasets.corpus_runs import is_captured
from ccswitch.datasets.corpus_spec import parse_spec
from ccswitch.datasets.trace import CORPUS_INDEX, MANIFEST, SAMPLES, find_captures, write_capture
from ccswitch.schema import FLOW_SAMPLE_SCHEMA

TINY_SPEC = """
name = "ray-tiny"
backend = "bottleneck"
duration_s = 4
interval_s = 1.0
ccas = ["cubic", "bbr"]
[matrix]
rate_mbit = [20]
queue_ms = [10]
competitors = [[]]
"""


def _files(run_dir: Path) -> set[str]:
    return {str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if p.is_file()}


@pytest.mark.kernel
@pytest.mark.slow
def test_corpus_on_a_local_ray_instance(tmp_path: Path, require, iperf3: str) -> None:
    try:
        import ray
    except ImportError:
        require(False, "Ray is not installed (pip install -e '.[cluster]'; scripts/setup.sh installs .[dev])")
    spec = parse_spec(TINY_SPEC, "ray-tiny.toml")
    assert [r.rel_dir for r in spec.runs] == ["r20-q10-Lnone/cubic--s1", "r20-q10-Lnone/bbr--s1"]
    out = tmp_path / "corpus"
    tmp_before = set(Path(tempfile.gettempdir()).glob("ccswitch-corpus-*"))
    log: list[str] = []
    t0 = time.monotonic()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        index = build_corpus(spec, out, progress=False, log=log.append, ray_address="auto")
    finally:
        ray.shutdown()
    wall = time.monotonic() - t0
    assert index["runs_done"] == index["runs_planned"] == 2, log
    assert not any("FAILED" in line for line in log), log
    assert sum("done on" in line and "ETA" in line for line in log) == 2, log  # --quiet lines, with ETA
    # the local layout: OUT/CONDITION/ARM--sSEED/ holding what capture_bottleneck writes there
    caps = find_captures(out)
    assert [c.path.relative_to(out).as_posix() for c in caps] == sorted(r.rel_dir for r in spec.runs)
    for c in caps:
        c.validate()
        assert is_captured(c.path)
        assert _files(c.path) == {MANIFEST, SAMPLES, "iperf/agent.json"}
        assert c.manifest["source"] == "bottleneck" and c.agent_flow() is not None
        assert c.manifest["id"] == c.path.relative_to(out).as_posix().replace("/", "--")
    assert json.loads((out / CORPUS_INDEX).read_text())["runs_done"] == 2
    assert set(Path(tempfile.gettempdir()).glob("ccswitch-corpus-*")) == tmp_before  # node-local folders gone
    # resume: everything is there, nothing is captured (Ray is not even contacted)
    mtimes = {p: p.stat().st_mtime_ns for p in out.rglob(MANIFEST)}
    log2: list[str] = []
    index2 = build_corpus(spec, out, progress=False, log=log2.append, ray_address="auto")
    assert index2["runs_done"] == 2 and "2 done, 0 to capture" in log2[0], log2
    assert {p: p.stat().st_mtime_ns for p in out.rglob(MANIFEST)} == mtimes
    print(f"corpus over Ray: 2 runs in {wall:.1f} s")


NO_RAY = textwrap.dedent("""
    import sys

    import ccswitch.cli

    spec, out = sys.argv[1], sys.argv[2]
    try:
        ccswitch.cli.cli.main(["dataset", "corpus", spec, "--out", out, "--quiet"], prog_name="ccswitch")
    except SystemExit as e:
        assert e.code in (0, None), e.code
    bad = sorted(m for m in sys.modules if m.split(".")[0] == "ray")
    assert not bad, f"the corpus path without --ray imported {bad[:3]}"
    print("ok")
""")


def test_corpus_without_ray_never_imports_ray(tmp_path: Path) -> None:
    spec_file = tmp_path / "ray-tiny.toml"
    spec_file.write_text(TINY_SPEC)
    out = tmp_path / "corpus"
    for run in parse_spec(TINY_SPEC, str(spec_file)).runs:  # finished runs: the build goes to the end, captures none
        write_capture(out / run.rel_dir, FLOW_SAMPLE_SCHEMA.empty_table(),
                      {"id": run.rel_dir, "source": "bottleneck", "interval_s": 1.0, "flows": []})
    cp = subprocess.run([sys.executable, "-c", NO_RAY, str(spec_file), str(out)], capture_output=True, text=True,
                        timeout=120)
    assert cp.returncode == 0 and cp.stdout.strip() == "ok", cp.stderr[-2000:]
    assert "2 done, 0 to capture" in cp.stderr and "2/2 runs" in cp.stderr


def test_unpack_refuses_paths_outside_the_run(tmp_path: Path) -> None:
    """A run's archive may only hold its own CONDITION/ARM--sSEED folder."""
    from ccswitch.datasets.capture import CaptureError
    from ccswitch.testbed.runs.raypool import pack, unpack

    (tmp_path / "src" / "c1" / "a--s1").mkdir(parents=True)
    (tmp_path / "src" / "c1" / "a--s1" / "x").write_text("x")
    (tmp_path / "src" / "c2").mkdir()
    (tmp_path / "src" / "c2" / "y").write_text("y")
    unpack(pack(tmp_path / "src", ["c1/a--s1"]), tmp_path / "dst", "ok", under="c1/a--s1", error=CaptureError)
    assert (tmp_path / "dst" / "c1" / "a--s1" / "x").read_text() == "x"
    with pytest.raises(CaptureError, match=r"archive of c1/a--s1 has an unsafe path 'c2'"):
        unpack(pack(tmp_path / "src", ["c2"]), tmp_path / "dst", "archive of c1/a--s1", under="c1/a--s1",
               error=CaptureError)
    assert not (tmp_path / "dst" / "c2").exists()


def test_an_address_where_nothing_listens_is_one_line_at_once_and_writes_nothing(tmp_path: Path) -> None:
    """``ray.init`` retries such an address for minutes; both commands check it first (a TCP
    connect, 5 s at most; a closed local port answers at once) and leave no output folder."""
    with socket.socket() as s:  # a local port with nothing listening
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    spec = tmp_path / "tiny.toml"
    spec.write_text(TINY_SPEC)
    split = tmp_path / "split"
    split.mkdir()
    (split / "one.toml").write_text((Path(__file__).parent / "../testbed/scenarios/default.toml").read_text())
    for argv, out in ((["dataset", "corpus", str(spec)], tmp_path / "corpus"),
                      (["testbed", "matrix", "run", str(split), "--arms", "static"], tmp_path / "res")):
        t0 = time.monotonic()
        cp = subprocess.run([sys.executable, "-m", "ccswitch.cli", *argv, "--ray", dead, "--out", str(out)],
                            capture_output=True, text=True, timeout=60)
        assert time.monotonic() - t0 < 30, "the check must not wait for ray.init's retries"
        assert cp.returncode != 0 and cp.stderr.count("\n") == 1, cp.stderr
        assert f"--ray {dead}: cannot connect to a Ray cluster" in cp.stderr and "ray start --head" in cp.stderr
        assert not out.exists(), f"{out} was written before the address was checked"
