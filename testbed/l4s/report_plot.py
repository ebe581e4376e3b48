"""The L4S report's plot of one run (``<out>/<scenario>.png``), the layout of paper 004 figures 3-4.

Top: total / L4S / Classic throughput with each class's fair share (dashed); middle: every flow's
throughput with the per-flow fair share (and ccswitchd's switches, blue); bottom: L and C queue delay
mean (solid), p90 (dashed), max (dotted), log scale.
"""

from __future__ import annotations

from pathlib import Path

from ccswitch.testbed.l4s.make_scenarios import QUEUE_LABEL
from ccswitch.testbed.l4s.report_model import CLASSES, HEADER_FACTOR, QUEUE_OF, RunResult


def plot(r: RunResult, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 1, figsize=(10, 9), sharex=True, gridspec_kw={"height_ratios": [1, 1.3, 1]})
    t = r.t_s
    x = [ti - 0.5 for ti in t]
    tot = [0.0] * len(t)
    cls = {k: [0.0] * len(t) for k in CLASSES}
    for f in r.flows:
        s = r.series.get(f.name, [])
        for i, v in enumerate(s):
            if v == v:
                tot[i] += v
                cls[f.klass][i] += v
    cap = r.rate_mbit / HEADER_FACTOR
    ax = axes[0]
    ax.plot(x, tot, "k--", lw=1.2, label="total")
    colours = {"L4S": "tab:red", "Classic": "tab:green"}
    for k in CLASSES:
        ax.plot(x, cls[k], color=colours[k], lw=1.5, label=f"{k} (aggregate)")
        xs, ys = [], []
        for p in r.phases:
            n = p.counts["L4S"] + p.counts["Classic"]
            xs += [p.start_s, p.end_s]
            ys += [cap * p.counts[k] / n] * 2
        ax.plot(xs, ys, color="grey", ls="--" if k == "L4S" else ":", lw=1, label=f"{k} fair share")
    ax.set_ylabel("Mbit/s")
    ax.legend(fontsize=7, ncol=3, loc="upper right")
    queue = QUEUE_LABEL.get(r.queue_kind, r.queue_kind)
    ax.set_title(f"{r.scenario} ({queue}" + ("; ccswitchd on the classic senders)" if r.daemon else ")"), fontsize=10)
    ax = axes[1]
    palette = {"L4S": plt.cm.Reds, "Classic": plt.cm.Greens}
    for k in CLASSES:
        mine = [f for f in r.flows if f.klass == k]
        for j, f in enumerate(mine):
            s = r.series.get(f.name, [])
            shade = 0.45 + 0.5 * (j / max(1, len(mine) - 1)) if len(mine) > 1 else 0.8
            pol = f" {f.policy}" if f.policy not in (None, "gold") or any(g.policy not in (None, "gold")
                                                                        for g in r.flows) else ""
            ax.plot(x[:len(s)], s, color=palette[k](shade), lw=1, ls="--" if f.policy == "silver" else "-",
                    label=f"{f.name} {f.cca} {f.rtt_ms:g} ms{pol}")
    xs, ys = [], []
    for p in r.phases:
        xs += [p.start_s, p.end_s]
        ys += [cap / (p.counts["L4S"] + p.counts["Classic"])] * 2
    ax.plot(xs, ys, color="grey", lw=1.5, label="fair share")
    for e in r.daemon_events:
        ax.axvline(e["t_s"], color="tab:blue", ls="--" if e["action"] == "switch" else ":", lw=0.8, alpha=0.7)
        ax.text(e["t_s"], ax.get_ylim()[1] * 0.97, f"{e['flow']}→{e['to']}", rotation=90, fontsize=6,
                va="top", ha="right", color="tab:blue")
    ax.set_ylabel("Mbit/s per flow")
    ax.legend(fontsize=6, ncol=4, loc="upper right")
    ax = axes[2]
    if r.queue_t_s:
        qx = [ti - 0.5 for ti in r.queue_t_s]
        for k in CLASSES:
            q = r.queue[QUEUE_OF[k]]
            c = colours[k]
            ax.plot(qx, [max(v, 0.01) for v in q["mean"]], color=c, ls="-", lw=1.2, label=f"{k} mean")
            ax.plot(qx, [max(v, 0.01) for v in q["p90"]], color=c, ls="--", lw=1, label=f"{k} p90")
            ax.plot(qx, [max(v, 0.01) for v in q["max"]], color=c, ls=":", lw=1, label=f"{k} max")
        ax.set_yscale("log")
        ax.legend(fontsize=7, ncol=3, loc="upper right")
    else:
        ax.text(0.5, 0.5, "no per-queue statistics in emulator/intervals.csv", ha="center", transform=ax.transAxes)
    ax.set_ylabel("queue delay (ms)")
    ax.set_xlabel("time (s)")
    for a in axes:
        for p in r.phases[1:]:
            a.axvline(p.start_s, color="0.85", lw=0.8, zorder=0)
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{r.scenario}.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
