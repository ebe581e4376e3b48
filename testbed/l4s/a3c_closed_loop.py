"""Paper 000's A3C agent in closed loop against DualPI2's PI controller, on the dynamic L4S template.

Issue 14 asks of the agent, against the PI controller on the same runs: Classic-queue mean
sojourn <= 17 ms, L-queue p99 <= 2 ms, utilisation within 2 points of the PI's, Classic drops
no higher.  Each pair is ``l4s-dyn-CCA-vs-prague`` (PI) and ``l4s-dyn-CCA-vs-prague-a3c`` (the
same scenario with ``agent = "../../models/dualpi2_a3c.json"`` in its dualpi2 table; generated
by make_scenarios.py), CCA = cubic and reno, run once per seed (linkemu's seed; the two arms of a
seed run back to back).  Resumable: a run folder with a summary.json is not run again.

``report`` writes docs/l4s/a3c.md (one row per run and the verdicts, means over seeds) and
docs/l4s/a3c-closed-loop.png (p' and the Classic sojourn over time, PI against the agent, first
seed of each CCA).

    sudo nice -n 5 .venv/bin/python testbed/l4s/a3c_closed_loop.py run --seeds 1 2 [--out results/a3c-closed-loop]
        [--actor results/a3c-N/actor.json]   # a candidate in the A3C arm instead of the shipped actor
        [--ccas cubic] [--arms PI]           # a subset (a later call adds the rest; runs done are skipped)
    .venv/bin/python testbed/l4s/a3c_closed_loop.py report [--out results/a3c-closed-loop]
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ccswitch.tables import num
from ccswitch.testbed.l4s.report_phases import analyse

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SCENARIOS = HERE.parent / "scenarios"
CCAS = ("cubic", "reno")
ARMS = {"PI": "", "A3C": "-a3c", "K4": "-k4"}
"""The arms: the PI controller (k = 2), the A3C agent, and (cubic only, on request) the PI with k = 4 by hand."""
DEFAULT_ARMS = ("PI", "A3C")
C_MEAN_MAX_MS, L_P99_MAX_MS, UTIL_POINTS = 17.0, 2.0, 2.0
LC_MAX = 1.5
"""The stretch item's balance: L:C per flow within 1.5:1 either way in every phase (1/1.5 <= L:C <= 1.5)."""


T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)
"""Student's t 0.975 quantiles for 1..10 degrees of freedom (a 95 % two-sided interval over <= 11 seeds)."""


def paired_difference(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """Mean of a[i] - b[i] over paired seeds and the half-width of its 95 % t interval (nan for one pair).

    The PI and the agent of one seed see the same draws (linkemu's seed) and run back to back, so the
    seed-to-seed spread cancels in the pairs: a small difference can be told from noise with few seeds."""
    d = [x - y for x, y in zip(a, b, strict=True)]
    if len(d) < 2:
        return (d[0] if d else math.nan), math.nan
    df = min(len(d) - 1, len(T_975))
    return statistics.mean(d), T_975[df - 1] * statistics.stdev(d) / math.sqrt(len(d))


def lc_within(lcs: Sequence[float]) -> bool:
    """Every phase's L:C within LC_MAX:1 either way."""
    return bool(lcs) and all(1 / LC_MAX <= x <= LC_MAX for x in lcs)


def with_actor(scenario: Any, actor: Path) -> Any:
    """*scenario* with its uplink DualPI2's agent replaced by *actor* (a candidate before it is shipped)."""
    from dataclasses import replace

    up = scenario.link.uplink
    return replace(scenario, link=replace(scenario.link, uplink=replace(up, qdisc=replace(up.qdisc,
                                                                                          agent=actor.resolve()))))


def run(seeds: Sequence[int], out: Path, actor: Path | None = None, ccas: Sequence[str] = CCAS,
        arms: Sequence[str] = DEFAULT_ARMS) -> int:
    from ccswitch.bpf.prague import ensure_prague
    from ccswitch.testbed.reports.run import report_run
    from ccswitch.testbed.runs.runner import run_once
    from ccswitch.testbed.scenario import ScenarioError, load_scenario

    todo = [(cca, arm, seed) for seed in seeds for cca in ccas for arm in arms]
    try:
        scen = {(cca, arm): load_scenario(SCENARIOS / f"l4s-dyn-{cca}-vs-prague{ARMS[arm]}.toml")
                for cca in ccas for arm in {*arms, "A3C"}}
    except ScenarioError as e:
        print(f"a3c_closed_loop.py: {e} (make_scenarios.py writes the -a3c files once models/dualpi2_a3c.json "
              "exists)", file=sys.stderr)
        return 2
    if actor is not None:
        if not actor.is_file():
            print(f"a3c_closed_loop.py: --actor {actor}: no such file (a training run writes OUT/actor.json)",
                  file=sys.stderr)
            return 2
        scen |= {(cca, "A3C"): with_actor(scen[cca, "A3C"], actor) for cca in ccas}
    handle = ensure_prague()
    t0 = time.monotonic()
    done = 0
    try:
        for i, (cca, arm, seed) in enumerate(todo, 1):
            run_dir = out / f"{cca}-{arm}" / f"seed-{seed}"
            if (run_dir / "summary.json").is_file():
                continue
            run_once(scen[cca, arm], run_dir, seed=seed, label=f"{cca} {arm} seed {seed}", progress=False)
            report_run(run_dir, plots=False)
            done += 1
            el = time.monotonic() - t0
            left = len(todo) - i
            print(f"a3c_closed_loop [{i}/{len(todo)}] {cca} {arm} seed {seed} done; load "
                  f"{os.getloadavg()[0]:.1f}; ETA {el / done * left:.0f} s", flush=True)
    finally:
        handle.close()
    return 0


def run_metrics(run_dir: Path) -> dict[str, Any]:
    """The issue's four numbers (and L:C per phase) of one run folder."""
    r = analyse(run_dir)
    emu = r.emulator or {}
    cl, q = emu.get("classes") or {}, emu.get("qdisc_stats") or {}
    c, l4s = cl["classic"], cl["l4s"]
    summary = json.loads((run_dir / "summary.json").read_text())
    agent = (summary["meta"].get("router_agents") or {}).get("uplink") or {}
    utils = [p.utilisation for p in r.phases if p.utilisation == p.utilisation]
    return {
        "c_mean_ms": c["sojourn_us"]["mean"] / 1000, "c_p99_ms": c["sojourn_us"]["p99"] / 1000,
        "l_p99_ms": l4s["sojourn_us"]["p99"] / 1000,
        "util": statistics.mean(utils) if utils else math.nan,
        "c_drop_pct": 100 * c["drops_total"] / (c["packets_out"] + c["drops_total"]),
        "p_mean": q.get("p_prime_mean", math.nan),
        "lc": [p.lc_ratio for p in r.phases if p.lc_ratio == p.lc_ratio],
        "agent_steps": agent.get("steps"), "agent_error": agent.get("error"),
        "phases": r.phases,
    }


def report(out: Path, doc: Path, png: Path) -> int:
    rows: dict[tuple[str, str, int], dict[str, Any]] = {}
    for cca in CCAS:
        for arm in ARMS:
            for d in sorted((out / f"{cca}-{arm}").glob("seed-*")):
                if (d / "summary.json").is_file():
                    rows[cca, arm, int(d.name.split("-")[1])] = run_metrics(d)
    if not rows:
        print(f"a3c_closed_loop.py: no finished runs under {out}", file=sys.stderr)
        return 1
    lines = ["| Classic CCA | controller | seed | C sojourn mean (ms) | C p99 (ms) | L p99 (ms) | utilisation | "
             "C dropped | p' mean | L:C per phase |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for (cca, arm, seed), m in sorted(rows.items()):
        lc = ", ".join(f"{x:.2f}" for x in m["lc"])
        lines.append(f"| {cca} | {arm} | {seed} | {num(m['c_mean_ms'], 2)} | {num(m['c_p99_ms'], 1)} | "
                     f"{num(m['l_p99_ms'], 2)} | {100 * m['util']:.1f} % | {num(m['c_drop_pct'], 2)} % | "
                     f"{num(m['p_mean'], 3)} | {lc} |")
    verdict = ["", "| Classic CCA | seeds | C mean <= 17 ms | L p99 <= 2 ms | utilisation within 2 points of PI "
               "| C drops no higher than PI | C drops A3C - PI, paired (95 % interval) "
               "| L:C within 1.5:1 in every phase (A3C; PI) |",
               "|---|---:|---|---|---|---|---|---|"]
    for cca in CCAS:
        seeds = sorted({s for (c, a, s) in rows if c == cca and (c, "PI", s) in rows and (c, "A3C", s) in rows})
        if not seeds:
            continue

        def mean(arm: str, key: str, cca: str = cca, seeds: list[int] = seeds) -> float:
            return statistics.mean(rows[cca, arm, s][key] for s in seeds)

        a_c, a_l, a_u, p_u = mean("A3C", "c_mean_ms"), mean("A3C", "l_p99_ms"), mean("A3C", "util"), mean("PI", "util")
        a_d, p_d = mean("A3C", "c_drop_pct"), mean("PI", "c_drop_pct")
        ok = {True: "met", False: "NOT met"}
        d_mean, d_half = paired_difference([rows[cca, "A3C", s]["c_drop_pct"] for s in seeds],
                                           [rows[cca, "PI", s]["c_drop_pct"] for s in seeds])
        d_cell = (f"{d_mean:+.3f} points" if math.isnan(d_half) else
                  f"{d_mean:+.3f} ({d_mean - d_half:+.3f}..{d_mean + d_half:+.3f}) points")
        verdict.append(
            f"| {cca} | {len(seeds)} | {a_c:.2f} ms (PI {mean('PI', 'c_mean_ms'):.2f}): {ok[a_c <= C_MEAN_MAX_MS]} | "
            f"{a_l:.2f} ms (PI {mean('PI', 'l_p99_ms'):.2f}): {ok[a_l <= L_P99_MAX_MS]} | "
            f"{100 * a_u:.1f} % vs {100 * p_u:.1f} %: {ok[100 * (p_u - a_u) <= UTIL_POINTS]} | "
            f"{a_d:.2f} % vs {p_d:.2f} %: {ok[a_d <= p_d]} | {d_cell} | "
            f"{ok[all(lc_within(rows[cca, 'A3C', s]['lc']) for s in seeds)]}; "
            f"{ok[all(lc_within(rows[cca, 'PI', s]['lc']) for s in seeds)]} |")
    text = "\n".join(lines + verdict + drops_by_phase(rows)) + "\n"
    _plot(out, png, rows)
    if doc is not None:
        doc.parent.mkdir(parents=True, exist_ok=True)
        doc.write_text(text)
    print(text)
    return 0


BASE_RTT_MS = 10.0
"""The dynamic template's base RTT (5 ms each way): the Classic RTT is this plus the C queue's sojourn."""


def drops_by_phase(rows: dict[tuple[str, str, int], dict[str, Any]]) -> list[str]:
    """Classic drops per phase, agent over PI of the same seed: observed, and predicted by the Classic
    response function (rate ~ 1/(RTT sqrt(p)), so p ~ 1/(rate x RTT)^2) from the Classic flows' per-flow
    rate and RTT.  Tells whether the agent's extra drops are the price of moving rate between the classes
    (predicted = observed) or come from its p' itself (observed above predicted)."""
    ratios: dict[str, list[tuple[float, float]]] = {}
    for cca, arm, seed in rows:
        if arm != "A3C" or (cca, "PI", seed) not in rows:
            continue
        for a, p in zip(rows[cca, "A3C", seed]["phases"], rows[cca, "PI", seed]["phases"], strict=False):
            ra, rp = a.per_flow_mbps.get("Classic"), p.per_flow_mbps.get("Classic")
            da, dp = a.drops_pct.get("Classic"), p.drops_pct.get("Classic")
            if not (ra and rp and da and dp):
                continue
            rtt_a, rtt_p = (BASE_RTT_MS + x.delay_ms["Classic"]["mean"] for x in (a, p))
            ratios.setdefault(a.label, []).append((da / dp, ((rp * rtt_p) / (ra * rtt_a)) ** 2))
    if not ratios:
        return []
    lines = ["", "Classic drops per phase, A3C / PI of the same seed (both CCAs; predicted: p ~ 1/(rate x RTT)^2 "
             "from the Classic flows' per-flow rate and RTT):", "",
             "| phase (L-C) | pairs | observed, geometric mean (range) | predicted, geometric mean (range) |",
             "|---|---:|---|---|"]
    for label, xs in ratios.items():
        obs, pred = [o for o, _ in xs], [q for _, q in xs]
        lines.append(f"| {label} | {len(xs)} | x{statistics.geometric_mean(obs):.3f} ({min(obs):.2f}-{max(obs):.2f}) | "
                     f"x{statistics.geometric_mean(pred):.3f} ({min(pred):.2f}-{max(pred):.2f}) |")
    return lines


def _series(run_dir: Path) -> tuple[list[float], list[float], list[float]]:
    t, p, c = [], [], []
    with (run_dir / "emulator" / "intervals.csv").open(newline="") as f:
        for row in csv.DictReader(f):
            if row["direction"] != "uplink" or row["client"] != "-1":
                continue
            t.append(float(row["t_s"]))
            p.append(float(row["p_prime"]) if row.get("p_prime") else math.nan)
            c.append(float(row["c_sojourn_mean_us"]) / 1000 if row.get("c_sojourn_mean_us") else math.nan)
    return t, p, c


def _k_series(run_dir: Path) -> tuple[list[float], list[float]]:
    """k over time from a residual-k agent's rows (empty for the PI arms and other agents)."""
    path = run_dir / "emulator" / "agent-uplink.csv"
    if not path.is_file():
        return [], []
    with path.open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get("k_set")]
    return [float(r["t_s"]) for r in rows], [float(r["k_set"]) for r in rows]


def _plot(out: Path, png: Path, rows: dict[tuple[str, str, int], dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ccas = [c for c in CCAS if any(k[0] == c for k in rows)]
    fig, axes = plt.subplots(3, len(ccas), figsize=(6.5 * len(ccas), 8.5), sharex=True, squeeze=False)
    for j, cca in enumerate(ccas):
        seed = min(s for (c, _a, s) in rows if c == cca)
        for arm, color in (("PI", "C1"), ("K4", "C2"), ("A3C", "C0")):
            d = out / f"{cca}-{arm}" / f"seed-{seed}"
            if not (d / "emulator" / "intervals.csv").is_file():
                continue
            t, p, c = _series(d)
            axes[0, j].plot(t, p, color=color, label=arm)
            axes[1, j].plot(t, c, color=color, label=arm)
            tk, k = _k_series(d)
            if tk:
                axes[2, j].plot(tk, k, color=color, lw=0.8, label=f"{arm} (set every interval)")
            else:
                axes[2, j].axhline(4.0 if arm == "K4" else 2.0, color=color, label=f"{arm} (scenario)")
        axes[0, j].set_title(f"{cca} vs prague, seed {seed} (phases L-C: 1-1, 4-1, 4-4, 1-4)", fontsize=10)
        axes[0, j].set_ylabel("p' (1 s mean)")
        axes[1, j].set_ylabel("Classic sojourn mean (ms)")
        axes[1, j].axhline(15, color="k", lw=0.8, ls="--")
        axes[2, j].set_ylabel("coupling factor k")
        axes[2, j].set_xlabel("time (s)")
        for ax in axes[:, j]:
            ax.grid(alpha=0.3)
            for b in (20, 40, 60):
                ax.axvline(b, color="grey", lw=0.6)
            ax.legend(fontsize=8)
    fig.suptitle("DualPI2's p': A3C agent vs PI controller (50 Mbit/s, 5 ms)", fontsize=11)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)


def main(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    r.add_argument("--out", type=Path, default=ROOT / "results" / "a3c-closed-loop")
    r.add_argument("--actor", type=Path, help="run the A3C arm with this actor file instead of the shipped one")
    r.add_argument("--ccas", nargs="+", choices=CCAS, default=list(CCAS), help="Classic CCAs to run (default: both)")
    r.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(DEFAULT_ARMS),
                   help="arms to run (default: PI A3C; K4: the PI with k = 4, cubic only)")
    p = sub.add_parser("report")
    p.add_argument("--out", type=Path, default=ROOT / "results" / "a3c-closed-loop")
    p.add_argument("--doc", type=Path, default=ROOT / "docs" / "l4s" / "a3c.md")
    p.add_argument("--png", type=Path, default=ROOT / "docs" / "l4s" / "a3c-closed-loop.png")
    a = ap.parse_args(argv)
    if a.cmd == "run":
        if os.geteuid() != 0:
            print("a3c_closed_loop.py: needs root (namespaces, BPF Prague); rerun with sudo", file=sys.stderr)
            return 2
        return run(a.seeds, a.out, a.actor, a.ccas, a.arms)
    return report(a.out, a.doc, a.png)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
