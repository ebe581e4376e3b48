"""The `remote` CC closed over the policy server on the testbed, then the server killed.

sender -> router (tbf, --rate Mbit/s, 20 ms queue) -> receiver namespaces;
`ccswitch policy serve` (delay-aimd, batch 2 ms) in the receiver's namespace,
so requests cross the loaded bottleneck; the sender's loop
(`python -m ccswitch.remote.sender --local none`, step 0.1 s, kernel
deadline 0.3 s) in the sender's.  One iperf3 flow on `remote` for --seconds;
the server is SIGKILLed half way.  Prints, for the remote half and the
fallback half: goodput (iperf3, per second), cwnd and srtt (the kernel's
exported state, every 0.1 s), the mode; the control loop's request->answer
time; how long after the kill the kernel fell back.

    sudo .venv/bin/python bench/remote_closed_loop.py [--rate 20] [--seconds 20] [--l4s]
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from ccswitch.bpf.remote import MODES, ensure_remote
from ccswitch.remote.protocol import write_key
from ccswitch.testbed.runs.iperf import start_flow, start_server
from ccswitch.testbed.runs.netns import Bottleneck, popen_in, stop_process

PORT, IPERF_PORT, DEADLINE_S = 7181, 5481, 0.3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rate", type=float, default=20.0, help="bottleneck, Mbit/s")
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--l4s", action="store_true", help="control traffic as L4S (DSCP 40 + ECT(1))")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="remote-loop-") as tmp:
        return measure(args, Path(tmp))


def measure(args: argparse.Namespace, tmp: Path) -> int:
    key, steps = tmp / "key", tmp / "steps.jsonl"
    write_key(key)
    l4s = ["--l4s"] if args.l4s else []
    samples: list[tuple[float, int, int, str]] = []
    h = ensure_remote()
    try:
        h.configure(DEADLINE_S)
        with Bottleneck(rate_mbit=args.rate, router=True) as bn:
            srv = popen_in(bn.receiver, [sys.executable, "-c", "from ccswitch.cli import main; main()", "policy",
                                         "serve", "--listen", f"{bn.receiver_addr}:{PORT}", "--key", str(key),
                                         "--no-cca", *l4s], stderr=subprocess.PIPE, text=True)
            assert srv.stderr is not None and "listening" in srv.stderr.readline()
            with start_server(bn.receiver, IPERF_PORT, bind=bn.receiver_addr):
                flow = start_flow(bn.sender, bn.receiver_addr, IPERF_PORT, cca="remote", seconds=args.seconds)
                ctl = popen_in(bn.sender, [sys.executable, "-m", "ccswitch.remote.sender", "--server",
                                           f"{bn.receiver_addr}:{PORT}", "--key", str(key), "--local", "none",
                                           "--kernel-deadline", str(DEADLINE_S), "--log", str(steps), *l4s],
                               stderr=subprocess.PIPE, text=True)
                t0, kill = time.monotonic(), None
                while (t := time.monotonic() - t0) < args.seconds - 0.5:
                    obs = h.observations()
                    if len(obs):
                        o = obs[np.argmax(obs["delivered"])]
                        samples.append((t, int(o["cwnd"]), int(o["srtt_us"]), MODES[int(o["mode"])]))
                    if kill is None and t > args.seconds / 2:
                        srv.send_signal(signal.SIGKILL)
                        kill = t
                    time.sleep(0.1)
                res = flow.wait(timeout=args.seconds + 30)
                stop_process(ctl, 5.0)
                stop_process(srv, 1.0)
    finally:
        h.close()
    assert kill is not None
    rates = [iv.bits_per_second / 1e6 for iv in res.intervals]
    print(f"per-second goodput, Mbit/s: {[round(r, 1) for r in rates]}")
    half = int(kill)
    for name, lo, hi, r in (("remote", 2, kill, rates[2:half]), ("fallback", kill + 1, 1e9, rates[half + 1:])):
        ss = [s for s in samples if lo < s[0] < hi]
        print(f"{name:>8}: goodput {statistics.mean(r):.1f} Mbit/s, cwnd p50 {statistics.median(s[1] for s in ss):.0f} "
              f"(min {min(s[1] for s in ss)}, max {max(s[1] for s in ss)}), srtt p50 "
              f"{statistics.median(s[2] for s in ss) / 1000:.1f} ms, modes {sorted({s[3] for s in ss})}")
    lines = [json.loads(line) for line in steps.read_text().splitlines()]
    rtts = [s["rtt_ms"] for s in lines if s.get("remote") and s.get("rtt_ms")]
    print(f"control loop request->answer, ms: p50 {np.percentile(rtts, 50):.1f}, p90 {np.percentile(rtts, 90):.1f}, "
          f"p99 {np.percentile(rtts, 99):.1f} ({len(rtts)} remote steps)")
    first_fb = next((s[0] for s in samples if s[0] > kill and s[3] == "fallback"), None)
    print("kernel fallback after the kill: " + (f"{first_fb - kill:.2f} s" if first_fb else "never"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
