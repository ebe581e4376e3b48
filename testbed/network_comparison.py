"""Host or network: ccswitchd against router-side queueing on the same scenarios (issue 13, section 2).

A user who sees one flow starve can run ccswitchd on the clients or change the
router's queue.  This driver runs the nine fairness scenarios of
``python -m ccswitch.testbed.experiments`` (paper 002's WiFi link, 2-4 clients)
with the router's uplink queue replaced by each of QUEUES, in two arms:

    static   no daemon: every flow keeps the CCA its scenario gives it
    dqn      ccswitchd with the shipped policy on every client

so "router only", "host only" and "both" sit side by side, measured under the
same load.  Everything but the uplink qdisc is the scenario file as committed.

    python -m ccswitch.testbed.network_comparison run [--queues pfifo,fq_codel] [--arms static,dqn] [--out DIR]
    python -m ccswitch.testbed.network_comparison report [--results DIR] [--doc docs/results-network.md]
        [--notes docs/network/notes.md]

``run`` is resumable (a run folder with its summary.json is never repeated) and
writes OUT/<queue>/<scenario>/<arm>/run-01-seed-1/; ``report`` writes the
Markdown tables and a PNG beside the doc.  Root, like every testbed run; one
run takes the scenario's 40 s plus ~10 s.

Queueing delay comes from linkemu's per-client sojourn statistics of the
uplink (router) queue, over the whole run (p90 and p99, the largest over the
clients); the flows' RTT percentiles and the fairness targets use the last
half, as everywhere else.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .experiments import scenario_files
from .scenario.arms import arm_scenario, check_arms

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = Path("results/network")
DEFAULT_DOC = REPO / "docs" / "results-network.md"
BASE_QDISC = '{ kind = "pfifo", limit_pkts = 50 }'
"""The uplink queue of every fairness scenario (paper 002's MikroTik: a 50-packet FIFO)."""

QUEUES: dict[str, str] = {
    "pfifo": BASE_QDISC,
    "fq_codel": '{ kind = "fq_codel" }',  # Linux defaults: 1024 flows, quantum 1514, 5 ms / 100 ms
    "fq-100": '{ kind = "fq", flow_limit_pkts = 100 }',  # paper 001's static per-flow limit baseline
    "dualpi2": '{ kind = "dualpi2" }',  # RFC 9332 defaults; classic flows only, so its C queue's PI2
    # paper 000's agent setting DualPI2's p' (the step actor, 25 Nov; absolute: scenario copies live elsewhere)
    "dualpi2-a3c": f'{{ kind = "dualpi2", agent = "{REPO / "models" / "dualpi2_a3c_step.json"}" }}',
    # the shipped residual actor (26 Nov): p' = the PI's value x the actor's factor
    "dualpi2-a3c-res": f'{{ kind = "dualpi2", agent = "{REPO / "models" / "dualpi2_a3c.json"}" }}',
    # paper 001's LFQ: fq with per-flow limits set every 10 ms by the trained agent (docs/network/lfq.md)
    "lfq": f'{{ kind = "lfq", agent = "{REPO / "models" / "lfq_actor.json"}" }}',
    # the same queue with the actor trained on the scenario space's rates, RTTs, CCAs and WiFi media
    # (docs/network/lfq.md "An actor for the scenario space")
    "lfq-space": f'{{ kind = "lfq", agent = "{REPO / "models" / "lfq_actor_space.json"}" }}',
    # and behind the router-side floor of half the fair share's BDP under every limit it sets
    # (docs/network/lfq.md "A floor under the limits")
    "lfq-space-floor": f'{{ kind = "lfq", agent = "{REPO / "models" / "lfq_actor_space.json"}", '
                       'share_floor_bdp = 0.5 }',
    # the same floor at one whole BDP: ties FQ-CoDel over four held-out test sets at less delay
    # (docs/network/lfq.md "The floor's hole closed; half a BDP or one" and after)
    "lfq-space-floor1": f'{{ kind = "lfq", agent = "{REPO / "models" / "lfq_actor_space.json"}", '
                        'share_floor_bdp = 1.0 }',
    # and at least 8 or 16 packets under every flow: a fair share of a couple of packets per RTT otherwise
    # leaves a loss-based flow too small a window to recover; 16 is the LFQ configuration to run for the
    # space's users (docs/network/lfq.md "The third held-out draw; a floor in packets")
    "lfq-space-floor1-min8": f'{{ kind = "lfq", agent = "{REPO / "models" / "lfq_actor_space.json"}", '
                             'share_floor_bdp = 1.0, share_floor_min_pkts = 8 }',
    "lfq-space-floor1-min16": f'{{ kind = "lfq", agent = "{REPO / "models" / "lfq_actor_space.json"}", '
                              'share_floor_bdp = 1.0, share_floor_min_pkts = 16 }',
    # paper 004: every flow the same (Gold) policy, so per-flow packet values decide the shares
    "vdq_csaqm": '{ kind = "vdq_csaqm", default_policy = "gold" }',
}
"""Router queues compared, as scenario-file qdisc tables."""
DEFAULT_ARMS = ("static", "dqn")


def scenario_text(base: Path, queue: str) -> str:
    """The scenario file *base* with its uplink queue replaced by QUEUES[queue] and a name saying so."""
    if queue not in QUEUES:
        raise ValueError(f"network comparison: unknown queue {queue!r}; known: {', '.join(QUEUES)}")
    text = base.read_text()
    head, sep, tail = text.partition("[link.uplink]")
    if not sep or BASE_QDISC not in tail.split("\n[", 1)[0]:
        raise ValueError(f"network comparison: {base.name}: its [link.uplink] has no {BASE_QDISC} "
                         "(the comparison replaces exactly that queue)")
    tail = tail.replace(BASE_QDISC, QUEUES[queue], 1)
    stem = base.stem
    head = head.replace(f'name = "{stem}"', f'name = "{stem}"  # router queue: {queue}', 1)
    return head + sep + tail


def run(queues: Sequence[str], arms: Sequence[str], out: Path) -> None:
    from .runs.runner import run_scenario
    from .scenario.parse import parse_scenario

    todo = [(q, f, a) for q in queues for f in scenario_files() for a in arms]
    for i, (q, f, a) in enumerate(todo, 1):
        dest = out / q / f.stem / a
        if (dest / "run-01-seed-1" / "summary.json").is_file():
            continue
        sc = parse_scenario(scenario_text(f, q), f"{f.name} with a {q} router queue", base_dir=f.parent)
        print(f"network comparison: [{i}/{len(todo)}] {q} {f.stem} {a}", file=sys.stderr, flush=True)
        run_scenario(arm_scenario(sc, a, None, ()), dest, progress=False, plots=False)


# ------------------------------------------------------------------ report ---


def _sojourn_ms(summary: dict[str, Any]) -> tuple[float, float]:
    """The uplink queue's sojourn p90 and p99 over the run, ms: the largest over the clients."""
    clients = (summary.get("uplink") or {}).get("clients") or []
    p90 = [c["sojourn_us"]["p90"] for c in clients if c.get("sojourn_us", {}).get("count")]
    p99 = [c["sojourn_us"]["p99"] for c in clients if c.get("sojourn_us", {}).get("count")]
    return (max(p90) / 1e3 if p90 else math.nan, max(p99) / 1e3 if p99 else math.nan)


def collect(results: Path) -> dict[str, dict[str, dict[str, dict[str, Any]]]]:
    """queue -> arm -> scenario -> metrics of its run."""
    from .reports.run_folder import load_run
    from .reports.run_metrics import TARGET_JAIN, TARGET_MIN_SHARE, TARGET_UTILISATION, last_half

    out: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
    for run_dir in sorted(results.glob("*/*/*/run-01-seed-1")):
        if not (run_dir / "summary.json").is_file():
            continue
        arm_dir = run_dir.parent
        queue, scenario, arm = arm_dir.parent.parent.name, arm_dir.parent.name, arm_dir.name
        rd = load_run(run_dir)
        m = rd.summary.get("metrics", {}).get("last_half") or last_half(rd)
        emu = run_dir / "emulator" / "summary.json"
        p90, p99 = _sojourn_ms(json.loads(emu.read_text())) if emu.is_file() else (math.nan, math.nan)
        met = (m.get("min_share", 0) >= TARGET_MIN_SHARE and m.get("jain", 0) >= TARGET_JAIN
               and (m.get("utilisation") or 0) >= TARGET_UTILISATION)
        out.setdefault(queue, {}).setdefault(arm, {})[scenario] = {
            "min_share": m.get("min_share"), "jain": m.get("jain"), "utilisation": m.get("utilisation"),
            "rtt_p95_ms": m.get("rtt_p95_ms"), "sojourn_p90_ms": p90, "sojourn_p99_ms": p99, "met": met}
    return out


def _median(xs: Sequence[float | None]) -> float:
    v = [x for x in xs if x is not None and not math.isnan(x)]
    return statistics.median(v) if v else math.nan


def _f(v: float, nd: int = 2, pct: bool = False) -> str:
    if v is None or math.isnan(v):
        return "-"
    return f"{v * 100:.0f} %" if pct else f"{v:.{nd}f}"


def report(results: Path, doc: Path, notes: str = "") -> str:
    """Write *doc* (title, *notes*, the two tables, the plot beside it as PNG); returns its text."""
    data = collect(results)
    if not data:
        raise ValueError(f"network comparison: no finished runs under {results} (run `... run --out {results}`)")
    scenarios = sorted({s for q in data.values() for a in q.values() for s in a})
    lines = ["| Router queue | Host | Met (of runs) | Median min share | Median Jain | Median utilisation "
             "| Median p95 RTT (ms) | Median sojourn p90 / p99 (ms) |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for q in [q for q in QUEUES if q in data]:
        for arm in [a for a in DEFAULT_ARMS if a in data[q]]:
            rs = list(data[q][arm].values())
            host = "ccswitchd (DQN)" if arm == "dqn" else "static CCAs"
            lines.append(
                f"| {q} | {host} | {sum(r['met'] for r in rs)} of {len(rs)} | "
                f"{_f(_median([r['min_share'] for r in rs]))} | {_f(_median([r['jain'] for r in rs]), 3)} | "
                f"{_f(_median([r['utilisation'] for r in rs]), pct=True)} | "
                f"{_f(_median([r['rtt_p95_ms'] for r in rs]), 1)} | "
                f"{_f(_median([r['sojourn_p90_ms'] for r in rs]), 1)} / "
                f"{_f(_median([r['sojourn_p99_ms'] for r in rs]), 1)} |")
    per = ["| Scenario | " + " | ".join(f"{q} {a}" for q in QUEUES if q in data for a in DEFAULT_ARMS
                                       if a in data[q]) + " |"]
    cols = [(q, a) for q in QUEUES if q in data for a in DEFAULT_ARMS if a in data[q]]
    per.append("|---|" + "---|" * len(cols))
    for s in scenarios:
        cells = []
        for q, a in cols:
            r = data[q][a].get(s)
            cells.append("-" if r is None else
                         f"{'**' if r['met'] else ''}{_f(r['min_share'])} / {_f(r['utilisation'], pct=True)}"
                         f"{'**' if r['met'] else ''}")
        per.append(f"| {s} | " + " | ".join(cells) + " |")
    png = doc.with_suffix(".png")
    plot(data, cols, scenarios, png)
    n_runs = sum(len(r) for q in data.values() for r in q.values())
    body = (f"# Host or network: ccswitchd against router queues\n\nGenerated by `python -m "
            f"ccswitch.testbed.network_comparison report` from {n_runs} finished runs "
            f"({len(scenarios)} scenarios x {len(cols)} queue/host arms, one run each).\n\n"
            + (notes.strip() + "\n\n" if notes.strip() else "")
            + "## Per arm\n\nTargets over the last half: every flow >= 0.8 of its fair share, Jain >= 0.95, "
              "utilisation >= 90 %.  Sojourn: the router's uplink queue, whole run, the worst client.\n\n"
            + "\n".join(lines) + f"\n\n![host vs router]({png.name})\n\n"
            + "## Per scenario\n\nMin share / utilisation; **bold** where all three targets are met.\n\n"
            + "\n".join(per) + "\n")
    doc.write_text(body)
    return body


def plot(data: dict[str, dict[str, dict[str, dict[str, Any]]]], cols: Sequence[tuple[str, str]],
         scenarios: Sequence[str], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # one panel above the other: each (queue, host) column gets ~1 inch for its two-line label; the
    # targets' two failure modes (a starved flow, an empty link) and the delay the queue costs
    fig, axes = plt.subplots(3, 1, figsize=(max(8.0, 1.0 * len(cols)), 12.0))
    for ax, key, label in ((axes[0], "min_share", "min share (last half)"),
                           (axes[1], "utilisation", "utilisation (last half)"),
                           (axes[2], "sojourn_p99_ms", "router queue sojourn p99 (ms)")):
        for i, (q, a) in enumerate(cols):
            ys = [data[q][a][s][key] for s in scenarios if s in data[q][a]]
            xs = [i + (j - len(ys) / 2) * 0.04 for j in range(len(ys))]
            ax.scatter(xs, ys, s=18, alpha=0.7, marker="o" if a == "dqn" else "s",
                       color=f"C{list(QUEUES).index(q)}")
            ax.hlines(_median(ys), i - 0.3, i + 0.3, color="k", linewidth=1.5)
        ax.set_xticks(range(len(cols)), [f"{q}\n{'ccswitchd' if a == 'dqn' else 'static'}" for q, a in cols],
                      fontsize=9)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].axhline(0.8, color="r", linestyle=":", linewidth=1)
    axes[0].text(len(cols) - 0.5, 0.81, "target 0.8", color="r", fontsize=8, ha="right")
    axes[1].axhline(0.9, color="r", linestyle=":", linewidth=1)
    axes[1].text(-0.45, 0.885, "target 90 %", color="r", fontsize=8, ha="left", va="top")
    fig.suptitle(f"Host vs router queue: {len(scenarios)} fairness scenarios, one run each (bar: median)")
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m ccswitch.testbed.network_comparison",
                                 description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run the fairness scenarios under each router queue, in each arm")
    r.add_argument("--queues", default=",".join(QUEUES), help=f"comma-separated, of {', '.join(QUEUES)}")
    r.add_argument("--arms", default=",".join(DEFAULT_ARMS), help="comma-separated arms (static, dqn, ...)")
    r.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p = sub.add_parser("report", help="write the comparison tables and plot")
    p.add_argument("--results", type=Path, default=DEFAULT_OUT)
    p.add_argument("--doc", type=Path, default=DEFAULT_DOC)
    p.add_argument("--notes", type=Path, help="a Markdown file inserted after the introduction")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "run":
            queues = [q for q in args.queues.split(",") if q]
            unknown = [q for q in queues if q not in QUEUES]
            if unknown:
                ap.error(f"--queues: unknown {', '.join(unknown)}; known: {', '.join(QUEUES)}")
            try:
                arms = check_arms(args.arms.split(","))
            except ValueError as e:
                ap.error(str(e))
            from ccswitch.dataplane import install_signal_handlers

            install_signal_handlers()
            run(queues, arms, args.out)
        else:
            print(report(args.results, args.doc, args.notes.read_text() if args.notes else ""))
    except (OSError, ValueError, RuntimeError) as e:
        print(f"network comparison: error: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
