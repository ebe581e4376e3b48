"""The report of paper 001's sweep (``lfq_reproduction sweep``): its Table I and Table II, and Figure 8.

Paper 001 (section V-A) reports how the learned limit depends on the flow as
*the correlation between a change of bandwidth/delay and the maximum queue size
output by the neural network* (Table I: New Reno 98.3 % with the bandwidth,
99.1 % with the delay; BIC 80.2 % and 90.2 %), the mean output per CCA (Table
II: New Reno 22, BIC 8 packets) and the outputs of a sweep (Figure 8).  The
sweep holds the other variable still, so a limit that follows the BDP
correlates with each variable near 1 (over random draws of both it could not:
with b and RTT independent and uniform, the BDP itself correlates with b at
only ~0.7).

Reads ``RESULTS/lfq/run-NNNNN.json`` (the runs carry ``sweep`` = the variable
swept, and ``rep``).  Per CCA and swept variable: the mean limit per point (over
its flows) and two Pearson correlations with the variable: of the point means
(the paper's measure: one output per point) and of the single flows (the
spread between repetitions included).  Writes a Markdown page and a PNG.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from .lfq_reproduction import actors, bdp_packets, fmt, pearson

PAPER_TABLE_I = {"reno": {"bandwidth_mbit": 0.983, "rtt_ms": 0.991}, "bic": {"bandwidth_mbit": 0.802, "rtt_ms": 0.902}}
"""Paper 001 Table I (alpha of section V-A): correlation of the output limit with the bandwidth and the delay."""
PAPER_TABLE_II = {"reno": 22.0, "bic": 8.0}
"""Paper 001 Table II: the average output maximum queue length (packets)."""
TARGET_CORR = 0.9
"""Issue 13: the learned limit grows with bandwidth and delay for Reno, correlation >= 0.9."""
TARGET_RATIO = 2.0
"""Issue 13: Reno's mean learned limit >= 2x the BIC slot's."""
VARIABLES = {"bandwidth_mbit": "bandwidth (Mbit/s)", "rtt_ms": "RTT (ms)"}


def load_sweep(results: Path) -> list[dict[str, Any]]:
    """The sweep's LFQ runs that recorded a late limit (a flow too short to have a second half has none)."""
    runs = [json.loads(f.read_text()) for f in sorted((results / "lfq").glob("run-*.json"))]
    return [r for r in runs if r.get("sweep") in VARIABLES and r.get("limit_late") is not None]


def _slope(points: list[dict[str, float]], key: str) -> float:
    """Least-squares slope of *key* over the swept variable (nan with fewer than two points)."""
    if len(points) < 2:
        return math.nan
    return float(np.polyfit([p["x"] for p in points], [p[key] for p in points], 1)[0])


def summarise_sweep(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per CCA (as run: reno, cubic or bic) and swept variable: points, correlations; per CCA: mean limit."""
    ccas = sorted({r["cca"] for r in runs}, key=lambda c: (c != "reno", c))
    out: dict[str, Any] = {"ccas": ccas, "sender": ", ".join(sorted({str(r.get("sender", "linux")) for r in runs})),
                           "reps": max((int(r.get("rep", 1)) for r in runs), default=0), "per_cca": {},
                           "actors": actors({"lfq": {r["i"]: r for r in runs}})}
    for cca in ccas:
        mine = [r for r in runs if r["cca"] == cca]
        per: dict[str, Any] = {"mean_limit": float(np.mean([r["limit_late"] for r in mine])), "n": len(mine)}
        for var in VARIABLES:
            rs = [r for r in mine if r["sweep"] == var]
            xs = sorted({float(r[var]) for r in rs})
            points = []
            for x in xs:
                at = [r for r in rs if float(r[var]) == x]
                lims = [r["limit_late"] for r in at]
                points.append({"x": x, "n": len(at), "limit": float(np.mean(lims)), "sd": float(np.std(lims)),
                               "utilisation": float(np.mean([r["throughput_mbit"] / r["bandwidth_mbit"] for r in at])),
                               "avg_queue": float(np.mean([r["avg_queue_pkts"] for r in at])),
                               "bdp": float(np.mean([bdp_packets(r) for r in at]))})
            per[var] = {"points": points,
                        "corr_points": pearson([p["x"] for p in points], [p["limit"] for p in points]),
                        "corr_flows": pearson([float(r[var]) for r in rs], [r["limit_late"] for r in rs]),
                        "slope_vs_bdp": _slope(points, "limit") / _slope(points, "bdp")}
        out["per_cca"][cca] = per
    if len(ccas) == 2:
        out["ratio"] = out["per_cca"][ccas[0]]["mean_limit"] / out["per_cca"][ccas[1]]["mean_limit"]
    return out


def sweep_markdown(s: dict[str, Any], png: str) -> str:
    ccas = s["ccas"]
    actor = f"LFQ actor {', '.join(s['actors'])}" if s.get("actors") else "the LFQ actor"
    lines = [f"Sender **{s['sender']}** (testbed/runs/tcp_senders.py), {actor}, "
             f"{s['reps']} flow(s) per point; one flow per run, 5 s.  Bandwidth swept at a 15 ms RTT, the RTT at "
             "15 Mbit/s.  Limit = the mean of what the agent set over the flow's second half.", "",
             "**Table I** (correlation of the learned limit with the swept variable; paper 001's is one output "
             "per point, our *points* column; *flows* correlates single flows, repetitions' spread included):", "",
             "| CCA | bandwidth: points | flows | paper | growth / BDP's | RTT: points | flows | paper "
             "| growth / BDP's |", "|---|---|---|---|---|---|---|---|---|"]
    for cca in ccas:
        c = s["per_cca"][cca]
        ref = PAPER_TABLE_I.get("reno" if cca == "reno" else "bic", {})
        lines.append(f"| {cca} | " + " | ".join(
            f"{fmt(c[v]['corr_points'], 2)} | {fmt(c[v]['corr_flows'], 2)} | {ref.get(v, math.nan):.3f} "
            f"| {fmt(c[v]['slope_vs_bdp'], 2)}" for v in VARIABLES) + " |")
    lines += ["", "*Growth / BDP's*: the limit's least-squares slope over the sweep divided by the BDP's (1: the "
              "limit grows packet for packet with the BDP; a correlation says only that it grows in a line)."]
    lines += ["", "**Table II** (mean learned limit over all the sweep's flows, packets):", "",
              "| CCA | ours | paper |", "|---|---|---|"]
    for cca in ccas:
        lines.append(f"| {cca} | {fmt(s['per_cca'][cca]['mean_limit'], 1)} "
                     f"| {PAPER_TABLE_II['reno' if cca == 'reno' else 'bic']:.0f} |")
    if "reno" in s["per_cca"]:
        r = s["per_cca"]["reno"]
        verdict = []
        for var, name in (("bandwidth_mbit", "bandwidth"), ("rtt_ms", "delay")):
            c = r[var]["corr_points"]
            verdict.append(f"with the {name} {fmt(c, 2)} ({'met' if c >= TARGET_CORR else '**not met**'})")
        lines += ["", f"Issue 13's targets, Reno (correlation >= {TARGET_CORR}): " + "; ".join(verdict) + "."]
        if "ratio" in s:
            ok = s["ratio"] >= TARGET_RATIO
            lines[-1] += (f"  Reno:{ccas[1]} mean limit {fmt(s['ratio'], 2)} (target >= {TARGET_RATIO:g}: "
                          f"{'met' if ok else '**not met**'}; the paper 22:8 = 2.75).")
    lines += ["", "Per point (mean limit +- s.d. over the flows / utilisation / average queue, packets):", ""]
    for var, label in VARIABLES.items():
        xs = [p["x"] for p in s["per_cca"][ccas[0]][var]["points"]]
        lines += [f"| {label} | " + " | ".join(ccas) + " | BDP (pkts) |", "|---|" + "---|" * (len(ccas) + 1)]
        for k, x in enumerate(xs):
            cells = []
            for cca in ccas:
                pts = s["per_cca"][cca][var]["points"]
                p = pts[k] if k < len(pts) else None
                cells.append(f"{p['limit']:.1f} +- {p['sd']:.1f} / {100 * p['utilisation']:.0f} % "
                             f"/ {p['avg_queue']:.1f}" if p else "-")
            bdp = s["per_cca"][ccas[0]][var]["points"][k]["bdp"]
            lines.append(f"| {x:g} | " + " | ".join(cells) + f" | {bdp:.1f} |")
        lines.append("")
    lines += [f"![the learned limit against bandwidth and RTT]({png})", ""]
    return "\n".join(lines)


def plot_sweep(s: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ccswitch.models.lfq_ceiling import FULL_LINK_BDP

    fig, ax = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for k, (var, label) in enumerate(VARIABLES.items()):
        for cca, colour in zip(s["ccas"], ("C0", "C3"), strict=False):
            pts = s["per_cca"][cca][var]["points"]
            xs = [p["x"] for p in pts]
            ax[k].errorbar(xs, [p["limit"] for p in pts], yerr=[p["sd"] for p in pts], color=colour, marker="o",
                           capsize=3, label=f"{cca}: learned limit (corr. {s['per_cca'][cca][var]['corr_points']:.2f})")
            need = FULL_LINK_BDP.get(cca, 1.0)
            ax[k].plot(xs, [need * p["bdp"] for p in pts], color=colour, ls=":", lw=1,
                       label=f"{cca}: {need:g} BDP (fills the link)")
        fixed = "RTT 15 ms" if var == "bandwidth_mbit" else "bandwidth 15 Mbit/s"
        ax[k].set(xlabel=label, title=f"limit vs {label.split(' ')[0]} ({fixed})")
        ax[k].grid(alpha=0.3)
        ax[k].legend(fontsize=8)
    ax[0].set_ylabel("learned limit, 2nd half (packets)")
    fig.suptitle(f"paper 001 Figure 8 set-up: sender {s['sender']}, {s['reps']} flows per point (mean +- s.d.)",
                 fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report_sweep(results: Path, doc: Path) -> dict[str, Any]:
    runs = load_sweep(results)
    if not runs:
        raise SystemExit(f"no sweep runs with a learned limit in {results}/lfq: run `lfq_reproduction sweep` first")
    s = summarise_sweep(runs)
    png = doc.with_suffix(".png")
    plot_sweep(s, png)
    head = ("# Paper 001 (LFQ): the learned limit against bandwidth and delay (its Table I, Table II, Figure 8)\n\n"
            "Generated by `python -m ccswitch.testbed.lfq_reproduction report-sweep` from the runs of `... sweep` "
            "(method in testbed/reports/lfq_sweep.py; context in [lfq.md](lfq.md)).\n\n")
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(head + sweep_markdown(s, png.name))
    (results / "summary-sweep.json").write_text(json.dumps(s, indent=1, default=float) + "\n")
    return s
