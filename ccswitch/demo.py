"""The live demo behind the Quick start's main command.

Two iperf3 flows leave a sender namespace through a tbf-shaped veth
bottleneck.  The monitor runs in the sender namespace and prints each flow's
metrics once a second; flow B starts on BBR and is switched to CUBIC at one
third of the run and to PCC at two thirds, while it runs.  At the end: the
switch results, per-flow per-phase means from the monitor, iperf3's own
totals, and Jain's fairness index.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field

from rich.console import Console

from ccswitch.bpf.switcher import SwitchResult
from ccswitch.dataplane import DataPlane, install_signal_handlers
from ccswitch.metrics import jain_index
from ccswitch.tables import Column, num, print_table
from ccswitch.testbed.runs.iperf import start_flow, start_server
from ccswitch.testbed.runs.netns import Bottleneck, entered

console = Console()
PORTS = {"A": 5201, "B": 5202}
CPORTS = {"A": 41001, "B": 41002}
START_CCA = {"A": "cubic", "B": "bbr"}
SWITCH_PLAN = (("cubic", 1 / 3), ("pcc", 2 / 3))  # flow B: (target, fraction of the run)


@dataclass
class FlowTrace:
    name: str
    rows: list[dict] = field(default_factory=list)  # (phase, FlowSample row)

    def phase_means(self, phase: str) -> dict[str, float]:
        rows = [r for p, r in self.rows if p == phase]
        out = {}
        for key in ("goodput_bps", "rtt_us", "jitter_us", "loss_rate", "cwnd_segs"):
            vals = [r[key] for r in rows if r[key] is not None and not math.isnan(r[key])]
            out[key] = sum(vals) / len(vals) if vals else float("nan")
        return out


def _line(t: float, name: str, r: dict) -> str:
    jit = "-" if math.isnan(r["jitter_us"]) else f"{r['jitter_us'] / 1e3:5.2f}"
    return (f"t={t:4.1f}s {name} {r['cca']:<5} {r['goodput_bps'] / 1e6:6.2f} Mb/s "
            f"rtt {r['rtt_us'] / 1e3:6.2f} ms jit {jit} ms loss {r['loss_rate'] * 100:5.2f}% "
            f"cwnd {r['cwnd_segs']:4d}")


def run_demo(duration_s: int = 20, rate_mbit: float = 50.0, as_json: bool = False) -> dict:
    if duration_s < 6:
        raise ValueError(f"--duration {duration_s} is too short for three phases; use 6 s or more")
    install_signal_handlers()
    traces = {n: FlowTrace(n) for n in PORTS}
    switches: list[tuple[float, SwitchResult]] = []
    plan = [(cca, frac * duration_s) for cca, frac in SWITCH_PLAN]
    console.print(f"[bold]ccswitch demo[/]: 2 flows, {rate_mbit:g} Mbit/s tbf bottleneck, "
                  f"{duration_s} s; flow B bbr -> cubic at {plan[0][1]:.0f} s -> pcc at {plan[1][1]:.0f} s")
    with Bottleneck(rate_mbit=rate_mbit, router=True) as bn:
        servers = [start_server(bn.receiver, p, bind=bn.receiver_addr) for p in PORTS.values()]
        try:
            with entered(bn.sender), DataPlane() as dp:
                console.print(f"PCC: {dp.pcc.source if dp.pcc else 'not loaded'}; "
                              f"monitor on netns {bn.sender}")
                dp.sample()
                flows = {n: start_flow(bn.sender, bn.receiver_addr, PORTS[n], cca=START_CCA[n],
                                       seconds=duration_s, cport=CPORTS[n]) for n in PORTS}
                t0 = time.monotonic()
                phase, pending = "bbr", list(plan)
                while (t := time.monotonic() - t0) < duration_s + 0.5:
                    time.sleep(max(0.0, math.ceil(t + 1e-3) - t))
                    t = time.monotonic() - t0
                    rows = {r["sport"]: r for r in dp.sample().to_pylist()}
                    ids = {n: rows[CPORTS[n]]["flow_id"] for n in PORTS if CPORTS[n] in rows}
                    for n in PORTS:
                        if CPORTS[n] in rows:
                            traces[n].rows.append((phase, rows[CPORTS[n]]))
                            console.print(_line(t, n, rows[CPORTS[n]]))
                    if pending and t >= pending[0][1] and "B" in ids:
                        target, _ = pending.pop(0)
                        res = dp.switch(ids["B"], target, "limited")
                        switches.append((t, res))
                        phase = target
                        console.print(f"[bold yellow]t={t:5.1f}s  switch flow B "
                                      f"{res.cca_before} -> {res.cca_after}: "
                                      f"{'ok' if res.ok else res.error}; cwnd "
                                      f"{res.cwnd_before} -> {res.cwnd_after}[/]")
                results = {n: f.wait(timeout=duration_s + 30) for n, f in flows.items()}
        finally:
            for s in servers:
                s.close()
    summary = _summary(traces, switches, results, rate_mbit)
    if as_json:
        print(json.dumps(summary, default=str))
    else:
        _print_summary(summary)
    return summary


def _summary(traces: dict[str, FlowTrace], switches: list[tuple[float, SwitchResult]],
             results: dict, rate_mbit: float) -> dict:
    phases = ["bbr", *[cca for cca, _ in SWITCH_PLAN]]
    per_flow = {n: {p: tr.phase_means(p) for p in phases} for n, tr in traces.items()}
    iperf = {n: {"receiver_mbps": r.receiver_mbps, "retransmits": r.retransmits}
             for n, r in results.items()}
    rx = [r.receiver_mbps for r in results.values()]
    return {
        "rate_mbit": rate_mbit,
        "switches": [{"t_s": round(t, 2), **r.as_dict()} for t, r in switches],
        "phases": phases,
        "monitor": per_flow,
        "iperf3": iperf,
        "jain_index": jain_index(rx),
        "utilisation": sum(rx) / rate_mbit,
    }


SUMMARY_COLUMNS = (
    Column("flow", lambda r: r["flow"], right=False),
    Column("phase", lambda r: r["phase"], right=False, header="phase (B's CCA)"),
    Column("goodput", lambda r: num(r["goodput_bps"] / 1e6), header="goodput Mb/s"),
    Column("rtt", lambda r: num(r["rtt_us"] / 1e3), header="rtt ms"),
    Column("jitter", lambda r: num(r["jitter_us"] / 1e3), rank=1, header="jitter ms"),
    Column("loss", lambda r: num(r["loss_rate"] * 100), rank=1, header="loss %"),
    Column("cwnd", lambda r: num(r["cwnd_segs"], 0), rank=1),
)


def _print_summary(s: dict) -> None:
    rows = [{"flow": flow, "phase": phase, **m} for flow, phases in s["monitor"].items()
            for phase, m in phases.items()]
    print_table(SUMMARY_COLUMNS, rows, title="Per-flow means from the ccswitch monitor, by phase of flow B")
    for sw in s["switches"]:
        console.print(f"switch at {sw['t_s']:.1f} s: {sw['cca_before']} -> {sw['cca_after']} "
                      f"{'ok' if sw['ok'] else 'FAILED: ' + str(sw['error'])}, "
                      f"cwnd {sw['cwnd_before']} -> {sw['cwnd_after']}")
    for flow, r in s["iperf3"].items():
        console.print(f"iperf3 flow {flow}: {r['receiver_mbps']:.2f} Mbit/s received, "
                      f"{r['retransmits']} retransmits")
    console.print(f"Jain's index (iperf3 totals) {s['jain_index']:.3f}; "
                  f"utilisation {s['utilisation'] * 100:.1f}% of {s['rate_mbit']:g} Mbit/s")
