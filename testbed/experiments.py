"""End-to-end fairness experiments: each scenario with static CCAs and with ccswitchd.

Issue 5, section 4.  Every ``testbed/scenarios/fair-*.toml`` (and
``default.toml``) carries a ``[daemon]`` table; it runs in two or more arms::

    static      the file without its daemon: the flows keep their initial CCA
    dqn         ccswitchd on every client with the shipped DQN policy
    heuristic   ccswitchd with paper 002's evaluation function
    daemon-static-CCA   ccswitchd with policy "static": every flow put on CCA (what a policy
                        that always picks CCA would reach; e.g. daemon-static-bbr)

``run`` writes ``OUT/<scenario>/<arm>/run-01-seed-1/`` (the runner's run
folders); ``report`` reads them back and writes ``docs/results-daemon.md``
with one table per scenario (last-half metrics, static vs daemon, the
targets checked) and the plots ``docs/daemon/<scenario>.png``.

    python -m ccswitch.testbed.experiments run [--arms static,dqn] [--out results/daemon] [SCENARIO ...]
    python -m ccswitch.testbed.experiments report [--results results/daemon] [--doc docs/results-daemon.md]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tomllib
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from .report import TARGET_JAIN, TARGET_MIN_SHARE, TARGET_UTILISATION, RunData, load_run
from .scenario import DaemonSettings, Scenario, load_scenario

REPO = Path(__file__).resolve().parent.parent
SCENARIOS = REPO / "testbed" / "scenarios"
DEFAULT_OUT = Path("results/daemon")
DEFAULT_DOC = REPO / "docs" / "results-daemon.md"
ARMS = ("static", "dqn", "heuristic", "daemon-static-cubic", "daemon-static-bbr", "daemon-static-pcc")
DEFAULT_ARMS = ("static", "dqn")


def scenario_files() -> list[Path]:
    return [SCENARIOS / "default.toml", *sorted(SCENARIOS.glob("fair-*.toml"))]


def arm_scenario(sc: Scenario, arm: str, policy_file: Path | None = None,
                 guard: Sequence[tuple[str, Any]] = ()) -> Scenario:
    """*sc* for one arm: no daemon (static), or its [daemon] table with the arm's policy.

    *policy_file* replaces the dqn arm's policy (a candidate, without touching
    models/policy.json); *guard* adds or overrides [daemon] guard keys in every daemon arm."""
    if arm == "static":
        return replace(sc, daemon=None)
    base = sc.daemon or DaemonSettings()
    if guard:
        keys = {k for k, _ in guard}
        base = replace(base, guard=tuple((k, v) for k, v in base.guard if k not in keys) + tuple(guard))
    if arm.startswith("daemon-static-"):
        return replace(sc, daemon=replace(base, policy="static", cca=arm.removeprefix("daemon-static-"),
                                          policy_file=None))
    if arm == "dqn" and policy_file is not None:
        return replace(sc, daemon=replace(base, policy=arm, cca=None, policy_file=policy_file.resolve()))
    return replace(sc, daemon=replace(base, policy=arm, cca=None, policy_file=None))


def run(files: Sequence[Path], arms: Sequence[str], out: Path, progress: bool = True,
        policy_file: Path | None = None, guard: Sequence[tuple[str, Any]] = ()) -> list[Path]:
    from .runner import run_scenario

    if policy_file is not None and not policy_file.is_file():
        raise ValueError(f"--policy-file {policy_file}: no such file (give a policy exported by ccswitch train)")
    done = []
    for f in files:
        sc = load_scenario(f)
        for arm in arms:
            dest = out / sc.name / arm
            if (dest / "run-01-seed-1" / "summary.json").is_file():
                print(f"skip {dest} (already there; delete it to run again)", file=sys.stderr)
                done.append(dest)
                continue
            run_scenario(arm_scenario(sc, arm, policy_file, guard), dest, progress=progress, plots=True)
            done.append(dest)
    return done


# ---------------------------------------------------------------- report ---


def _runs(results: Path) -> dict[str, dict[str, RunData]]:
    """scenario -> arm -> run (the first seed of each arm folder)."""
    out: dict[str, dict[str, RunData]] = {}
    for sc_dir in sorted(p for p in results.iterdir() if p.is_dir()):
        for arm_dir in sorted(p for p in sc_dir.iterdir() if p.is_dir()):
            run_dir = arm_dir / "run-01-seed-1"
            if (run_dir / "summary.json").is_file():
                out.setdefault(sc_dir.name, {})[arm_dir.name] = load_run(run_dir)
    return out


def _metrics(run: RunData) -> dict[str, Any]:
    m = run.summary.get("metrics", {}).get("last_half")
    if m is None:  # reported before last_half existed: compute it now
        from .report import last_half

        m = last_half(run)
    return m


def _f(v: float | None, nd: int = 2, pct: bool = False) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v * 100:.1f} %" if pct else f"{v:.{nd}f}"


def decisions_summary(run: RunData) -> dict[str, Any]:
    """Counts of the daemons' decisions by action and verdict, and the switches with reasons."""
    actions: Counter[str] = Counter()
    switches = []
    blocked: Counter[str] = Counter()
    names = {}
    for f in run.flows:
        names[f["client"]] = f["name"]
    t0 = run.meta["t0_epoch"]
    for client_dir in sorted((run.run_dir / "daemon").glob("C*")):
        path = client_dir / "decisions.jsonl"
        if not path.is_file():
            continue
        for line in path.read_text(errors="replace").splitlines():
            try:
                d = json.loads(line)
            except ValueError:
                continue
            actions[f"{d.get('action')}/{d.get('verdict')}"] += 1
            if d.get("action") in ("switch", "revert", "manual") and d.get("verdict") not in ("blocked", "kept"):
                switches.append({"t_s": round(float(d.get("ts", t0)) - t0, 1), "client": client_dir.name,
                                 "from": d.get("from"), "to": d.get("to"), "action": d.get("action"),
                                 "verdict": d.get("verdict"), "reason": d.get("reason", "")})
            elif d.get("verdict") == "blocked":
                blocked[str(d.get("reason", "")).split(":")[0]] += 1
    return {"actions": dict(actions), "switches": switches, "blocked": dict(blocked)}


def plot_scenario(name: str, arms: dict[str, RunData], path: Path) -> Path:
    """Goodput over time, one panel per arm, the CCA changes marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    order = [a for a in ARMS if a in arms] + [a for a in arms if a not in ARMS]
    ncols = min(3, len(order))  # rows of three panels: one row of six is too wide to read
    nrows = math.ceil(len(order) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(6.2 * ncols, 3.8 * nrows), sharey=True, squeeze=False)
    for ax in axes.flat[len(order):]:
        ax.set_visible(False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, arm in zip(axes.flat, order, strict=False):
        run = arms[arm]
        dur = run.meta["duration_s"]
        for i, f in enumerate(run.flows):
            s = run.series[f["name"]]
            ax.plot(s.t_s, s.goodput_mbps, color=colors[i % len(colors)], lw=1.3,
                    label=f"{f['name']} ({'->'.join(dict.fromkeys(s.cca)) or f['cca']})")
            for t, a, b in zip(s.t_s[1:], s.cca, s.cca[1:], strict=False):
                if a != b:
                    ax.axvline(t - run.meta["sample_interval_s"], color=colors[i % len(colors)], ls=":", lw=1)
                    ax.annotate(b, (t - run.meta["sample_interval_s"], 0.97), xycoords=("data", "axes fraction"),
                                fontsize=7, color=colors[i % len(colors)], rotation=90, va="top")
        ax.axvspan(dur / 2, dur, color="0.9", zorder=-1)
        lh = _metrics(run)
        ax.set_title(f"{arm}: min share {_f(lh['min_share'])}, Jain {_f(lh['jain'], 3)}, "
                     f"util {_f(lh['utilisation'], pct=True)}", fontsize=9)
        ax.set_xlim(0, dur)
        ax.set_xlabel("time (s); shaded: last half")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    for row in axes:
        row[0].set_ylabel("goodput (Mbit/s)")
    fig.suptitle(name, fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def report(results: Path, doc: Path, plots_dir: Path | None = None, notes: str = "") -> str:
    """docs/results-daemon.md from the run folders under *results*."""
    runs = _runs(results)
    if not runs:
        raise FileNotFoundError(f"{results}: no <scenario>/<arm>/run-01-seed-1 run folder here")
    plots_dir = plots_dir or doc.parent / "daemon"
    lines = ["# The switching daemon end to end: fairness on the emulated WiFi testbed", "",
             "Issue 5, section 4.  Generated by `python -m ccswitch.testbed.experiments report` from the run "
             f"folders under `{results}` (run folders are not in the repository); the commands to reproduce "
             "are at the end.", ""]
    lines += ["Targets with the daemon, over the last half of each run: every flow at least "
              f"{TARGET_MIN_SHARE:g} of its fair share, Jain's index at least {TARGET_JAIN:g}, utilisation at least "
              f"{TARGET_UTILISATION * 100:g} %.", "",
              "## Summary", "",
              "| Scenario | Arm | Min share (flow) | Jain | Utilisation | p95 RTT (ms) | Switches | Targets met |",
              "|---|---|---:|---:|---:|---:|---:|---|"]
    details = []
    for name, arms in runs.items():
        order = [a for a in ARMS if a in arms] + [a for a in arms if a not in ARMS]
        for arm in order:
            run = arms[arm]
            lh = _metrics(run)
            n_sw = sum(len(v) for v in lh["cca_changes"].values())
            met = "yes" if lh["targets_met"] else "no (" + ", ".join(k for k, ok in lh["targets"].items()
                                                                    if not ok) + ")"
            lines.append(f"| {name} | {arm} | {_f(lh['min_share'])} ({lh['min_share_flow']}) | {_f(lh['jain'], 3)} | "
                         f"{_f(lh['utilisation'], pct=True)} | {_f(lh['rtt_p95_ms'], 1)} | {n_sw} | {met} |")
        png = plot_scenario(name, arms, plots_dir / f"{name}.png")
        first = arms[order[0]]
        details += [f"## {name}", "", first.meta.get("description", ""), "",
                    f"{len(first.flows)} flows, {first.meta['duration_s']:g} s; "
                    f"per flow over the last half (Mbit/s, share of fair share):", "",
                    "| Arm | " + " | ".join(f["name"] for f in first.flows) + " | CCA at the end |",
                    "|---|" + "---:|" * len(first.flows) + "---|"]
        for arm in order:
            run = arms[arm]
            lh = _metrics(run)
            cells = [f"{_f(lh['throughput_mbps'].get(f['name']), 1)} ({_f(lh['share_of_fair'].get(f['name']))})"
                     for f in run.flows]
            end = ", ".join(f"{f['name']} {run.series[f['name']].cca[-1] if run.series[f['name']].cca else '-'}"
                            for f in run.flows)
            details.append(f"| {arm} | " + " | ".join(cells) + f" | {end} |")
        details += ["", f"![{name}]({png.relative_to(doc.parent)})", ""]
        for arm in order:
            run = arms[arm]
            if not run.meta.get("daemon"):
                continue
            ds = decisions_summary(run)
            details.append(f"Decisions of the daemons ({arm}): "
                           + (", ".join(f"{k} {v}" for k, v in sorted(ds["actions"].items())) or "none logged") + ".")
            if ds["blocked"]:
                details.append("Blocked by the guard: " + ", ".join(f"{k} {v}" for k, v in ds["blocked"].items())
                               + ".")
            for sw in ds["switches"][:12]:
                details.append(f"- {sw['t_s']:g} s {sw['client']}: {sw['from']} -> {sw['to']} ({sw['action']}, "
                               f"{sw['verdict']}): {sw['reason']}")
            if len(ds["switches"]) > 12:
                details.append(f"- ... {len(ds['switches']) - 12} more")
            details.append("")
    if notes:
        lines += ["", notes.strip()]
    lines += ["", *details, "## Reproduce", "", "As root, on a machine prepared by `bash scripts/setup.sh`:", "",
              "```sh",
              "# every fair-*.toml and default.toml, without the daemon and with it (DQN); ~50 s per run",
              ".venv/bin/python -m ccswitch.testbed.experiments run --arms static,dqn --out results/daemon",
              "# further arms: heuristic, daemon-static-pcc / -bbr (policy static, every flow on PCC / BBR)",
              ".venv/bin/python -m ccswitch.testbed.experiments run "
              "--arms heuristic,daemon-static-pcc,daemon-static-bbr --out results/daemon",
              ".venv/bin/python -m ccswitch.testbed.experiments report --results results/daemon "
              "--notes docs/daemon/notes.md   # this page", "```", "",
              "Each run folder (`results/daemon/<scenario>/<arm>/run-01-seed-1/`) has `table.md` (the result "
              "table first), the daemons' `daemon/C<n>/{ccswitchd.toml,record.parquet,decisions.jsonl,"
              "ccswitchd.log}`, `samples.parquet` (the daemon's 200 ms ticks re-binned onto 1 s), iperf3 JSON "
              "and linkemu's statistics.", ""]
    text = "\n".join(lines) + "\n"
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(text)
    return text


def _guard_setting(text: str) -> tuple[str, Any]:
    """KEY=VALUE of --guard: the value as TOML would read it (number, boolean or string)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"--guard {text!r}: expected KEY=VALUE, e.g. return_holdoff_s=20")
    try:
        parsed = tomllib.loads(f"v = {value.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        parsed = value.strip()
    return key.strip(), parsed


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m ccswitch.testbed.experiments", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run scenarios in each arm")
    r.add_argument("scenarios", nargs="*", type=Path, help="scenario files (default: default.toml and fair-*.toml)")
    r.add_argument("--arms", default=",".join(DEFAULT_ARMS), help=f"comma-separated, of {', '.join(ARMS)}")
    r.add_argument("--out", type=Path, default=DEFAULT_OUT)
    r.add_argument("--quiet", action="store_true")
    r.add_argument("--policy-file", type=Path,
                   help="the dqn arm runs this policy file (from ccswitch train) instead of models/policy.json")
    r.add_argument("--guard", action="append", default=[], metavar="KEY=VALUE",
                   help="a [guard] setting of every daemon arm (daemon/config.py keys), e.g. return_holdoff_s=20")
    p = sub.add_parser("report", help="write docs/results-daemon.md from the run folders")
    p.add_argument("--results", type=Path, default=DEFAULT_OUT)
    p.add_argument("--doc", type=Path, default=DEFAULT_DOC)
    p.add_argument("--notes", type=Path, help="a Markdown file inserted after the introduction")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "run":
            arms = [a.strip() for a in args.arms.split(",") if a.strip()]
            bad = [a for a in arms if a not in ARMS]
            if bad:
                ap.error(f"unknown arm {bad[0]!r} (use {', '.join(ARMS)})")
            from ccswitch.dataplane import install_signal_handlers

            install_signal_handlers()
            guard = [_guard_setting(g) for g in args.guard]
            if guard:
                from .daemons import check_settings

                problems = check_settings(DaemonSettings(guard=tuple(guard)))
                if problems:
                    ap.error(f"--guard: {problems[0]}")
            run(args.scenarios or scenario_files(), arms, args.out, progress=not args.quiet,
                policy_file=args.policy_file, guard=guard)
        else:
            notes = args.notes.read_text() if args.notes else ""
            print(report(args.results, args.doc, notes=notes))
    except (OSError, ValueError, RuntimeError) as e:
        print(f"experiments: error: {' '.join(str(e).split())}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
