"""Link-emulator fidelity: configured vs measured rate and delay, and the highest forwarding rate.

Builds a 1-client topology (client, router and server namespaces, see
ccswitch.testbed.runs.topology), runs linkemu in the router and measures at the
endpoints, outside the emulator, with ``linkemu-probe`` (built with linkemu: a
sendmmsg-paced UDP sender that stamps CLOCK_REALTIME into each datagram, and a
receiver that reads the kernel's receive timestamp, so one-way delay is
measured on one clock; iperf3's one-datagram-per-syscall sender cannot drive
more than ~100 Mbit/s on this 2-core VM next to the emulator):

1. rate: for each configured rate, UDP (1400-byte payload) offered at 1.2x
   the rate into a pfifo(1000) bottleneck; measured = the receiver's IP-level
   rate over the steady window (1 s trimmed at both ends).  Target: within 2 %.
   The emulator's own intervals.csv rate is shown beside it.
2. delay: one-way delay of 64-byte probes (1000/s) client -> server on an
   unlimited-rate link with the configured delay, idle and with a 100 Mbit/s
   UDP background flow on the same path: error = measured - configured.  The
   probe sender runs SCHED_FIFO (below linkemu) so that its own preemption
   between timestamp and send() is not counted against the emulator.
   Target: p99 |error| < 200 us.  "base" is the same path with delay 0 (veth,
   emulator and probe overhead, included in the raw errors); "corr" subtracts
   the base median.
3. max rate: unlimited rate, 5 ms delay, offered rate stepped up: the highest
   rate forwarded without falling behind (delivered >= 98 % of sent, linkemu's
   tx lateness p99 < 1 ms, no socket drops, < 1 % loss).

Prints configured vs measured side by side; exit status 0 when rate and delay
meet their targets.  The VM is shared with other tenants whose bursts stall it
for milliseconds at random moments (linkemu's own tx lateness shows them), so
each delay point runs 3 times and the verdict uses the median run; all runs
are printed.

    sudo .venv/bin/python bench/emulator_fidelity.py [--quick] [--only rate,delay,max]
"""

from __future__ import annotations

import statistics
import sys

from _linkemu_probe import (
    DELAY_TARGET_US,
    LOAD_MBIT,
    PAYLOAD,
    RATE_TARGET,
    Receiver,
    bench_args,
    delay_run,
    forward_run,
    missing_binaries,
    pct,
    run_parts,
    send,
)

from ccswitch.testbed.runs.emulator import Emulator, emulator_config, link
from ccswitch.testbed.runs.topology import Topology


def emulator_rate(emu: Emulator) -> float:
    rows = [r for r in emu.intervals() if r["direction"] == "uplink" and r["client"] == "-1"]
    full = [float(r["rate_mbit"]) for r in rows[1:-1]]  # whole intervals only
    return statistics.median(full) if full else float("nan")


# --------------------------------------------------------------- rate ---


def bench_rate(topo: Topology, rates: list[float], seconds: float) -> bool:
    print("\n== rate: configured vs measured (UDP offered at 1.2x, pfifo 1000) ==")
    print(f"{'configured':>10} {'measured':>10} {'error':>8} {'emulator':>10} {'offered':>9}  verdict")
    ok_all = True
    for i, rate in enumerate(rates):
        cfg = emulator_config(topo.client_ifs, topo.server_if, uplink=link(rate, 1, limit_pkts=1000),
                              downlink=link(None, 1))
        with Emulator(topo.router, cfg) as emu:
            rcv = Receiver(topo, 6100 + i)
            sent = send(topo, 6100 + i, seconds, rate_mbit=1.2 * rate)
            got = rcv.result()
        measured = got.get("rate_mbit_steady") or float("nan")
        err = measured / rate - 1
        if sent["rate_mbit"] < 1.02 * rate:
            verdict = "n/a (the sender could not exceed the rate)"
        else:
            ok = abs(err) <= RATE_TARGET
            ok_all &= ok
            verdict = f"{'PASS' if ok else 'FAIL'} (target +-{RATE_TARGET * 100:.0f}%)"
        print(f"{rate:8.1f} M {measured:8.2f} M {err * 100:+7.2f}% {emulator_rate(emu):8.2f} M "
              f"{sent['rate_mbit']:7.1f} M  {verdict}")
    return ok_all


# -------------------------------------------------------------- delay ---


def bench_delay(topo: Topology, delays_ms: list[float], count: int, repeat: int) -> bool:
    print(f"\n== delay: configured vs measured one-way delay (64-byte probes, 1000/s, {count} per run) ==")
    if repeat > 1:
        print(f"   each point {repeat} times; the verdict uses the median run (the host is shared: single runs "
              "can catch another tenant's burst)")
    ok_all = True
    port = 6200
    for loaded in (False, True):
        base, _ = delay_run(topo, 0.0, count, loaded, port)
        port += 2
        b50 = statistics.median(base)
        label = f"with {LOAD_MBIT:g} Mbit/s of UDP on the same path" if loaded else "idle"
        print(f"-- {label}: base path (delay 0) p50 {b50:.0f} us, p99 {pct(base, 99):.0f} us")
        print(f"{'configured':>10} {'meas p50':>10} {'meas p99':>10} {'err p50':>8} {'err p99':>8} "
              f"{'|err| p99':>9} {'corr p99':>9} {'emu late p99':>12}  verdict")
        for dm in delays_ms:
            runs = []
            for _ in range(repeat):
                owd, late = delay_run(topo, dm, count, loaded, port)
                port += 2
                if len(owd) < 0.99 * count:
                    print(f"{dm:8.1f} ms  only {len(owd)}/{count} probes arrived")
                    runs.append(float("inf"))
                    continue
                err = [x - dm * 1000 for x in owd]
                abs_p99 = pct([abs(x) for x in err], 99)
                corr_p99 = pct([abs(x - b50) for x in err], 99)
                runs.append(abs_p99)
                print(f"{dm:8.1f} ms {pct(owd, 50) / 1000:8.3f} ms {pct(owd, 99) / 1000:8.3f} ms "
                      f"{pct(err, 50):6.0f} us {pct(err, 99):6.0f} us {abs_p99:7.0f} us {corr_p99:7.0f} us "
                      f"{late['p99']:10.0f} us")
            med = statistics.median(runs)
            ok = med < DELAY_TARGET_US
            ok_all &= ok
            print(f"{'':>10} median |err| p99 {med:.0f} us: {'PASS' if ok else 'FAIL'} "
                  f"(target < {DELAY_TARGET_US:.0f} us)")
    return ok_all


# ----------------------------------------------------------- max rate ---


def bench_max(topo: Topology, offered: list[float], seconds: float) -> None:
    print("\n== max forwarding rate: unlimited link, 5 ms delay, UDP 1428-byte packets ==")
    print(f"{'offered':>8} {'sent':>8} {'delivered':>10} {'kpps':>6} {'loss':>6} {'late p99':>9} "
          f"{'sock drops':>10}  verdict")
    best = 0.0
    for i, off in enumerate(offered):
        f = forward_run(topo, off, seconds, 6300 + i)
        if f.keeps_up:
            best = max(best, f.delivered_mbit)
        note = "" if f.sent_mbit >= 0.97 * off else " (the sender fell short of the offered rate)"
        print(f"{off:6.0f} M {f.sent_mbit:6.1f} M {f.delivered_mbit:8.1f} M {f.kpps:6.1f} {f.loss * 100:5.1f}% "
              f"{f.late_p99_us:7.0f} us {f.socket_drops:10d}  {'keeps up' if f.keeps_up else 'falls behind'}{note}")
    print(f"highest rate forwarded without falling behind: {best:.0f} Mbit/s "
          f"({best * 1e6 / 8 / (PAYLOAD + 28) / 1000:.1f} kpps of 1428-byte packets)")


def main() -> int:
    args = bench_args(__doc__, "rate,delay,max")
    if missing_binaries():
        return 2
    rates = [10, 50, 100] if args.quick else [10, 50, 100, 200, 300]
    delays = [1, 20] if args.quick else [1, 5, 20, 50]
    count = 3000 if args.quick else 5000
    repeat = args.repeat
    offered = [100, 300, 600] if args.quick else [100, 200, 300, 400, 500, 600, 800]
    seconds = 4 if args.quick else 6
    return run_parts(args.only, {
        "rate": lambda topo: bench_rate(topo, rates, seconds),
        "delay": lambda topo: bench_delay(topo, delays, count, repeat),
        "max": lambda topo: bench_max(topo, offered, seconds),
    })


if __name__ == "__main__":
    sys.exit(main())
