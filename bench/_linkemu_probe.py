"""Measuring linkemu from the endpoints with ``linkemu-probe``: the runs the fidelity benchmarks share.

bench/emulator_fidelity.py and bench/dualpi2_fidelity.py build a 1-client
topology (client, router and server namespaces, see ccswitch.testbed.runs.topology),
run linkemu in the router and measure outside it with ``linkemu-probe`` (built
with linkemu): a sendmmsg-paced UDP sender stamping CLOCK_REALTIME into each
datagram and a receiver reading the kernel's receive timestamp, so one-way
delay is measured on one clock.  Here:

* :class:`Receiver` / :func:`send` -- the two probe ends;
* :func:`delay_run` -- one-way delays of 64-byte probes at 1000/s through an
  unlimited-rate link with a configured delay (optionally next to 100 Mbit/s
  of UDP on the same path);
* :func:`forward_run` -- one offered UDP rate through an unlimited link with
  5 ms of delay: what was delivered, and whether linkemu kept up (delivered
  >= 98 % of sent, tx lateness p99 < 1 ms, no socket drops, < 1 % loss);
* :func:`bench_args` / :func:`missing_binaries` / :func:`run_parts` -- the
  command line both share: parse it, check the binaries, run the chosen parts
  in one topology and print the verdicts.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ccswitch.testbed.runs.emulator import CRATE_DIR, Emulator, binary_path, emulator_config, link
from ccswitch.testbed.runs.netns import nsenter_argv
from ccswitch.testbed.runs.topology import Topology

PROBE = CRATE_DIR / "target" / "release" / "linkemu-probe"
PAYLOAD = 1400
"""UDP payload of the rate and forwarding runs (1428-byte IP packets)."""
RATE_TARGET = 0.02
"""Measured rate within this fraction of the configured rate."""
DELAY_TARGET_US = 200.0
"""p99 |measured - configured| one-way delay below this."""
PROBE_PPS = 1000
PROBE_SIZE = 64
LOAD_MBIT = 100.0
"""The background UDP load of a loaded delay run."""
FORWARD_DELAY_MS = 5.0
KEEP_UP = {"delivered": 0.98, "late_p99_us": 1000.0, "loss": 0.01}
"""A forwarding run keeps up: delivered >= 98 % of sent, tx lateness p99 < 1 ms, < 1 % loss (and no socket drops)."""
TICK = os.sysconf("SC_CLK_TCK")


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    if not s:
        return float("nan")
    return s[min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))]


def cpu_s(pid: int | None) -> float:
    """utime + stime of a process, seconds (from /proc/PID/stat)."""
    if pid is None:
        return float("nan")
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


class Receiver:
    """``linkemu-probe recv`` in the server namespace.

    *dump*: write every one-way delay (us) there; *skip_s*: leave this many
    seconds out of the steady rate at both ends.
    """

    def __init__(self, topo: Topology, port: int, dump: Path | None = None, *, skip_s: float | None = None) -> None:
        argv = [str(PROBE), "recv", "--bind", f"{topo.server_addr}:{port}", "--idle-s", "1.0"]
        if dump is not None:
            argv += ["--dump", str(dump)]
        if skip_s is not None:
            argv += ["--skip-s", str(skip_s)]
        self.proc = subprocess.Popen(nsenter_argv(topo.server, argv), stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if '"ready"' not in line:
            self.proc.kill()
            raise RuntimeError(f"linkemu-probe recv did not start: {line!r}")

    def result(self, timeout: float = 30) -> dict[str, Any]:
        out, _ = self.proc.communicate(timeout=timeout)
        return json.loads(out.strip().splitlines()[-1])


def send(topo: Topology, port: int, seconds: float, *, rate_mbit: float | None = None,
         pps: float | None = None, size: int = PAYLOAD, wait: bool = True, background: bool = False,
         probe: bool = False, tos: int | None = None) -> Any:
    """``linkemu-probe send`` in the client namespace.

    *background*: pace in 1-ms steps (sleeping), so the load does not hog a CPU.
    *probe*: run SCHED_FIFO (priority 5, below linkemu's 10) so the probe is
    not preempted between taking its send timestamp and sending, which on a
    loaded 2-core machine would add milliseconds that are not the emulator's.
    *tos*: the IP TOS byte (1: ECT(1), DualPI2's L queue).
    """
    argv = [str(PROBE), "send", "--to", f"{topo.server_addr}:{port}", "--size", str(size),
            "--duration-s", str(seconds)]
    argv += ["--rate-mbit", str(rate_mbit)] if rate_mbit is not None else ["--pps", str(pps)]
    if background:
        argv += ["--batch-us", "1000"]
    if tos is not None:
        argv += ["--tos", str(tos)]
    if probe:
        argv = ["chrt", "-f", "5", *argv]
    proc = subprocess.Popen(nsenter_argv(topo.clients[0], argv), stdout=subprocess.PIPE, text=True)
    if not wait:
        return proc
    out, _ = proc.communicate(timeout=seconds + 30)
    return json.loads(out)


def send_probes(topo: Topology, port: int, seconds: float, tos: int | None = None) -> Any:
    """64-byte probes at 1000/s, SCHED_FIFO; returns the sender's report."""
    return send(topo, port, seconds, pps=PROBE_PPS, size=PROBE_SIZE, probe=True, tos=tos)


def delay_run(topo: Topology, delay_ms: float, count: int, loaded: bool, port: int,
              qdisc: dict[str, Any] | None = None) -> tuple[list[float], dict[str, Any]]:
    """*count* probes through a link of *delay_ms* each way (uplink qdisc *qdisc*, default pfifo).

    *loaded*: 100 Mbit/s of paced UDP on the same path meanwhile (ports
    *port* and *port* + 1 are used).  Returns the probes' one-way delays (us)
    and linkemu's tx lateness percentiles (us) with its ``send_us``.
    """
    cfg = emulator_config(topo.client_ifs, topo.server_if, uplink=link(None, delay_ms, qdisc=qdisc),
                          downlink=link(None, delay_ms))
    with tempfile.TemporaryDirectory() as tmp, Emulator(topo.router, cfg) as emu:
        dump = Path(tmp) / "owd.txt"
        bg_rcv = bg = None
        if loaded:
            bg_rcv = Receiver(topo, port + 1)
            bg = send(topo, port + 1, count / PROBE_PPS + 2, rate_mbit=LOAD_MBIT, wait=False, background=True)
        rcv = Receiver(topo, port, dump)
        send_probes(topo, port, count / PROBE_PPS)
        rcv.result()
        if bg is not None and bg_rcv is not None:
            bg.communicate(timeout=60)
            bg_rcv.result()
        owd = [float(x) for x in dump.read_text().split()]
    assert emu.summary is not None
    io = emu.summary["io"]
    return owd, {**io["tx_lateness_us"], "send_us": io["send_us"]}


@dataclass(frozen=True)
class Forwarded:
    """One :func:`forward_run`."""

    sent_mbit: float
    delivered_mbit: float
    loss: float
    late_p99_us: float
    socket_drops: int
    cpu_us_per_pkt: float
    """linkemu's CPU time (utime + stime) per packet it forwarded."""

    @property
    def keeps_up(self) -> bool:
        return (self.delivered_mbit >= KEEP_UP["delivered"] * self.sent_mbit
                and self.late_p99_us < KEEP_UP["late_p99_us"] and self.socket_drops == 0
                and self.loss < KEEP_UP["loss"])

    @property
    def kpps(self) -> float:
        return self.delivered_mbit * 1e6 / 8 / (PAYLOAD + 28) / 1000


def forward_run(topo: Topology, offered_mbit: float, seconds: float, port: int,
                qdisc: dict[str, Any] | None = None) -> Forwarded:
    """UDP at *offered_mbit* through an unlimited link with 5 ms of delay each way (uplink qdisc *qdisc*)."""
    cfg = emulator_config(topo.client_ifs, topo.server_if, uplink=link(None, FORWARD_DELAY_MS, qdisc=qdisc),
                          downlink=link(None, FORWARD_DELAY_MS))
    with Emulator(topo.router, cfg) as emu:
        c0 = cpu_s(emu.pid)
        rcv = Receiver(topo, port)
        sent = send(topo, port, seconds, rate_mbit=offered_mbit)
        got = rcv.result()
        c1 = cpu_s(emu.pid)
    assert emu.summary is not None
    io = emu.summary["io"]
    pkts = max(1, emu.summary["uplink"]["packets_out"] + emu.summary["downlink"]["packets_out"])
    return Forwarded(
        sent_mbit=sent["rate_mbit"],
        delivered_mbit=got.get("rate_mbit_steady") or 0.0,
        loss=got.get("lost", 0) / max(1, sent["packets"]),
        late_p99_us=io["tx_lateness_us"]["p99"],
        socket_drops=io["rx_socket_drops"],
        cpu_us_per_pkt=(c1 - c0) * 1e6 / pkts,
    )


def bench_args(doc: str, parts: str) -> argparse.Namespace:
    """--quick, --only (a subset of the comma-separated *parts*) and --repeat; ``only`` is returned as a set."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="shorter runs, fewer points")
    ap.add_argument("--only", default=parts, help=f"comma-separated subset of {parts}")
    ap.add_argument("--repeat", type=int, default=None, help="runs per delay point (default 3, --quick 1)")
    args = ap.parse_args()
    args.only = set(args.only.split(","))
    args.repeat = args.repeat or (1 if args.quick else 3)
    return args


def missing_binaries() -> bool:
    """True (after saying what to do) if linkemu or linkemu-probe is not built."""
    for b in (binary_path(), PROBE):
        if not b.is_file():
            print(f"{b} is not built; run scripts/setup.sh", file=sys.stderr)
            return True
    return False


def run_parts(only: set[str], parts: dict[str, Callable[[Topology], bool | None]]) -> int:
    """Run the *parts* named in *only*, in order, in one 1-client topology.

    A part returns its verdict (True: met its targets) or None (a report
    without one).  Prints the verdicts; returns the exit status (0: all met).
    """
    results = {}
    with Topology(1) as topo:
        for name, part in parts.items():
            if name in only:
                verdict = part(topo)
                if verdict is not None:
                    results[name] = verdict
    print("\n" + ", ".join(f"{k}: {'PASS' if v else 'FAIL'}" for k, v in results.items()))
    return 0 if all(results.values()) else 1
