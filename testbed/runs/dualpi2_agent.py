"""Paper 000's agent beside linkemu: sets DualPI2's p' (or a factor on the PI's p') from an actor file every
control interval.

The observation, action mapping, reward and the actor file are defined in
:mod:`ccswitch.models.dualpi2_actor` (module docstring: what the agent sees and
does, and where it deviates from paper 000); this module is the loop that runs
it against a live linkemu through its control socket
(:mod:`.linkemu_control`).  The testbed runner starts one for every dualpi2
queue whose scenario table names an ``agent``.

A ``residual-k`` actor also sets the coupling factor k every interval, a ``k`` actor only k (p' stays
the PI controller's). linkemu's lease (``hold_ms``) covers k as well as the factor: a loop that hangs
leaves the configuration's k once the lease runs out. As a second line the loop gives k back to the
scenario's value (``k_restore``) itself: at ``stop()``, and at once when the loop fails (a refused set,
linkemu unreachable: it reconnects for that one set).
"""

from __future__ import annotations

import contextlib
import csv
import logging
import time
from pathlib import Path

from ccswitch.models.dualpi2_actor import (
    K_MODES,
    LEASE_INTERVALS,
    Actor,
    Observer,
    control_params,
    features_for,
    reward,
    state_keys_for,
)

from .linkemu_control import LinkemuControl, LinkemuControlError
from .router_agent import RouterAgentLoop

__all__ = ["AgentLoop"]

log = logging.getLogger(__name__)


class AgentLoop(RouterAgentLoop):
    """The agent beside a running linkemu: a thread that acts every ``actor.interval_s``.

    ``start()`` connects (raising :class:`LinkemuControlError` if the socket is not there);
    ``stop()`` hands p' back to the PI controller (``base_prob: "auto"``) and joins.  An error
    inside the loop (linkemu gone, a refused set) ends the loop with one log line and is kept in
    ``error``; the lease then returns p' to the PI controller by itself.  With *log_csv*, one row per
    interval: time, observation, action(s), value(s) set, reward (``residual-k``: :func:`reward`, without the
    L:C term, which needs flow counts the router does not have).  A ``residual-k`` actor's k goes back to
    *k_restore* (the scenario's k; RFC 9332's 2 when it names none) when the loop stops or fails (module
    docstring).
    """

    name = "dualpi2-agent"

    def __init__(self, socket_path: str | Path, actor: Actor, *, rate_mbit: float, direction: str = "uplink",
                 interval_s: float | None = None, log_csv: str | Path | None = None, k_restore: float = 2.0) -> None:
        super().__init__(socket_path, direction=direction, interval_s=interval_s or actor.interval_s,
                         log_csv=log_csv)
        self.actor = actor
        self.sets_k = actor.mode in K_MODES
        self.k_restore = k_restore
        self.observer = Observer(rate_mbit, actor.target_ms, extended=self.sets_k, flows=actor.obs == "flows")

    def _release(self, ctl: LinkemuControl) -> None:
        """The PI controller takes p' back at once (not only when the lease runs out), and k is the
        scenario's again (``residual-k``)."""
        with contextlib.suppress(LinkemuControlError, OSError):
            if self.sets_k:
                ctl.set(self.direction, base_prob="auto", k=self.k_restore)
            else:
                ctl.set(self.direction, base_prob="auto")

    def _restore_k_now(self, ctl: LinkemuControl) -> None:
        """After a failure inside the loop: k back to the scenario's at once, on a fresh connection (answers
        to sets in flight would otherwise be read as this one's); p' returns when its lease runs out."""
        ctl.close()
        try:
            ctl.set(self.direction, k=self.k_restore)
        except (LinkemuControlError, OSError) as e:
            log.warning("dualpi2 agent: could not put k back to %g (%s)", self.k_restore, e)

    def _run(self) -> None:
        assert self._ctl is not None
        out = None
        writer = None
        if self.log_csv is not None:
            out = self.log_csv.open("w", newline="")
            writer = csv.writer(out)
            if self.actor.mode == "residual-k":
                writer.writerow(["t_s", *features_for("residual-k", self.actor.obs), "action", "action_k",
                                 "prob_scale_set", "k_set", "reward"])
            elif self.actor.mode == "k":
                writer.writerow(["t_s", *features_for("k", self.actor.obs), "action_k", "k_set", "reward"])
            else:
                sent = "prob_scale_set" if self.actor.mode == "residual" else "base_prob_set"
                writer.writerow(["t_s", *features_for(self.actor.mode), "action", sent, "reward"])
        hold_ms = LEASE_INTERVALS * self.interval_s * 1000
        # What every step calls, looked up once (the step's CPU is the loop's cost: issue 14).
        direction, interval_s, stopped, wait = self.direction, self.interval_s, self._stop.is_set, self._stop.wait
        state, post_set = self._ctl.state, self._ctl.post_set
        update, mode = self.observer.update, self.actor.mode
        act = self.actor.act_all if mode == "residual-k" else self.actor.act
        thread_time, monotonic = time.thread_time, time.monotonic
        fields: tuple[str, ...] | None = state_keys_for(mode, self.actor.obs)  # only what the observation
        # reads: a short answer
        next_t = monotonic()
        try:
            while not stopped():
                c0 = thread_time()
                try:
                    st = state(direction, fields=fields)
                except LinkemuControlError as e:
                    if fields is None or not str(e).startswith("fields: unknown field"):
                        raise
                    log.info("linkemu predates state fields (rebuild it: a shorter state every interval); "
                             "the agent reads the whole state")
                    fields = None
                    st = state(direction)
                obs, raw = update(st[direction], float(st["t_s"]))
                a = act(obs)
                sent = control_params(mode, raw["p_prime"], a)
                # Not waited for: its answer is read (and a refusal raised) with the next state.
                post_set(direction, **sent, hold_ms=hold_ms)
                self.steps += 1
                if writer is not None:
                    acts = a if isinstance(a, tuple) else (a,)
                    writer.writerow([f"{st['t_s']:.4f}", *(f"{x:.5g}" for x in obs), *(f"{x:.4f}" for x in acts),
                                     *(f"{v:.6g}" for v in sent.values()),
                                     f"{reward(raw, self.actor.target_ms):.4f}"])
                self.cpu_s += thread_time() - c0
                next_t += interval_s
                wait(max(next_t - monotonic(), 0.0))
        except (LinkemuControlError, OSError, KeyError, ValueError) as e:
            self.error = f"{type(e).__name__}: {e}"
            log.warning("dualpi2 agent stopped (%s); linkemu's PI controller takes p' back when the lease "
                        "of %.0f ms runs out", self.error, hold_ms)
            if self.sets_k:
                self._restore_k_now(self._ctl)
        finally:
            if out is not None:
                out.close()
