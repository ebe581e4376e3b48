"""Paper 001's reproduction report over several seeds (testbed/reports/lfq_reproduction.py, ``report-seeds``).

Synthetic run files (the driver's format) in two seed folders: the pooled numbers are those of the draws taken
together, each seed's are its own, and a bad command line is one error naming the problem.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ccswitch.testbed.reports.lfq_reproduction import ARMS, report_seeds


def _write_seed(folder: Path, n: int, lfq_tput: float, bw: float) -> None:
    for i in range(n):
        for arm in ARMS:
            tput = lfq_tput if arm == "lfq" else 10.0
            r = {"i": i, "bandwidth_mbit": bw, "rtt_ms": 10.0 + i, "cca": "reno" if i % 2 else "cubic",
                 "duration_s": 5.0, "arm": arm, "throughput_mbit": tput,
                 "avg_queue_pkts": 4.0 if arm == "lfq" else 10.0,
                 "max_queue_pkts": 10 if arm == "lfq" else 100}
            if arm == "lfq":
                r |= {"limit_late": 5.0 + i, "agent": {"cpu_ms_per_step": 0.5, "error": None}}
            (folder / arm).mkdir(parents=True, exist_ok=True)
            (folder / arm / f"run-{i:04d}.json").write_text(json.dumps(r) + "\n")


def test_pooled_is_the_draws_taken_together(tmp_path: Path) -> None:
    _write_seed(tmp_path / "s1", 4, lfq_tput=9.0, bw=10.0)
    _write_seed(tmp_path / "s2", 6, lfq_tput=10.0, bw=12.0)
    (tmp_path / "s2" / "fq_codel" / "run-0005.json").unlink()  # a draw one arm lacks is left out of all arms
    doc = tmp_path / "seeds.md"
    out = report_seeds({"seed 1": tmp_path / "s1", "seed 2": tmp_path / "s2"}, doc)
    assert out["per_seed"]["seed 1"]["n"] == 4 and out["per_seed"]["seed 2"]["n"] == 5
    assert out["pooled"]["n"] == 9
    # LFQ / FQ-CoDel throughput: 9/10 in seed 1, 10/10 in seed 2; pooled (4 x 9 + 5 x 10) / (9 x 10)
    assert out["per_seed"]["seed 1"]["ratios"]["throughput"]["ratio"] == pytest.approx(0.9)
    assert out["pooled"]["ratios"]["throughput"]["ratio"] == pytest.approx((4 * 9 + 5 * 10) / 90)
    text = doc.read_text()
    assert "seed 1 **4**, seed 2 **5**; pooled **9**" in text
    assert "| LFQ / FQ-CoDel throughput >= 0.95 | 0.900 (" in text and doc.with_suffix(".png").stat().st_size > 0


def test_seed_pages_count_only_the_baselines_that_ran(tmp_path: Path) -> None:
    """Folders with FQ-CoDel as their only baseline (an actor's lfq runs beside earlier FQ-CoDel runs): the
    page counts its 3 numbers against the paper's, not 9."""
    import shutil

    _write_seed(tmp_path / "s1", 3, lfq_tput=9.0, bw=10.0)
    for arm in ("fq-100", "fq-1000"):
        shutil.rmtree(tmp_path / "s1" / arm)
    report_seeds({"seed 1": tmp_path / "s1"}, tmp_path / "one.md")
    assert "Baseline numbers (fq_codel) within 15 % of the paper's table (of 3): seed 1 " in \
        (tmp_path / "one.md").read_text()
    _write_seed(tmp_path / "s2", 3, lfq_tput=9.0, bw=10.0)
    report_seeds({"seed 1": tmp_path / "s2"}, tmp_path / "all.md")
    assert "(fq-100, fq-1000, fq_codel) within 15 % of the paper's table (of 9)" in (tmp_path / "all.md").read_text()


def test_report_seeds_command_line_errors_are_one_line(tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "ccswitch.testbed.lfq_reproduction", "report-seeds", *args],
                              capture_output=True, text=True, check=False)

    cp = run("--results", str(tmp_path / "nope"))
    assert cp.returncode == 2 and "no run folder" in cp.stderr and str(tmp_path / "nope") in cp.stderr
    (tmp_path / "a").mkdir()
    cp = run("--results", str(tmp_path / "a"), "--labels", "x,y")
    assert cp.returncode == 2 and "2 labels for 1 folders" in cp.stderr


def test_a_bic_sender_is_reported_as_bic(tmp_path: Path) -> None:
    """Runs of the no-sack-bic sender: the per-CCA table and the ratio name BIC, the page names the sender."""
    _write_seed(tmp_path / "s", 4, lfq_tput=9.0, bw=10.0)
    for f in (tmp_path / "s").glob("*/run-*.json"):
        r = json.loads(f.read_text())
        r |= {"cca": "bic" if r["cca"] == "cubic" else r["cca"], "sender": "no-sack-bic"}
        f.write_text(json.dumps(r) + "\n")
    from ccswitch.testbed.reports.lfq_reproduction import report

    s = report(tmp_path / "s", tmp_path / "page.md")
    text = (tmp_path / "page.md").read_text()
    assert s["ccas"] == ["reno", "bic"] and s["learned"]["bic"]["n"] == 2
    assert "sender **no-sack-bic**" in text and "| queue | reno | bic |" in text and "Reno:BIC mean limit" in text


def test_a_folder_keeps_one_sender(tmp_path: Path) -> None:
    """Resuming a folder with another sender is refused before anything runs (no root needed to get there)."""
    _write_seed(tmp_path / "s", 1, lfq_tput=9.0, bw=10.0)  # runs without a sender field: linux
    cp = subprocess.run([sys.executable, "-m", "ccswitch.testbed.lfq_reproduction", "run", "--out",
                         str(tmp_path / "s"), "--sender", "no-sack-bic"], capture_output=True, text=True, check=False)
    assert cp.returncode == 2
    assert "holds runs with sender linux, not no-sack-bic: give --sender linux" in cp.stderr
    assert len(list((tmp_path / "s").glob("*/run-*.json"))) == len(ARMS)  # nothing added or removed


def test_report_senders_counts_the_baselines_within_15_percent(tmp_path: Path) -> None:
    """Two sender folders on the draws both have; each baseline cell is ours / the paper's."""
    from ccswitch.testbed.reports.lfq_reproduction import PAPER, report_senders

    _write_seed(tmp_path / "a", 3, lfq_tput=9.0, bw=10.0)
    _write_seed(tmp_path / "b", 2, lfq_tput=9.0, bw=10.0)
    out = report_senders({"linux": tmp_path / "a", "no-sack-bic": tmp_path / "b"}, tmp_path / "senders.md")
    assert out["linux"]["n"] == 2 and out["no-sack-bic"]["n"] == 2  # draw 2 only in "a": left out
    text = (tmp_path / "senders.md").read_text()
    # throughput 10 Mbit/s against fq_codel's 13.7 (0.73: outside), max queue 100 against 155.4 (0.64)
    assert f"| fq_codel | **{10 / PAPER['fq_codel'][0]:.2f}** / **{100 / PAPER['fq_codel'][1]:.2f}** /" in text
    assert "| fq-100 | " in text and "1.00" in text  # fq-100's max queue, 100 of 100
    # within: fq-100's throughput (10 / 11.7 = 0.855) and max queue (1.00); nothing else
    assert "| within 15 % | 2 of 9 | 2 of 9 |" in text


def test_the_report_names_the_actor_of_the_lfq_runs(tmp_path: Path) -> None:
    """Runs of two actors in one folder are both named (they should not be read as one actor's), the shipped
    one by its file under models/, an unknown one by its checksum alone."""
    from ccswitch.testbed.reports.lfq_reproduction import report

    shipped = json.loads((Path(__file__).parents[1] / "models" / "lfq_actor.json").read_text())["checksum"]
    _write_seed(tmp_path, 4, lfq_tput=9.0, bw=10.0)
    for i, checksum in ((0, shipped), (1, "sha256:" + "0" * 64)):
        f = tmp_path / "lfq" / f"run-{i:04d}.json"
        f.write_text(json.dumps(json.loads(f.read_text()) | {"actor_checksum": checksum}) + "\n")
    s = report(tmp_path, tmp_path / "r.md")
    assert s["actors"] == ["sha256:00000000…", f"{shipped[:15]}… (models/lfq_actor.json)"]  # by checksum
    assert f"LFQ actor: sha256:00000000…, {shipped[:15]}… (models/lfq_actor.json)." in (tmp_path / "r.md").read_text()
