"""The sender's control loop for the `remote` CC: observe, ask, apply, every step.

Every `step_s` (0.1 s, RL-TCP's step):

1. sock_diag assigns cookies to new sockets (bpf/remote.py touch_cookies);
2. the kernel's per-socket state (ccs_remote_obs) is read and turned into one
   CWND_OBS record per socket: the cumulative counters differenced against
   the previous step (packets delivered, lost, CE-marked; mean RTT and mean
   in-flight over the step's ACKs -- the kernel's ack_sample.in_flight is in
   bytes, mss x packets delivered since the acked packet was sent, so the
   sum is divided by the mss here);
3. the policy server decides (PolicyClient.cwnd, one datagram for all
   sockets); on any failure the local agent decides, or nobody (local=None);
4. the decisions are written to ccs_remote_dec with this step's seq and the
   time the state was read as stamp, so the kernel's deadline counts from
   the observation.  With no decision (server failed, no local agent) the
   sockets are *released* (a decision with cwnd RELEASE): the kernel falls
   back to Reno at their next ACK, in the step that found the failure, not
   2-3 steps later when the last decision passes the kernel's deadline.
   That deadline stays as the backstop for a loop that stopped altogether
   (killed, or stalled on a loaded host).

`python -m ccswitch.remote.sender --server HOST:PORT --key FILE` runs it
(in the sender's network namespace); `--log FILE.jsonl` writes one line per
step (for tests and plots).
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import IO, Any

import numpy as np

from ccswitch.bpf import remote as rbpf
from ccswitch.remote import protocol as p
from ccswitch.remote.agents import CwndAgent, cwnd_agent
from ccswitch.remote.client import L4S_TOS, PolicyClient
from ccswitch.remote.server import parse_hostport

log = logging.getLogger("ccswitch.remote.sender")


def step_observations(cur: np.ndarray, prev: dict[int, np.void], step_us: int) -> np.ndarray:
    """CWND_OBS records from the kernel's OBS snapshot *cur* and the previous one (by cookie)."""
    out = np.zeros(len(cur), dtype=p.CWND_OBS)
    for i, r in enumerate(cur):
        before = prev.get(int(r["cookie"]))

        def d(name: str, r: np.void = r, before: np.void | None = before) -> int:
            return int(r[name]) - (int(before[name]) if before is not None else 0)

        acks, rtt_n = d("acks"), d("rtt_cnt")
        out[i] = (r["cookie"], step_us, r["cwnd"], min(int(r["ssthresh"]), 0xFFFFFFFF), max(int(r["mss"]), 1),
                  r["inflight"], max(d("delivered"), 0), max(d("lost"), 0), max(d("delivered_ce"), 0),
                  r["srtt_us"], r["min_rtt_us"], d("rtt_sum_us") // rtt_n if rtt_n > 0 else 0,
                  d("inflight_sum") // acks // max(int(r["mss"]), 1) if acks > 0 else r["inflight"])
    out["cwnd"] = np.minimum(out["cwnd"], p.CWND_MAX)
    return out


@dataclass
class CwndController:
    handle: rbpf.RemoteHandle
    client: PolicyClient | None
    local: CwndAgent | None
    step_s: float = 0.1
    seqs: dict[int, int] = field(default_factory=dict)
    prev: dict[int, np.void] = field(default_factory=dict)
    remote_steps: int = 0
    local_steps: int = 0
    idle_steps: int = 0
    last_read: int = 0

    def step(self) -> dict[str, Any]:
        """One control step; a summary for the log."""
        rbpf.touch_cookies()
        stamp = rbpf.now_ns()
        cur = self.handle.observations()
        # the step's measured length (a step made late by a slow answer covers more time)
        step_us = (stamp - self.last_read) // 1000 if self.last_read else int(self.step_s * 1e6)
        self.last_read = stamp
        obs = step_observations(cur, self.prev, max(int(step_us), 1))
        self.prev = {int(r["cookie"]): r for r in cur}
        self.forget_closed()
        if not len(obs):
            return {"flows": 0}
        local = self.local.decide if self.local is not None else None
        if self.client is not None:
            dec, remote = self.client.cwnd(obs, local)
        else:
            dec, remote = (local(obs) if local else None), False
        if dec is None:
            self.idle_steps += 1
            self.release(obs["cookie"], stamp)
        else:
            self.apply(dec, stamp)
            self.remote_steps += remote
            self.local_steps += not remote
        return {"t": time.time(), "flows": len(obs), "remote": remote, "decided": dec is not None,
                "released": dec is None,
                "rtt_ms": round(self.client.last_rtt_s * 1000, 3) if self.client and self.client.last_rtt_s else None,
                "obs": [{"cookie": int(o["cookie"]), "cwnd": int(o["cwnd"]), "mode": rbpf.MODES[int(m)],
                         "fallbacks": int(f), "acked": int(o["acked"]), "lost": int(o["lost"])}
                        for o, m, f in zip(obs, cur["mode"], cur["fallbacks"], strict=True)],
                "dec": [int(c) for c in dec["cwnd"]] if dec is not None else None}

    def forget_closed(self) -> None:
        """Delete decisions of sockets that are gone (written after the kernel's release() cleaned up)."""
        gone = [c for c in self.seqs if c not in self.prev]
        if gone:
            self.handle.withdraw(gone)
            for c in gone:
                del self.seqs[c]

    def next_seqs(self, cookies: np.ndarray) -> list[int]:
        """This step's decision seq per socket (per socket increasing; the kernel ignores seq 0)."""
        seqs = []
        for c in cookies:
            s = self.seqs.get(int(c), 0) + 1
            self.seqs[int(c)] = s
            seqs.append(s)
        return seqs

    def apply(self, dec: np.ndarray, stamp: int) -> None:
        self.handle.write(dec["cookie"].tolist(), rbpf.decision_records(
            dec["cwnd"], self.next_seqs(dec["cookie"]), [stamp] * len(dec), dec["ssthresh"], dec["max_pacing_Bps"]))

    def release(self, cookies: np.ndarray, stamp: int) -> None:
        """No decision this step: the kernel falls back now rather than at its deadline."""
        self.handle.release(cookies.tolist(), self.next_seqs(cookies), stamp)

    def run(self, stop: list[bool], out: IO[str] | None = None) -> None:
        nxt = time.monotonic()
        while not stop:
            summary = self.step()
            if out is not None:
                out.write(json.dumps(summary) + "\n")
                out.flush()
            nxt += self.step_s
            time.sleep(max(0.0, nxt - time.monotonic()))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ccswitch.remote.sender", description=__doc__.split("\n")[0])
    ap.add_argument("--server", help="HOST:PORT of `ccswitch policy serve` (none: local agent only)")
    ap.add_argument("--key", help="shared key file (with --server)")
    ap.add_argument("--step", type=float, default=0.1, help="seconds per step (RL-TCP: 0.1)")
    ap.add_argument("--deadline", type=float, default=0.05, help="seconds to wait for the server per step")
    ap.add_argument("--kernel-deadline", type=float, default=rbpf.DEFAULT_DEADLINE_S,
                    help="decision age after which the kernel falls back to Reno")
    ap.add_argument("--local", default="none", help="local agent on server failure: delay-aimd, rl-tcp or none "
                    "(none: the sockets are released to the kernel's Reno fallback in the same step)")
    ap.add_argument("--l4s", action="store_true", help="send the control traffic as L4S (DSCP 40 + ECT(1))")
    ap.add_argument("--log", type=argparse.FileType("a"), help="one JSON line per step")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        local = None if args.local == "none" else cwnd_agent(args.local)
        client = None
        if args.server:
            if not args.key:
                raise ValueError("--server needs --key")
            client = PolicyClient(parse_hostport(args.server), p.load_key(args.key), deadline_s=args.deadline,
                                  tos=L4S_TOS if args.l4s else 0)
        handle = rbpf.ensure_remote()
    except Exception as e:
        print(f"remote sender: error: {e}", file=sys.stderr)
        return 1
    stop: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    signal.signal(signal.SIGINT, lambda *_: stop.append(True))
    try:
        handle.configure(args.kernel_deadline)
        log.info("controlling `remote` sockets every %.3f s (%s, server %s)", args.step, handle.source,
                 args.server or "none")
        ctl = CwndController(handle, client, local, args.step)
        ctl.run(stop, args.log)
        log.info("stopped: %d remote steps, %d local, %d undecided; fallbacks %s", ctl.remote_steps,
                 ctl.local_steps, ctl.idle_steps, dict(client.fallbacks) if client else {})
    finally:
        handle.close()
        if client is not None:
            client.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
