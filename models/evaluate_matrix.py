"""End-to-end evaluation of a candidate policy on a committed split of the scenario space.

``ccswitch evaluate POLICY --split dev|test`` runs the ``dqn`` arm with POLICY over
``testbed/scenarios/matrix/<split>/`` (the matrix runner: real namespaces, linkemu, iperf3,
ccswitchd; resumable) and sets its runs beside the other arms' runs of the same split (the
baseline results folder, by default ``results/matrix-<split>``, which holds the shipped
policy's ``dqn`` arm, ``static``, ``heuristic`` and the daemon-static arms).  A baseline folder
that does not exist yet (a fresh clone: run folders are not committed) is filled first with
the two arms the comparison cannot do without, ``static`` and the shipped policy's ``dqn``
(:data:`BASELINE_ARMS`; only ``static`` when the candidate is the shipped policy), unless
``run_baseline`` is off.  The comparison
is the matrix report's per-arm table plus issue 11's two per-scenario checks: scenarios where
the candidate's min share is more than 0.05 below the static arm's, and the median p95 RTT
against the best arm that meets the targets.

Model selection uses ``--split dev`` only; ``--split test`` is run once per shipped
candidate and its number goes into the model card as it is.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from ccswitch.testbed.reports.coordination import summarise_arm
from ccswitch.testbed.reports.matrix import RunResult, arm_table, load_results
from ccswitch.testbed.runs.matrix import run_matrix

__all__ = ["BASELINE_ARMS", "CANDIDATE", "SPLIT_DIRS", "baseline_plan", "compare", "coordination_lines",
           "evaluate_on_split"]

REPO = Path(__file__).resolve().parent.parent
SPLIT_DIRS = {s: REPO / "testbed" / "scenarios" / "matrix" / s for s in ("dev", "test")}
CANDIDATE = "candidate"
"""The arm name the candidate's runs get in the comparison."""
STATIC_SLACK = 0.05
BASELINE_ARMS = ("static", "dqn")
"""What a missing baseline folder is filled with: no daemon, and the shipped policy (``dqn``)."""
BASELINE_MARK = "EVALUATE_BASELINE"
"""A file in a baseline folder that evaluate filled: an interrupted fill is resumed next time."""
"""Issue 11: in no scenario may the min share be more than this below the static arm's."""


def compare(candidate: Sequence[RunResult], baseline: Sequence[RunResult], title: str) -> str:
    """Markdown: the per-arm table with the candidate first, and the per-scenario checks."""
    scen = sorted({r.scenario for r in candidate})
    base = [r for r in baseline if r.scenario in set(scen)]
    runs = [replace(r, arm=CANDIDATE) for r in candidate] + base
    arms = [CANDIDATE, *sorted({r.arm for r in base}, key=lambda a: (a != "dqn", a))]
    meetable = sorted({r.scenario for r in runs if r.met})
    lines = [f"# {title}", "",
             f"{len(scen)} scenarios; {len(meetable)} met by at least one arm in at least one run.", "",
             *arm_table(runs, arms, scen, meetable), ""]

    def mean_of(arm: str, s: str, key: str) -> float:
        vals = [getattr(r, key) for r in runs if r.arm == arm and r.scenario == s
                and not math.isnan(getattr(r, key))]
        return statistics.fmean(vals) if vals else math.nan

    below = [(s, mean_of(CANDIDATE, s, "min_share"), mean_of("static", s, "min_share")) for s in scen]
    below = [(s, c, st) for s, c, st in below if not math.isnan(c) and not math.isnan(st) and c < st - STATIC_SLACK]
    lines += [f"Scenarios where the candidate's min share is more than {STATIC_SLACK} below the static arm's: "
              f"{len(below)} of {len(scen)}" + (":" if below else "."), ""]
    lines += [f"- {s}: {c:.2f} vs static {st:.2f}" for s, c, st in below]
    winners = [a for a in arms if a != CANDIDATE and any(r.met for r in runs if r.arm == a)]
    if winners:
        def p95(arm: str) -> float:
            v = [r.rtt_p95_ms for r in runs if r.arm == arm and not math.isnan(r.rtt_p95_ms)]
            return statistics.median(v) if v else math.nan

        best = min(winners, key=lambda a: (-sum(r.met for r in runs if r.arm == a), p95(a)))
        lines += ["", f"Median p95 RTT: candidate {p95(CANDIDATE):.1f} ms, {best} (the arm meeting the targets "
                      f"most often) {p95(best):.1f} ms."]
    return "\n".join(lines) + "\n"


DAEMON_ARMS = ("dqn", "heuristic", "daemon-static-cubic", "daemon-static-bbr", "daemon-static-pcc")


def coordination_lines(candidate: Path, baseline: Path | None, scenarios: set[str]) -> list[str]:
    """Markdown: do the daemons on different clients agree (testbed/reports/coordination.py)?

    One row per daemon arm (the candidate's ``dqn`` runs, then the baseline's daemon arms),
    over the runs with two or more managed bulk flows in *scenarios*.
    """
    sources = [(CANDIDATE, candidate, "dqn")] + [(a, baseline, a) for a in DAEMON_ARMS if baseline is not None]
    rows = []
    for name, folder, arm in sources:
        s = summarise_arm(folder, arm, scenarios)
        if s["runs"]:
            rows.append(f"| {name} | {s['runs']} | {s['agreement']:.2f} | {s['all_agree_runs']:.0%} | "
                        f"{s['switches_per_flow']:.1f} | {s['returns_per_run']:.1f} |")
    if not rows:
        return []
    return ["## Coordination between the daemons", "",
            "Last half of runs with two or more managed bulk flows: agreement = share of seconds in which "
            "every managed bulk flow ran the same CCA; returns = A -> B -> A changes per run.", "",
            "| Arm | Runs | Agreement | Runs always agreeing | Switches/flow | Returns/run |",
            "|---|---:|---:|---:|---:|---:|", *rows, ""]


def baseline_plan(policy: Path, base_dir: Path) -> list[str]:
    """The arms to run into *base_dir* before the comparison: none if it already holds results
    (its arms are the user's choice, with their own policy and guard), else :data:`BASELINE_ARMS`
    without ``dqn`` when *policy* is the shipped policy (the candidate's runs are those)."""
    from ccswitch.models.policy import DEFAULT_POLICY

    if base_dir.is_dir() and load_results(base_dir) and not (base_dir / BASELINE_MARK).is_file():
        return []  # the user's own baseline; one this module started is resumed (run_matrix skips what is done)
    same = DEFAULT_POLICY.is_file() and policy.resolve().read_bytes() == DEFAULT_POLICY.read_bytes()
    return [a for a in BASELINE_ARMS if not (a == "dqn" and same)]


def evaluate_on_split(policy: Path, split: str, out: Path, *, baseline: Path | None = None, seeds: int = 1,
                      jobs: int = 1, timeout_s: float = 240.0, progress: bool = True,
                      guard: Sequence[str] = (), run_baseline: bool = True,
                      log: Callable[[str], None] = lambda m: None) -> tuple[str, int]:
    """Run the candidate's matrix arm (and a missing baseline, see the module docstring); returns
    (comparison Markdown, failed runs).

    *guard*: KEY=VALUE guard settings of the candidate's daemon (as ``matrix run --guard``).
    """
    folder = SPLIT_DIRS[split]
    base_dir = baseline or REPO / "results" / f"matrix-{split}"
    failed = 0
    if run_baseline and (arms := baseline_plan(policy, base_dir)):
        n = len(arms) * seeds * len(list(folder.glob("*.toml")))
        log(f"evaluate: no baseline results in {base_dir}: running the {' and '.join(arms)} arm(s) there first "
            f"({n} runs, ~{n * 45 / 60 / jobs:.0f} min; resumable; --no-baseline-runs skips them)")
        base_dir.mkdir(parents=True, exist_ok=True)
        (base_dir / BASELINE_MARK).write_text(f"filled by ccswitch evaluate --split {split}: {', '.join(arms)}\n")
        failed += sum(not o.ok for o in run_matrix(folder, arms, seeds, base_dir, jobs=jobs, timeout_s=timeout_s,
                                                   progress=progress))
    outcomes = run_matrix(folder, ["dqn"], seeds, out, jobs=jobs, timeout_s=timeout_s, policy_file=policy,
                          progress=progress, guard=guard)
    failed += sum(not o.ok for o in outcomes)
    base = load_results(base_dir) if base_dir.is_dir() else []
    cand = load_results(out)
    doc = compare(cand, base, f"{policy.name} on the {split} split"
                  + (f" beside {base_dir}" if base else " (no baseline results found)"))
    doc += "\n" + "\n".join(coordination_lines(out, base_dir if base else None, {r.scenario for r in cand}))
    (out / "comparison.md").write_text(doc)
    return doc, failed
