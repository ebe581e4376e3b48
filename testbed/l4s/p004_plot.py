"""Paper 004 side by side as one figure (``p004-side-by-side<variant>.png``): bars per template phase, DualPI2
beside VDQ-CSAQM, mean over seeds with min-max error bars."""

from __future__ import annotations

from pathlib import Path

from ccswitch.testbed.l4s.make_scenarios import QUEUE_LABEL, QUEUES
from ccswitch.testbed.l4s.p004_cells import TEMPLATES, VDQ_ONLY, Cell, c_mean, cells_of, l_mean
from ccswitch.testbed.l4s.p004_targets import L_MEAN_MS, SOLO_UTIL
from ccswitch.testbed.l4s.report_tables import ratio_text


def plot(cells: dict[tuple[str, str], list[Cell]], out: Path, variant: str = "") -> Path:
    """Bars per template phase, DualPI2 beside VDQ-CSAQM, mean over seeds with min-max error bars; *variant*
    (``-rtt40``, ``-steady``...) names the file and the title."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    order = [t for t in TEMPLATES if t not in VDQ_ONLY and any((t, q) in cells for q in QUEUES)]
    xs: list[tuple[str, int, str]] = []
    for t in order:
        slots_ = sorted({c.slot for q in QUEUES for c in cells.get((t, q), [])})
        for k in slots_:
            c = next(c for q in QUEUES for c in cells.get((t, q), []) if c.slot == k)
            xs.append((t, k, c.label))
    panels = [("L queue delay mean (ms)", l_mean, "log", [(L_MEAN_MS, "target < 1 ms")], None),
              ("C queue delay mean (ms)", c_mean, "linear", [], None),
              ("L:C per-flow goodput", lambda p: p.lc_ratio, "log", [(0.25, "1:4"), (4.0, "4:1"), (1.0, None)], None),
              ("Jain's index", lambda p: p.jain, "linear", [], (0.4, 1.02)),
              ("utilisation (%)", lambda p: 100 * p.utilisation, "linear", [(100 * SOLO_UTIL, "80 %")], (40, 105))]
    fig, axes = plt.subplots(len(panels), 1, figsize=(max(12, 0.42 * len(xs) + 2), 2.3 * len(panels) + 1),
                             sharex=True)
    colours = {"dualpi2": "tab:blue", "vdq_csaqm": "tab:orange"}
    w = 0.4
    for ax, (title, get, scale, lines, ylim) in zip(axes, panels, strict=True):
        for j, q in enumerate(QUEUES):
            by = {(c.template, c.slot): c for c in cells_of(cells, q)}
            means, err_lo, err_hi, pos = [], [], [], []
            for i, (t, k, _) in enumerate(xs):
                c = by.get((t, k))
                s = c.stat(get) if c is not None else None
                if s is None or s.n == 0:
                    continue
                pos.append(i + (j - 0.5) * w)
                means.append(s.mean)
                err_lo.append(s.mean - s.lo)
                err_hi.append(s.hi - s.mean)
            ax.bar(pos, means, w, color=colours[q], label=QUEUE_LABEL[q], yerr=[err_lo, err_hi], capsize=2,
                   error_kw={"lw": 0.8})
        for y, lab in lines:
            ax.axhline(y, color="grey", ls=":", lw=1)
            if lab:
                ax.text(-0.6, y, lab, fontsize=7, va="bottom", ha="left", color="dimgrey")
        ax.set_yscale(scale)
        if scale == "log":
            from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

            if "L:C" in title:
                ticks = [0.125, 0.25, 0.5, 1.0, 2.0, 4.0]
                ax.yaxis.set_major_locator(FixedLocator(ticks))
                ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: ratio_text(v).replace(".0", "")))
                ax.set_ylim(0.08, 5.0)
            else:
                ax.yaxis.set_major_locator(FixedLocator([0.1, 0.2, 0.5, 1.0, 2.0]))
                ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
                ax.set_ylim(0.1, 2.0)
            ax.yaxis.set_minor_locator(NullLocator())
        if ylim:
            ax.set_ylim(*ylim)
        ax.set_ylabel(title, fontsize=8)
        ax.grid(axis="y", alpha=0.3)
        prev = None
        for i, (t, _, _) in enumerate(xs):
            if prev is not None and t != prev:
                ax.axvline(i - 0.5, color="0.6", lw=0.8)
            prev = t
    for t in order:  # template names above its phases
        idx = [i for i, (tt, _, _) in enumerate(xs) if tt == t]
        short = t.removeprefix("l4s-").removesuffix("-vs-prague").replace("-prague", "")
        axes[0].text((idx[0] + idx[-1]) / 2, 1.02, short, transform=axes[0].get_xaxis_transform(), ha="center",
                     va="bottom", fontsize=8)
    axes[0].legend(fontsize=8, loc="upper right", ncol=2)
    axes[-1].set_xticks(range(len(xs)))
    axes[-1].set_xticklabels([lab for _, _, lab in xs], fontsize=7)
    axes[-1].set_xlabel("phase: L4S-Classic flows", fontsize=8)
    rtt = "40 ms" if "rtt40" in variant else "5 ms"
    vdq = "VDQ-CSAQM (steady CTV)" if "steady" in variant else "VDQ-CSAQM"
    fig.suptitle(f"Paper 004 templates at 50 Mbit/s, {rtt} base RTT: DualPI2 vs {vdq} per phase, mean over "
                 "seeds, error bars min-max", fontsize=10)
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"p004-side-by-side{variant}.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
