"""A bounded coverage-guided (Atheris/libFuzzer) run of the control socket's request path.

The harness is tests/fuzz_control_socket.py (what counts as a finding is in its
docstring).  Here: FUZZ_SECONDS of fuzzing must end without a finding and must
have grown the corpus beyond its seeds (coverage guidance at work: a harness
whose target ignored its input would add nothing), and every past finding in
tests/fuzz_regressions/ must now pass.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
HARNESS = HERE / "fuzz_control_socket.py"
FUZZ_SECONDS = 20
MIN_NEW_UNITS = 10
"""Corpus growth in FUZZ_SECONDS: ~90-130 new units per 40-90 s here (19k runs/s); 10 leaves room for a
loaded CI machine while still failing for a target that ignores its input (0 new units)."""


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(HARNESS), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=FUZZ_SECONDS + 180)


def test_bounded_fuzz_run_finds_nothing_and_gains_coverage(tmp_path: Path) -> None:
    p = _run([f"-max_total_time={FUZZ_SECONDS}", "-print_final_stats=1", str(tmp_path / "corpus")], tmp_path)
    tail = "\n".join(p.stderr.splitlines()[-30:])
    assert p.returncode == 0, f"the fuzzer found a problem (crash input in {tmp_path}):\n{tail}"
    assert not list(tmp_path.glob("crash-*"))
    m = re.search(r"stat::new_units_added:\s+(\d+)", p.stderr)
    assert m, tail
    assert int(m.group(1)) >= MIN_NEW_UNITS, f"coverage did not grow: {m.group(0)}\n{tail}"


def test_past_findings_stay_fixed(tmp_path: Path) -> None:
    cases = sorted((HERE / "fuzz_regressions").iterdir())
    assert cases
    p = _run([str(c) for c in cases], tmp_path)
    assert p.returncode == 0, "\n".join(p.stderr.splitlines()[-30:])
    assert p.stderr.count("Executed ") == len(cases), p.stderr[-2000:]
