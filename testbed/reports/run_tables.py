"""One run's tables: ``table.md`` (markdown), ``table.csv`` and ``fairness.csv``, and the
mean ± sd table over several runs of a folder."""

from __future__ import annotations

import csv
import json
import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .run_folder import RunData
from .run_metrics import METRICS, TARGET_JAIN, TARGET_MIN_SHARE, TARGET_UTILISATION

__all__ = ["aggregate_markdown", "table_markdown", "targets_markdown", "write_csv"]


def _f(v: Any, nd: int = 2) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, float) and math.isinf(v):
        return "inf"
    return f"{v:.{nd}f}" if isinstance(v, float) else str(v)


def _starv_text(eps: Sequence[dict[str, Any]]) -> str:
    return ", ".join(f"{e['flow']} {e['start_s']:g}-{e['end_s']:g} s" for e in eps) or "none"


def _yes(ok: bool) -> str:
    return "yes" if ok else "**no**"


def targets_markdown(run: RunData, lh: dict[str, Any]) -> list[str]:
    """The result table of issue 5: last-half metrics against the targets."""
    d = run.meta.get("daemon")
    who = (f"ccswitchd ({d['policy']}) on client(s) {', '.join(str(c) for c in d['clients'])}" if d
           else "no daemon (static CCAs and scripted switches)")
    lines = [f"## Result over the {lh['window']}: {who}", "",
             "| Flow | CCA (start -> end) | Throughput (Mbit/s) | Share of fair share | Switches |",
             "|---|---|---:|---:|---:|"]
    for f in run.flows:
        s = run.series[f["name"]]
        ccas = f"{s.cca[0]} -> {s.cca[-1]}" if s.cca else f["cca"]
        lines.append(f"| {f['name']} | {ccas} | {_f(lh['throughput_mbps'].get(f['name']))} | "
                     f"{_f(lh['share_of_fair'].get(f['name']))} | {len(lh['cca_changes'].get(f['name'], []))} |")
    t = lh["targets"]
    util = "-" if math.isnan(lh["utilisation"]) else f"{lh['utilisation'] * 100:.1f} %"
    lines += ["", "| Metric | Value | Target | Met |", "|---|---:|---:|---|",
              f"| minimum share of fair share | {_f(lh['min_share'])} ({lh['min_share_flow']}) | >= "
              f"{TARGET_MIN_SHARE:g} | {_yes(t['min_share'])} |",
              f"| Jain's index | {_f(lh['jain'], 3)} | >= {TARGET_JAIN:g} | {_yes(t['jain'])} |",
              f"| utilisation ({lh['utilisation_source']}) | {util} | >= {TARGET_UTILISATION * 100:g} % | "
              f"{_yes(t['utilisation'])} |",
              f"| p95 RTT | {_f(lh['rtt_p95_ms'])} ms | - | - |", ""]
    return lines


def table_markdown(run: RunData, rows: Sequence[dict[str, Any]], fair: Sequence[dict[str, Any]],
                   lh: dict[str, Any] | None = None) -> str:
    m = run.meta
    lines = [f"# {m['scenario']} / {m['run']}", ""]
    if m.get("description"):
        lines += [m["description"], ""]
    link = f"emulator {m['emulator']}" if m.get("emulator") else "external network"
    lines += [f"{len(run.flows)} flows, {m['duration_s']:g} s, sample interval {m['sample_interval_s']:g} s, "
              f"{link}, uplink {_f(m.get('uplink_rate_mbit'), 0)} Mbit/s, seed {m['seed']}.", ""]
    if lh is not None:
        lines += targets_markdown(run, lh)
    lines += ["## Per client and phase (layout of paper 002, Table 5)", "",
              "| Phase | Client (CCA) | Throughput (Mbit/s) | RTT (ms) | Jitter (ms) | Loss (%) |",
              "|---|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['phase']} | {r['cca'].upper()} ({r['flow']}) | {_f(r['throughput_mbps'])} | "
                     f"{_f(r['rtt_ms'])} | {_f(r['jitter_ms'])} | {_f(r['loss_pct'])} |")
    if any(not math.isnan(r["bottleneck_drop_pct"]) for r in rows):
        lines += ["", "At the emulated bottleneck (linkemu, uplink, per client): packets dropped there (queue "
                  "overflow, WiFi retries, random loss) and their mean queueing delay.", "",
                  "| Phase | Client (CCA) | Drops at the bottleneck (%) | Queueing delay (ms) |", "|---|---|---:|---:|"]
        for r in rows:
            lines.append(f"| {r['phase']} | {r['cca'].upper()} ({r['flow']}) | {_f(r['bottleneck_drop_pct'])} | "
                         f"{_f(r['queue_delay_ms'])} |")
    lines += ["", "## Fairness per phase", "",
              "| Phase | Jain's index | Thratio | max/min | Utilisation | Starvation (< 10 % of fair share >= 5 s) |",
              "|---|---:|---:|---:|---:|---|"]
    for r in fair:
        th = f"{_f(r['thratio'])} ({r['thratio_pair']})" if r["thratio_pair"] else "-"
        util = "-" if math.isnan(r["utilisation"]) else f"{r['utilisation'] * 100:.1f} %"
        lines.append(f"| {r['phase']} | {_f(r['jain'], 3)} | {th} | {_f(r['thratio_max_min'])} | {util} | "
                     f"{_starv_text(r['starvation'])} |")
    sw = run.summary.get("switches") or []
    if sw:
        lines += ["", "## Scripted switches", ""]
        for e in sw:
            state = "ok" if e.get("ok") else f"FAILED: {e.get('error')}"
            lines.append(f"- {e['at_s']:g} s (done at {e.get('t_done_s', math.nan):.3f} s): {e['flow']} "
                         f"{e.get('cca_before', '?')} -> {e['cca']} ({e['inherit']}): {state}")
    ip = run.summary.get("iperf3") or {}
    if ip:
        lines += ["", "## iperf3 totals", "", "| Flow | Sender (Mbit/s) | Receiver (Mbit/s) | Retransmits |",
                  "|---|---:|---:|---:|"]
        for name, r in ip.items():
            lines.append(f"| {name} | {_f(r['sender_mbps'])} | {_f(r['receiver_mbps'])} | {r['retransmits']} |")
    io = ((run.summary.get("emulator") or {}).get("io") or {}).get("tx_lateness_us")
    if io:
        lines += ["", f"Emulator timing (how late linkemu sent packets; CPU contention shows here): "
                      f"p50 {io['p50'] / 1e3:.2f} ms, p99 {io['p99'] / 1e3:.2f} ms, max {io['max'] / 1e3:.1f} ms."]
    lines += ["", "Plots: " + ", ".join(f"[{k}](plots/{k}.png)" for k, *_ in METRICS), ""]
    return "\n".join(lines)


def write_csv(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    if not rows:
        path.write_text("")
        return
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        for r in rows:
            w.writerow({k: json.dumps(v) if isinstance(v, dict | list) else v for k, v in r.items()})


def _mean_sd(vals: Sequence[float]) -> str:
    vals = [v for v in vals if v is not None and not math.isnan(v)]
    if not vals:
        return "-"
    mu = sum(vals) / len(vals)
    sd = math.sqrt(sum((v - mu) ** 2 for v in vals) / (len(vals) - 1)) if len(vals) > 1 else 0.0
    return f"{mu:.2f} ± {sd:.2f}"


def aggregate_markdown(path: Path, runs: Sequence[tuple[str, dict[str, Any]]]) -> str:
    keys: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for _, m in runs:
        for r in m["per_flow_phase"]:
            keys.setdefault((r["phase"], r["flow"]), []).append(r)
    lines = [f"# {path.name}: {len(runs)} runs (mean ± sd)", "",
             "| Phase | Client (CCA) | Throughput (Mbit/s) | RTT (ms) | Jitter (ms) | Loss (%) |",
             "|---|---|---:|---:|---:|---:|"]
    for (phase, flow), rs in keys.items():
        cca = Counter(r["cca"] for r in rs).most_common(1)[0][0]
        lines.append(f"| {phase} | {cca.upper()} ({flow}) | "
                     + " | ".join(_mean_sd([r[k] for r in rs]) for k in
                                  ("throughput_mbps", "rtt_ms", "jitter_ms", "loss_pct")) + " |")
    fair: dict[str, list[dict[str, Any]]] = {}
    for _, m in runs:
        for r in m["fairness"]:
            fair.setdefault(r["phase"], []).append(r)
    lines += ["", "| Phase | Jain's index | Thratio | Utilisation (%) | Runs with starvation |",
              "|---|---:|---:|---:|---:|"]
    for phase, rs in fair.items():
        lines.append(f"| {phase} | {_mean_sd([r['jain'] for r in rs])} | {_mean_sd([r['thratio'] for r in rs])} | "
                     f"{_mean_sd([r['utilisation'] * 100 for r in rs])} | "
                     f"{sum(1 for r in rs if r['starvation'])}/{len(rs)} |")
    lines += ["", "Runs: " + ", ".join(f"[{n}]({n}/table.md)" for n, _ in runs), ""]
    return "\n".join(lines)
