"""Issue 15's fallback target on the testbed: how soon after the policy server dies is a step decided without it?

Set-up as tests/test_remote_cc.py: sender -> router (tbf, --rate Mbit/s, 20 ms
queue; overflow is real loss) -> receiver namespaces, `ccswitch policy serve`
(delay-aimd, --no-cca) in the receiver's namespace, so the requests cross the
loaded bottleneck; the sender loop (`python -m ccswitch.remote.sender`, step
0.1 s = RL-TCP's, client deadline --deadline, kernel deadline
--kernel-deadline) in the sender's; one iperf3 flow on `remote` for
--seconds; the server SIGKILLed at --kill-at.  Two modes, alternated per rep:

* `--local none`: once the server is gone the sender has no decision for
  its step and *releases* the socket (a decision with cwnd RELEASE), so the
  kernel falls back to Reno at the next ACK; the kernel's deadline is only
  the backstop for a sender loop that stopped (before 27 Nov the sender
  wrote nothing and the deadline was the takeover: 0.24-0.29 s).  Takeover =
  the kernel's mode switch to "fallback" on the data socket (ccs_remote_obs,
  polled every 5 ms after the kill).
* `--local AGENT` (--local-agent, default delay-aimd): the sender decides
  locally after its client deadline.  Takeover = the first step of the
  sender's log (--log) after the kill with remote false and a decision.

Printed per run: remote steps before the kill and the kernel's mode at it (a
run counts only if the server was in control), the first step without the
server (seconds after the kill; the client's reason from its warning), the
takeover, the longest gap between two sender steps within 1 s of the kill,
the kernel's fallbacks after the kill, the flow's goodput after the kill
(iperf3, per second: mean and min; "kept sending" = every second > 0.2 of
the link); then p50/max of the takeover per mode in seconds and in decision
intervals (0.1 s steps), the steps left undecided (neither decided nor
released) between the kill and the
takeover, and a verdict against "within one decision interval".  Ctrl-C or
SIGTERM: the namespaces, processes and the `remote` registration are cleaned up.

    sudo .venv/bin/python bench/remote_fallback.py [--reps 3] [--rate 20] [--seconds 12] [--kill-at 6]
        [--local-agent delay-aimd|rl-tcp] [--deadline 0.05] [--kernel-deadline 0.3]
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from ccswitch.bpf.remote import MODES, RemoteHandle, ensure_remote
from ccswitch.host import available_ccas
from ccswitch.remote.agents import CWND_AGENTS
from ccswitch.remote.protocol import write_key
from ccswitch.testbed.runs.iperf import start_flow, start_server
from ccswitch.testbed.runs.netns import Bottleneck, missing_tools, popen_in, stop_process, wait_for_stderr

PORT, IPERF_PORT, STEP_S = 7191, 5491, 0.1
MIN_REMOTE_STEPS = 20  # a run counts if the server decided this many steps before the kill and the kernel
# applied its decisions at the kill (a loaded host can stall the loop into a fallback before it)
KEPT_SHARE = 0.2  # "kept sending": every second after the kill above this share of the link
SERVE = [sys.executable, "-c", "from ccswitch.cli import main; main()", "policy", "serve"]


def data_socket(h: RemoteHandle) -> np.void | None:
    """The exported state of the flow's data socket (the one that delivered most), as the test reads it."""
    obs = h.observations()
    return obs[np.argmax(obs["delivered"])] if len(obs) else None


def run_once(local: str, args: argparse.Namespace, h: RemoteHandle, key: Path, tmp: Path, tag: str
             ) -> dict[str, Any]:
    """One flow with the server, the server killed at --kill-at; the measurements of one row."""
    steps, err = tmp / f"steps-{tag}.jsonl", tmp / f"sender-{tag}.err"
    kernel_fb: float | None = None
    with Bottleneck(rate_mbit=args.rate, router=True) as bn, err.open("w") as errf:
        srv = popen_in(bn.receiver, [*SERVE, "--listen", f"{bn.receiver_addr}:{PORT}", "--key", str(key),
                                     "--no-cca"], stderr=subprocess.PIPE)
        ctl = None
        try:
            wait_for_stderr(srv, b"listening on")
            # the sender loop first, so that a slow start on a loaded host does not eat the controlled part
            ctl = popen_in(bn.sender, [sys.executable, "-m", "ccswitch.remote.sender", "--server",
                                       f"{bn.receiver_addr}:{PORT}", "--key", str(key), "--local", local,
                                       "--step", str(STEP_S), "--deadline", str(args.deadline),
                                       "--kernel-deadline", str(args.kernel_deadline), "--log", str(steps)],
                           stderr=errf)
            ready = time.monotonic() + 30
            while "controlling" not in err.read_text():
                if ctl.poll() is not None or time.monotonic() > ready:
                    raise RuntimeError(f"the sender loop did not start: {err.read_text().strip()[-300:]}")
                time.sleep(0.05)
            with start_server(bn.receiver, IPERF_PORT, bind=bn.receiver_addr), \
                    start_flow(bn.sender, bn.receiver_addr, IPERF_PORT, cca="remote", seconds=args.seconds) as flow:
                t0 = time.monotonic()
                time.sleep(max(0.0, t0 + args.kill_at - time.monotonic()))
                before = data_socket(h)
                srv.send_signal(signal.SIGKILL)
                kill_wall, kill_mono = time.time(), time.monotonic()
                while time.monotonic() < kill_mono + max(1.0, 3 * args.kernel_deadline):
                    o = data_socket(h)
                    if o is not None and MODES[int(o["mode"])] == "fallback":
                        kernel_fb = time.monotonic() - kill_mono
                        break
                    time.sleep(0.005)
                srv.wait(5)
                time.sleep(max(0.0, t0 + args.seconds - 1.0 - time.monotonic()))
                end = data_socket(h)  # the data socket's fallback counter while it still exists
                res = flow.wait(timeout=args.seconds + 20)
                alive = ctl.poll() is None
        finally:
            if ctl is not None:
                stop_process(ctl, 5.0)
            stop_process(srv, 2.0)
    lines = [json.loads(line) for line in steps.read_text().splitlines()] if steps.exists() else []
    active = [s for s in lines if s.get("flows")]
    after = [s for s in active if s["t"] > kill_wall]
    first_nr = next((s for s in after if not s["remote"]), None)
    first_dec = next((s for s in after if not s["remote"] and s["decided"]), None)
    if local == "none":
        takeover = kernel_fb  # the sender's release (or, failing that, the kernel's deadline)
        missed = sum(1 for s in after if not s["remote"] and not s["decided"] and not s.get("released")
                     and (takeover is None or s["t"] - kill_wall < takeover))
    else:
        takeover = first_dec["t"] - kill_wall if first_dec is not None else None
        missed = sum(1 for s in after if not s["remote"] and not s["decided"]
                     and (first_dec is None or s["t"] < first_dec["t"]))
    warn = next((line for line in err.read_text().splitlines() if "WARNING" in line and "policy server" in line), "")
    reason = next((r for r in ("unreachable", "timeout", "garbage") if r in warn), "-")
    fb0 = int(before["fallbacks"]) if before is not None else 0
    fb1 = int(end["fallbacks"]) if end is not None else fb0
    rates = [iv.bits_per_second / 1e6 for iv in res.intervals]
    tail = rates[int(args.kill_at) + 1:]
    near = [s["t"] for s in active if kill_wall - 1 < s["t"] < kill_wall + 1]
    mode_at_kill = MODES[int(before["mode"])] if before is not None else "-"
    remote_before = sum(1 for s in active if s["t"] < kill_wall and s["remote"])
    return {"remote_before": remote_before,
            "valid": remote_before >= MIN_REMOTE_STEPS and mode_at_kill == "applied", "mode_at_kill": mode_at_kill,
            "gap": max((b - a for a, b in itertools.pairwise(near)), default=None),
            "steps_before": sum(1 for s in active if s["t"] < kill_wall),
            "first_nr": first_nr["t"] - kill_wall if first_nr is not None else None, "reason": reason,
            "takeover": takeover, "kernel_fb": kernel_fb, "missed": missed, "kernel_fallbacks": fb1 - fb0,
            "remote_after": sum(1 for s in after if s["remote"] and s["t"] > kill_wall + 0.2),
            "tail_mean": statistics.fmean(tail) if tail else 0.0, "tail_min": min(tail) if tail else 0.0,
            "kept": bool(tail) and min(tail) > KEPT_SHARE * args.rate, "alive": alive}


class _Parser(argparse.ArgumentParser):
    """argparse with its errors on one line (no usage block)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The options, checked before any kernel or namespace work: bad values exit 2 with one line."""
    ap = _Parser(prog="remote_fallback.py", description=" ".join((__doc__ or "").split("\n\n")[0].split()))
    ap.add_argument("--reps", type=int, default=3, help="runs per mode (default 3)")
    ap.add_argument("--rate", type=float, default=20.0, help="bottleneck, Mbit/s (default 20, as the test)")
    ap.add_argument("--seconds", type=int, default=12, help="flow length, s (default 12)")
    ap.add_argument("--kill-at", type=float, default=6.0, help="SIGKILL the server this many s into the flow")
    ap.add_argument("--local-agent", default="delay-aimd", choices=list(CWND_AGENTS),
                    help="the sender's local agent of the second mode (`--local`; default delay-aimd)")
    ap.add_argument("--deadline", type=float, default=0.05,
                    help="s the sender waits for the server per step (the sender's default 0.05)")
    ap.add_argument("--kernel-deadline", type=float, default=0.3,
                    help="decision age, s, after which the kernel falls back (default 0.3, as the test)")
    args = ap.parse_args(argv)
    if args.reps < 1:
        ap.error(f"--reps {args.reps}: at least 1")
    if not 1 <= args.rate <= 1000:
        ap.error(f"--rate {args.rate:g}: 1..1000 Mbit/s")
    if not 0 < args.deadline < STEP_S:
        ap.error(f"--deadline {args.deadline:g}: above 0 and below the {STEP_S:g} s step")
    if not STEP_S <= args.kernel_deadline <= 5:
        ap.error(f"--kernel-deadline {args.kernel_deadline:g}: {STEP_S:g}..5 s")
    if not 3 <= args.kill_at <= args.seconds - 3:
        ap.error(f"--kill-at {args.kill_at:g}: at least 3 s into the flow and 3 s before its end "
                 f"(--seconds {args.seconds})")
    return args


def _s(x: float | None) -> str:
    return "never" if x is None else f"{x:.3f}"


def _steps(x: float | None) -> str:
    return "-" if x is None else f"{x / STEP_S:.2f}"


_MAIN_PID = os.getpid()


def _on_sigterm(*_: object) -> NoReturn:
    """SIGTERM as Ctrl-C, in this process only: pyroute2's forked helpers inherit the handler and are
    SIGTERMed by design; they must exit, not unwind our stack (and tear our namespaces down)."""
    if os.getpid() != _MAIN_PID:
        os._exit(128 + signal.SIGTERM)
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if os.geteuid() != 0:
        print("remote_fallback.py: error: needs root (namespaces, BPF struct_ops)", file=sys.stderr)
        return 1
    if missing := missing_tools():
        print(f"remote_fallback.py: error: missing from PATH: {', '.join(missing)}", file=sys.stderr)
        return 1
    if "remote" in available_ccas():  # another experiment's: configuring its deadline would change its runs
        print("remote_fallback.py: error: `remote` is already registered by another process; run when it is gone",
              file=sys.stderr)
        return 1
    signal.signal(signal.SIGTERM, _on_sigterm)
    modes = ["none", args.local_agent]
    print(f"remote fallback after SIGKILL of the policy server: {args.rate:g} Mbit/s tbf (router, 20 ms queue), "
          f"step {STEP_S:g} s, client deadline {args.deadline:g} s, kernel deadline {args.kernel_deadline:g} s, "
          f"flow {args.seconds} s, kill at {args.kill_at:g} s, {args.reps} reps per mode; "
          f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, load average {os.getloadavg()[0]:.2f} "
          f"on {os.cpu_count()} CPUs", flush=True)
    results: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    h = None
    try:
        with tempfile.TemporaryDirectory(prefix="remote-fallback-") as tmp_s:
            tmp = Path(tmp_s)
            key = tmp / "key"
            write_key(key)
            h = ensure_remote()
            h.configure(args.kernel_deadline)
            print(f"{'rep':>3} {'--local':>10} {'remote steps':>12} {'mode at kill':>12} {'1st w/o server s':>16} "
                  f"{'reason':>11} {'takeover s':>10} {'steps':>5} {'step gap s':>10} {'kernel fb s':>11} "
                  f"{'kernel fbs':>10} {'Mbit/s after (min)':>18} {'kept':>4}", flush=True)
            for rep in range(1, args.reps + 1):
                for mode in modes:
                    r = run_once(mode, args, h, key, tmp, f"{mode}-{rep}")
                    results[mode].append(r)
                    notes = ([] if r["valid"] else ["not counted: the server was not in control at the kill"]) + \
                        ([] if r["alive"] else ["the sender loop died"]) + \
                        ([f"{r['remote_after']} remote steps > 0.2 s after the kill"] if r["remote_after"] else [])
                    print(f"{rep:>3} {mode:>10} {r['remote_before']:>5}/{r['steps_before']:<6} {r['mode_at_kill']:>12} "
                          f"{_s(r['first_nr']):>16} {r['reason']:>11} {_s(r['takeover']):>10} "
                          f"{_steps(r['takeover']):>5} {_s(r['gap']):>10} {_s(r['kernel_fb']):>11} "
                          f"{r['kernel_fallbacks']:>10} {r['tail_mean']:>10.1f} ({r['tail_min']:>4.1f}) "
                          f"{'yes' if r['kept'] else 'NO':>4}" + "".join(f"  ({n})" for n in notes), flush=True)
    except KeyboardInterrupt:
        print("interrupted: namespaces, processes and the `remote` registration cleaned up", file=sys.stderr)
        return 130
    finally:
        if h is not None:
            h.close()
        if "remote" in available_ccas():
            print("remote_fallback.py: warning: `remote` is still registered (another process?)", file=sys.stderr)
    print(f"\n{'--local':>10} {'takeover by':>23} {'runs':>5} {'p50 s':>6} {'max s':>6} {'p50 steps':>9} "
          f"{'max steps':>9} {'undecided steps':>15} {'max step gap s':>14} {'kept sending':>12}  "
          f"within one decision interval ({STEP_S:g} s)?")
    for mode in modes:
        rs = [r for r in results[mode] if r["valid"]]
        got = [r["takeover"] for r in rs if r["takeover"] is not None]
        p50, mx = (statistics.median(got), max(got)) if got else (None, None)
        missed = "-" if not rs else str(max(r["missed"] for r in rs))
        gap = max((r["gap"] for r in rs if r["gap"] is not None), default=None)
        if not rs:
            verdict = "no valid run"
        elif len(got) == len(rs) and mx is not None and mx <= STEP_S:
            verdict = "yes"
        else:
            verdict = f"no (max {mx / STEP_S:.1f} intervals)" if len(got) == len(rs) and mx is not None else \
                f"no ({len(rs) - len(got)} runs never took over)"
        print(f"{mode:>10} {'kernel (mode fallback)' if mode == 'none' else 'sender (local decision)':>23} "
              f"{len(rs):>2}/{len(results[mode]):<2} {_s(p50):>6} {_s(mx):>6} {_steps(p50):>9} {_steps(mx):>9} "
              f"{missed:>15} {_s(gap):>14} {sum(r['kept'] for r in rs):>5}/{len(rs):<6}  {verdict}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
