"""The report of paper 000's Table 2 reproduction: docs/l4s/table2.md and its plots.

The runs' numbers come from :mod:`.table2_runs`, the verdicts and summary lines from :mod:`.table2_verdicts`,
the plots from :mod:`.table2_plots`; this module writes the Markdown.

    .venv/bin/python testbed/l4s/table2.py report [--out results/l4s-table2] [--doc docs/l4s/table2.md]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ccswitch.testbed.l4s.table2_config import (
    AQMS,
    BASELINE_BUILD,
    CONFIGS,
    LABEL,
    PAPER_MB,
    RATES,
    SAME_BAND,
    TARGET_MS,
    TOLERANCE_MS,
    UTIL_TARGET,
    Config,
    mean_of,
)
from ccswitch.testbed.l4s.table2_plots import make_plots
from ccswitch.testbed.l4s.table2_runs import load_runs, load_summary
from ccswitch.testbed.l4s.table2_verdicts import ecn_ratios, srtt_claim, summary_lines, target_verdict


def _ms(vals: Sequence[float], nd: int = 1) -> str:
    v = [x for x in vals if x == x]
    if not v:
        return "-"
    if len(v) == 1:
        return f"{v[0]:.{nd}f}"
    return f"{statistics.fmean(v):.{nd}f} ± {statistics.stdev(v):.{nd}f}"


def cmd_report(a: argparse.Namespace) -> int:
    out: Path = a.out
    runs = load_runs(out)
    folder = out / "runs"
    allruns = [r for rs in runs.values() for r in rs]
    if not allruns:
        print(f"table2.py report: no finished run under {folder}", file=sys.stderr)
        return 1
    doc: Path = a.doc
    doc.parent.mkdir(parents=True, exist_ok=True)
    plots = make_plots(runs, doc.parent)
    doc.write_text(markdown(runs, out, plots, doc.parent, a.seeds))
    print(f"table2.py report: {len(allruns)} runs -> {doc} ({len(plots)} plots)", file=sys.stderr)
    return 0


def markdown(runs: dict[Config, list[dict[str, Any]]], out: Path, plots: dict[str, Path], doc_dir: Path,
             planned_seeds: Sequence[int] = ()) -> str:
    allruns = [r for rs in runs.values() for r in rs]
    seeds = sorted({r["seed"] for r in allruns})
    per_seed = {s: sum(1 for r in allruns if r["seed"] == s) for s in seeds}
    starts = sorted(r["start_utc"] for r in allruns if r["start_utc"])
    ends = sorted(r["end_utc"] for r in allruns if r["end_utc"])
    jobs_of = {sd: sorted({r["jobs"] for r in allruns if r["seed"] == sd and r["jobs"]}) for sd in seeds}
    L: list[str] = []
    w = L.append
    w("# Paper 000's Table 2 on the emulated testbed (issue 14)")
    w("")
    w("Written by `testbed/l4s/table2.py report` from the runs under `results/l4s-table2/` (not committed); "
      "the set-up, and where it differs from the paper's, is in that script's docstring and summarised below.")
    w("")
    planned = sorted(set(planned_seeds) | set(seeds))
    w(f"* **Runs**: {len(allruns)} of {len(CONFIGS) * len(planned)} planned (20 configurations x seeds "
      f"{', '.join(map(str, planned))}); finished per seed: "
      + ", ".join(f"seed {sd}: {per_seed.get(sd, 0)}/20" for sd in planned) + ".  One repetition per seed "
      "(the seed is linkemu's random seed: FQ hash, PIE/DualPI2 randomness); mean ± sd below are over the seeds "
      "a configuration has.")
    if starts:
        w(f"* **Dates** (UTC): first run started {starts[0]}, last ended {ends[-1] if ends else '?'}; "
          "runs at a time (`--jobs`): " + ", ".join(f"seed {sd}: {'/'.join(map(str, j)) or '?'}"
                                                     for sd, j in jobs_of.items()) + ".")
    builds = sorted({(r["linkemu_sha256"], r["linkemu_mtime"]) for r in allruns if r["linkemu_sha256"]})
    unknown = sum(1 for r in allruns if not r["linkemu_sha256"])
    parts = [f"sha256 {h[:12]} (built {m} UTC): {sum(1 for r in allruns if r['linkemu_sha256'] == h)} runs"
             for h, m in builds]
    if unknown:
        parts.append(f"{unknown} runs made before the build was recorded per run, all with the binary built "
                     f"{BASELINE_BUILD} (its time stamp was unchanged when recording began)")
    w("* **linkemu build**: " + "; ".join(parts) + ".")
    w(f"* **Emulator timing** (linkemu's `tx_lateness_us`, actual minus ideal departure): p99 at most "
      f"{max(r['late_p99_us'] for r in allruns):.0f} µs in every run; the largest single delay "
      f"{max(r['late_max_us'] for r in allruns) / 1e3:.1f} ms (a scheduling hiccup of the loaded VM).")
    w(f"* **Machine load**: {load_summary(out, allruns)}; the runs were started with `nice -n 10` on a "
      "shared 2-core VM, other work ran beside them.")
    w("* **Set-up**: linkemu, one client namespace with four `reno` iperf3 flows (start 0, 10, 20, 30 s, 60 s "
      "each, 90 s run), data at 10 or 1 Mbit/s through the AQM, 10 ms one way each direction (20 ms base RTT), "
      "ACK path the same rate with a 1000-packet pfifo.  ECN on = the AQM's `ecn = true` and the scenario's "
      "new `tcp_ecn = 1` (every flow negotiates RFC 3168 ECN; checked per run from the sockets, column \"flows with "
      "ECN\" below); off = `ecn = false`, `tcp_ecn = 0`.")
    w("* **AQMs**: CoDel 5/100 ms, limit 1000; PIE 15 ms/15 ms, alpha 0.125, beta 1.25, burst 150 ms, limit "
      "1000, marks while p <= 10 %; FQ-CoDel 1024 flows, quantum 1514, 5/100 ms, limit 10240; FQ-PIE 6 flows "
      "(the paper's), quantum 1514, the PIE settings, limit 10240, marks while p <= 10 %; **L4S = linkemu's "
      "DualPI2** (RFC 9332, target 15 ms, tupdate 15 ms, limit 10240, classifier ECT(1)).  The paper's L4S "
      "puts any ECT packet into an L queue; RFC 9332 keeps classic ECT(0) senders in the Classic queue because "
      "a classic sender halves per CE mark and would starve under the L queue's 1 ms step.  So all four "
      "NewReno flows are in DualPI2's Classic queue (PI2, 15 ms target): with ECN they are marked there "
      "(p_C = p'^2) instead of dropped.  This is not the paper's classifier.")
    w("")

    w("## Summary of what was measured")
    w("")
    for line in summary_lines(runs):
        w(f"* {line}")
    w("")

    # (a) Table 2
    w("## Table 2: total data transferred (including retransmissions)")
    w("")
    w("Ours: IP bytes the four senders put into the bottleneck (linkemu's uplink `bytes_in`: payload, "
      "TCP/IP headers, retransmissions, and packets the AQM then dropped), MB = 10^6 bytes, mean ± sd over "
      "the seeds; \"delivered\": the IP bytes that left the bottleneck (`bytes_out`, retransmissions that got "
      "through included, drops not).  Both over the whole run (longer than 90 s when a flow started late).  "
      "Capacity over the 90 s: 112.5 MB at 10 Mbit/s, 11.25 MB at 1 Mbit/s; at 1 Mbit/s the drops are a large "
      "share of what is sent, so sent data exceeds it.  The paper's numbers "
      "are its Table 2 as printed (35-57 % of capacity on its VirtualBox testbed: a reference, not a target).")
    w("")
    w("| AQM Algorithm | paper, no ECN | paper, ECN | ours, no ECN | ours, ECN | ours delivered, no ECN | "
      "ours delivered, ECN |")
    w("|---|---|---|---|---|---|---|")
    for aqm in AQMS:
        for rate in RATES:
            p_off, p_on = PAPER_MB[(aqm, rate)]
            off, on = runs[Config(aqm, rate, False)], runs[Config(aqm, rate, True)]
            lo_, lf_ = ("*" if any(r["late_s"] for r in rs) else "" for rs in (off, on))
            w(f"| {LABEL[aqm]} Scenario {rate} Mbps | {p_off:.2f} | {p_on:.2f} | "
              f"{_ms([r['total_in_mb'] for r in off], 2)}{lo_} | {_ms([r['total_in_mb'] for r in on], 2)}{lf_} | "
              f"{_ms([r['out_mb'] for r in off], 2)}{lo_} | {_ms([r['out_mb'] for r in on], 2)}{lf_} |")
    w("")
    w("\\* a run of this cell had a flow start late (its SYNs dropped, \"Late starts\" below): the four flows' "
      "60 s spread over a longer span, which changes the total by itself.")
    w("")
    if "bars" in plots:
        w(f"![Table 2, ours beside the paper's]({_rel(plots['bars'], doc_dir)})")
        w("")

    # (b) per configuration
    w("## Per configuration: utilisation, queue delay, srtt, fairness")
    w("")
    w("Utilisation = IP bytes that left the bottleneck during the scenario's 0-90 s / (rate x 90 s) "
      "(target >= 90 %).  Queue delay = "
      "sojourn in the bottleneck AQM of every data packet that left it (linkemu's per-packet log), mean and "
      "95th percentile over the whole run, against the AQM's target (CoDel/FQ-CoDel: 5 ms, reported as the "
      "difference; PIE, FQ-PIE, DualPI2 Classic: 15 ± 3 ms on the mean).  Standing = the smallest sojourn in "
      "each 100 ms of the run, averaged: the quantity CoDel's target bounds (CoDel drops while the sojourn "
      "has stayed above target for a whole interval, so its mean sojourn sits above the target by design).  "
      "srtt = the kernel's smoothed RTT "
      "(iperf3's per-second `rtt`) averaged over all four flows' seconds (base RTT 20 ms).  Jain = Jain's "
      "index of the four flows' mean goodput (iperf3 server, per second) while all four run (30-60 s; "
      "later when a flow started late, none when they never ran together for 10 s).  "
      "Drops / marks: AQM drops plus tail drops, and CE marks, at the bottleneck.  Flows with ECN: how many "
      "of the four sockets negotiated RFC 3168 ECN (per seed, from the sockets' ECN mode).  Values are mean "
      "± sd over the seeds.")
    w("")
    w("| configuration | n | utilisation | >= 90 % | queue delay mean, ms | p95, ms | standing, ms | target, ms | "
      "on target | "
      "srtt, ms | Jain (all four) | drops | marks | retransmits | flows with ECN, per seed |")
    w("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for c in CONFIGS:
        rs = runs[c]
        if not rs:
            w(f"| {c.title} | 0 | not run | | | | | | | | | | | | |")
            continue
        qm = mean_of([r["qdelay_mean_ms"] for r in rs])
        tol = TOLERANCE_MS[c.aqm]
        tgt = f"{TARGET_MS[c.aqm]:g}" + (f" ± {tol:g}" if tol else " (about)")
        ecn_flows = ", ".join(str(r["ecn_flows"]) for r in sorted(rs, key=lambda r: r["seed"]))
        w(f"| {c.title} | {len(rs)} | {_ms([100 * r['util'] for r in rs])} % | "
          f"{'yes' if all(r['util'] >= UTIL_TARGET for r in rs) else 'no'} | "
          f"{_ms([r['qdelay_mean_ms'] for r in rs])} | {_ms([r['qdelay_p95_ms'] for r in rs])} | "
          f"{_ms([r['standing_ms'] for r in rs])} | {tgt} | "
          f"{target_verdict(c.aqm, qm)} | {_ms([r['srtt_ms'] for r in rs])} | "
          f"{_ms([r['jain'] for r in rs], 3)} | {_ms([r['drops'] for r in rs], 0)} | "
          f"{_ms([r['marks'] for r in rs], 0)} | {_ms([r['retransmits'] for r in rs], 0)} | "
          f"{ecn_flows} |")
    w("")
    w("Why targets are missed at 1 Mbit/s: a 1500-byte packet takes 12 ms there, so one packet ahead of another "
      "already exceeds CoDel's 5 ms, and CoDel does not drop while at most one MTU is queued.  Four NewReno "
      "flows keep at least 2 segments each in flight (Linux's minimum window) against a path that holds about "
      "2 (1 Mbit/s x 20 ms), so about 6 packets (70 ms) stand in the queue unless losses push a flow into "
      "timeouts.  In the flow-queue AQMs each of the four queues is served at a quarter of the rate (48 ms "
      "per packet) and PIE does not drop below 2 packets queued, so a queue's sojourn starts near 100 ms.  "
      "At 10 Mbit/s these floors are 10 times smaller.")
    w("")
    lates = [(c, r) for c, rs in runs.items() for r in sorted(rs, key=lambda r: r["seed"]) if r["late_s"]]
    if lates:
        w("**Late starts.**  In these runs a flow's iperf3 test began well after its start time (iperf3's own "
          "timestamp, 1 s resolution) and the bottleneck dropped 60-byte packets, i.e. SYNs, at the times "
          "listed: the connection waited for SYN retransmissions (1, 2, 4, 8 ... s apart).  With ECN on, data "
          "packets are ECT and get marked, but SYNs (and retransmissions, which Linux sends Not-ECT) are "
          "Not-ECT and an AQM that stays above its target drops them; Linux then retries the SYN without "
          "asking for ECN (tcp_ecn_fallback), so a flow whose own SYN was dropped runs without ECN (column "
          "\"flows with ECN\").  The SYNs may be the iperf3 control connection's.  Such a flow runs its 60 s later, "
          "so its run is longer than 90 s (its total data counts in full).")
        w("")
        for c, r in lates:
            flows = ", ".join(f"{n} {v:.0f} s late" for n, v in sorted(r["late_s"].items()))
            syn = r["syn_drops"] or []
            syn_txt = (f"; SYN drops at {', '.join(f'{x:.1f}' for x in syn[:12])}{' ...' if len(syn) > 12 else ''} s"
                       if syn else "")
            w(f"* {c.title}, seed {r['seed']}: {flows} (run span {r['span_s']:.0f} s){syn_txt}")
        w("")
    fq = [(c, r) for c, rs in runs.items() for r in rs if c.aqm == "fq_pie" and r["shared_queues"]]
    if fq:
        w(f"FQ-PIE with the paper's 6 queues: in {len(fq)} of "
          f"{sum(len(rs) for c, rs in runs.items() if c.aqm == 'fq_pie')} FQ-PIE runs two or more of the four "
          "flows hashed into one queue (linkemu's `shared_queues`), which is what its Jain's index shows; "
          "with 1024 queues (FQ-CoDel) that did not happen.")
        w("")

    # (c) ECN ratio
    w("## ECN / no-ECN ratio of the total data, per AQM")
    w("")
    w(f"Ratio = total data with ECN / without (our mean over seeds; in brackets the ratio of each seed's "
      f"pair, min-max).  Direction: \"higher\" above 1 + {SAME_BAND:.0%}, \"lower\" below 1 - {SAME_BAND:.0%}, "
      "else \"same\"; ours is \"same\" also when its seeds straddle that band.  Verdict: agree when the "
      "directions match.  \"(late start)\": a run of the pair had a flow start late (SYNs dropped), which "
      "spreads the four flows' 60 s over a longer span and so changes the total by itself.  Last column: the "
      "same ratio for the IP bytes delivered through the bottleneck during the scenario's 90 s (the "
      "utilisation ratio; neither drops nor late starts count there).")
    w("")
    w("| AQM | rate | paper | ours | paper's direction | ours | verdict | ours, delivered in 0-90 s |")
    w("|---|---|---|---|---|---|---|---|")
    ratios = ecn_ratios(runs)
    for x in ratios:
        rng = f" [{x['lo']:.3f}-{x['hi']:.3f}]" if x["n"] > 1 else ""
        ours = "-" if x["ours"] != x["ours"] else f"{x['ours']:.3f}"
        dl = "-" if x["delivered"] != x["delivered"] else f"{x['delivered']:.3f}"
        w(f"| {LABEL[x['aqm']]} | {x['rate']} Mbit/s | {x['paper']:.3f} | {ours}{rng} | "
          f"{x['theirs_dir']} | {x['ours_dir']} | {x['verdict']}{' (late start)' if x['late'] else ''} | {dl} |")
    agree = sum(x["verdict"] == "agree" for x in ratios)
    differ = sum(x["verdict"] == "differ" for x in ratios)
    w("")
    w(f"{agree} agree, {differ} differ.")
    w("")

    # (d) srtt claim
    w("## The paper's claim: L4S with ECN has a lower srtt than FQ-PIE with ECN")
    w("")
    w("Section 6.2: \"L4S demonstrates a distinct reduction in RTT when ECN is enabled ... This contrasts with "
      "FQ-PIE, which exhibits higher RTT\".  Ours: mean srtt of the four flows, L4S (DualPI2) vs FQ-PIE, both "
      "with ECN, per seed.")
    w("")
    w("| rate | seed | L4S + ECN srtt, ms | FQ-PIE + ECN srtt, ms | L4S - FQ-PIE, ms | L4S queue delay, ms | "
      "FQ-PIE queue delay, ms |")
    w("|---|---|---|---|---|---|---|")
    claim_rows, verdicts = srtt_claim(runs)
    for rate, seed, l4, fp, ql, qf in claim_rows:
        w(f"| {rate} Mbit/s | {seed} | {l4:.1f} | {fp:.1f} | {l4 - fp:+.1f} | {ql:.1f} | {qf:.1f} |")
    w("")
    for v in verdicts:
        w(f"* {v}")
    w("")
    w("Both AQMs aim at 15 ms of queueing for these classic flows (DualPI2's Classic queue, FQ-PIE's per-queue "
      "PIE), so a flow's srtt is about the queue delay it sees plus the 20 ms base RTT and the serialisation "
      "of its packets; with RFC 9332's classifier no NewReno packet gets the L queue's priority, which the "
      "paper gives as the reason for its result.  So whatever difference there is here comes from the Classic "
      "queue's PI2 against FQ-PIE's six PIE queues (the queue-delay columns), not from L4S priority.")
    w("")
    w("The paper also reports that L4S has a lower RTT with ECN than without.  Ours, L4S (DualPI2) mean srtt:")
    w("")
    w("| rate | ECN off, ms | ECN on, ms |")
    w("|---|---|---|")
    for rate in RATES:
        w(f"| {rate} Mbit/s | {_ms([r['srtt_ms'] for r in runs[Config('l4s', rate, False)]])} | "
          f"{_ms([r['srtt_ms'] for r in runs[Config('l4s', rate, True)]])} |")
    w("")

    # (e) plots
    w("## Plots")
    w("")
    for key, text in (("tput-10", "Throughput of the four flows, 10 Mbit/s, seed 1 (iperf3 server, per second)"),
                      ("tput-1", "Throughput of the four flows, 1 Mbit/s, seed 1"),
                      ("srtt-10", "srtt of the four flows, 10 Mbit/s, seed 1 (iperf3 client `rtt`; the scale "
                                  "leaves out the highest 2 % of the seconds)"),
                      ("srtt-1", "srtt of the four flows, 1 Mbit/s, seed 1 (the scale leaves out the highest "
                                 "2 % of the seconds: slow-start spikes)"),
                      ("summary", "Utilisation, queue delay and srtt per configuration (mean over seeds, "
                                  "error bars min-max)")):
        if key in plots:
            w(f"{text}:")
            w("")
            w(f"![{text}]({_rel(plots[key], doc_dir)})")
            w("")
    w("## Every run")
    w("")
    w("| configuration | seed | started (UTC) | load before/after | total in, MB | goodput, MB | utilisation | "
      "qdelay mean / p95, ms | srtt, ms | Jain | drops | marks | tcp_ecn (clients / server) |")
    w("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for c in CONFIGS:
        for r in sorted(runs[c], key=lambda r: r["seed"]):
            te = r["tcp_ecn"] or {}
            lb, la = r["load_before"], r["load_after"]
            load = f"{lb[0]:.2f} / {la[0]:.2f}" if lb and la else "-"
            w(f"| {c.title} | {r['seed']} | {r['start_utc'] or '-'} | {load} | {r['total_in_mb']:.2f} | "
              f"{r['goodput_mb']:.2f} | {100 * r['util']:.1f} % | {r['qdelay_mean_ms']:.1f} / "
              f"{r['qdelay_p95_ms']:.1f} | {r['srtt_ms']:.1f} | {_ms([r['jain']], 3)} | {r['drops']} | {r['marks']} | "
              f"{','.join(map(str, (te.get('clients') or {}).values())) or '?'} / {te.get('server', '?')} |")
    w("")
    w("## Reproduce")
    w("")
    w("```sh")
    w("sudo nice -n 10 .venv/bin/python testbed/l4s/table2.py run --seeds 1 2 3 --stop-at 21:20   # resumable")
    w(".venv/bin/python testbed/l4s/table2.py report")
    w("```")
    w("")
    return "\n".join(L)


def _rel(p: Path, base: Path) -> str:
    return os.path.relpath(p, base)
