"""ccswitchd deciding remotely: a matrix run's remote arms, read back with their control path.

For matrix runs of the ``dqn``, ``dqn-remote[-l4s][-MS]`` and ``dqn-joint[-l4s][-MS]`` arms
(issue 15), per arm: the fairness targets over the last half (as every matrix report), and
what the control traffic met on its way: each daemon's request-to-answer time (the p50 and p99
its ``stopped`` log line gives), the rows its local policy decided after a late or missing
answer, behind a DualPI2 router the L queue's sojourn for the control packets (the only
L4S packets of these runs), and the policy server's CPU while serving (its stats line, since
26 Nov evening; older runs leave the column empty).  Writes a Markdown table and a PNG (answer times per daemon, min
share per run)::

    python -m ccswitch.testbed.reports.remote_decisions RESULTS_DIR [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from ccswitch.testbed.reports.run_metrics import TARGET_JAIN, TARGET_MIN_SHARE, TARGET_UTILISATION

_KV = re.compile(r"(\w+)=(\S+)")


@dataclass
class RunControl:
    """One run of one arm: its last-half fairness and its daemons' control-path counters."""

    scenario: str
    seed: str
    min_share: float
    jain: float
    utilisation: float
    answers_ms: list[tuple[float, float]] = field(default_factory=list)  # per daemon (p50, p99)
    rows: int = 0
    local_rows: int = 0
    l_queue_p90_us: float | None = None
    server_cpu_share: float | None = None  # the policy server's CPU / wall time while serving (a core = 1)

    @property
    def met(self) -> bool:
        return (self.min_share >= TARGET_MIN_SHARE and self.jain >= TARGET_JAIN
                and self.utilisation >= TARGET_UTILISATION)


def _daemon_counters(run: Path) -> list[dict[str, str]]:
    out = []
    for log in sorted(run.glob("daemon/*/ccswitchd.log")):
        stopped = [line for line in log.read_text(errors="replace").splitlines() if "msg=stopped" in line]
        if stopped:
            out.append(dict(_KV.findall(stopped[-1])))
    return out


def read_run(run: Path) -> RunControl:
    summary = json.loads((run / "summary.json").read_text())
    lh = summary["metrics"]["last_half"]
    rc = RunControl(run.parts[-3], run.parts[-1], lh["min_share"], lh["jain"], lh["utilisation"])
    for kv in _daemon_counters(run):
        if kv.get("remote_answer_ms_p50", "None") != "None":
            rc.answers_ms.append((float(kv["remote_answer_ms_p50"]), float(kv["remote_answer_ms_p99"])))
        rc.rows += int(kv.get("remote_rows", 0))
        rc.local_rows += int(kv.get("remote_local_rows", 0))
    st = (summary.get("meta", {}).get("policy_server") or {}).get("stats") or {}
    if st.get("serving_wall_s"):
        rc.server_cpu_share = st["serving_cpu_s"] / st["serving_wall_s"]
    emu = run / "emulator" / "summary.json"
    if emu.exists():
        # a queue without classes (pfifo) writes "classes": null
        l4s = ((json.loads(emu.read_text()).get("uplink") or {}).get("classes") or {}).get("l4s") or {}
        if (l4s.get("sojourn_us") or {}).get("count"):
            rc.l_queue_p90_us = l4s["sojourn_us"]["p90"]
    return rc


def read_arms(results: Path) -> dict[str, list[RunControl]]:
    """{arm: runs}, arms in the order they first appear (scenario/arm/seed-N folders)."""
    arms: dict[str, list[RunControl]] = {}
    for s in sorted(results.glob("*/*/seed-*/summary.json")):
        arms.setdefault(s.parts[-3], []).append(read_run(s.parent))
    return arms


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def arm_table(arms: dict[str, list[RunControl]]) -> str:
    lines = ["| arm | runs | met | mean min share | mean Jain | mean util. | answer p50 ms, median of daemons "
             "(range) | answer p99 ms, median | rows decided locally | L-queue p90 of the control packets | "
             "server CPU, % of a core (mean, max) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for arm, runs in arms.items():
        p50 = [a for r in runs for a, _ in r.answers_ms]
        p99 = [b for r in runs for _, b in r.answers_ms]
        rows, local = sum(r.rows for r in runs), sum(r.local_rows for r in runs)
        lq = [r.l_queue_p90_us for r in runs if r.l_queue_p90_us is not None]
        cpu = [r.server_cpu_share for r in runs if r.server_cpu_share is not None]
        share, jain = statistics.mean(r.min_share for r in runs), statistics.mean(r.jain for r in runs)
        util = 100 * statistics.mean(r.utilisation for r in runs)
        lines.append(
            f"| {arm} | {len(runs)} | {sum(r.met for r in runs)} | {share:.2f} | {jain:.3f} | {util:.1f} % | "
            + (f"{_median(p50):.1f} ({min(p50):.1f}-{max(p50):.1f}) | {_median(p99):.1f} | {local} of {rows} | "
               if p50 else "local | | | ")
            + (f"{max(lq) / 1000:.2f} ms (max of runs) |" if lq else "no L4S packets |")
            + (f" {100 * statistics.mean(cpu):.2f} ({100 * max(cpu):.2f}) |" if cpu else " |"))
    return "\n".join(lines)


def scenario_table(arms: dict[str, list[RunControl]]) -> str:
    scenarios = sorted({r.scenario for runs in arms.values() for r in runs})
    lines = ["| scenario (min share per seed, * = all targets met) | " + " | ".join(arms) + " |",
             "|---|" + "---|" * len(arms)]
    for sc in scenarios:
        cells = [", ".join(f"{r.min_share:.2f}{'*' if r.met else ''}"
                           for r in sorted(runs, key=lambda r: r.seed) if r.scenario == sc)
                 for runs in arms.values()]
        lines.append(f"| {sc} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(arms: dict[str, list[RunControl]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    remote = {a: rs for a, rs in arms.items() if any(r.answers_ms for r in rs)}
    for i, runs in enumerate(remote.values()):
        p50 = [a for r in runs for a, _ in r.answers_ms]
        p99 = [b for r in runs for _, b in r.answers_ms]
        ax1.scatter([i - 0.12] * len(p50), p50, s=14, color="tab:blue", label="p50" if i == 0 else None)
        ax1.scatter([i + 0.12] * len(p99), p99, s=14, color="tab:red", marker="x", label="p99" if i == 0 else None)
    ax1.set_xticks(range(len(remote)), list(remote), rotation=10)
    ax1.set_ylabel("request-to-answer time per daemon (ms)")
    ax1.set_title("Control path: one point per daemon and run")
    ax1.set_ylim(bottom=0)
    ax1.legend()
    for i, runs in enumerate(arms.values()):
        for met, color, dx in ((True, "tab:green", -0.08), (False, "tab:gray", 0.08)):  # side by side
            ms = [r.min_share for r in runs if r.met == met]
            ax2.scatter([i + dx] * len(ms), ms, s=16, color=color)
    ax2.axhline(TARGET_MIN_SHARE, color="k", lw=0.8, ls="--", label=f"target {TARGET_MIN_SHARE:g} of fair share")
    ax2.set_xticks(range(len(arms)), list(arms), rotation=10)
    ax2.set_ylabel("last-half min share of fair share")
    ax2.set_title("Fairness per run (green: all targets met, grey: not)")
    ax2.set_ylim(0, 1.1)
    ax2.legend(loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", type=Path, help="a matrix run's --out folder")
    ap.add_argument("--out", type=Path, help="write remote-decisions.md and .png here (default: print the tables)")
    args = ap.parse_args()
    arms = read_arms(args.results)
    if not arms:
        raise SystemExit(f"remote_decisions: no finished runs (*/ARM/seed-N/summary.json) under {args.results}")
    text = arm_table(arms) + "\n\n" + scenario_table(arms) + "\n"
    if args.out is None:
        print(text)
        return
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "remote-decisions.md").write_text(text)
    plot(arms, args.out / "remote-decisions.png")
    print(f"wrote {args.out / 'remote-decisions.md'} and .png")


if __name__ == "__main__":
    main()
