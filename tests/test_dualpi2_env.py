"""The DualPI2 training env (envs/dualpi2_env.py) on a live emulated link: both classes carry traffic, and an
episode never runs without its Prague flows.

Prague's registration is kernel-wide.  On 27 Nov a closed-loop run that had registered it ended in the middle
of a training and took it away (it lived as long as the process that made it): every later episode's Prague
flows failed to start, the L:C term (0 without L4S packets) rewarded that, and 111 of 200 episodes taught the
agent nothing true.  Now a holder process keeps it while any ccswitch process uses it (bpf/holder.py), the env
still registers Prague again before an episode that needs it (a guard against a holder killed from outside),
and a flow that stopped is an error, not an episode.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable

import numpy as np
import pytest

from ccswitch.bpf import holder as holder_mod
from ccswitch.envs.dualpi2_env import Condition, DualPi2Env
from ccswitch.host import available_ccas
from ccswitch.testbed.runs.emulator import binary_path

pytestmark = pytest.mark.kernel

COND = Condition(rate_mbit=20.0, rtt_ms=10.0, classic_cca="cubic", n_classic=1, n_l4s=1)
REGISTRAR = ("from ccswitch.bpf.prague import ensure_prague; import sys, time; h = ensure_prague(); "
          "print(h.source, flush=True); sys.stdin.read(); h.close()")


def _episode_packets(env: DualPi2Env) -> tuple[float, float]:
    env.reset(options={"condition": COND})
    l4s = classic = 0.0
    for _ in range(env.steps):
        _, r, _, _, info = env.step(np.zeros(1))
        assert np.isfinite(r)
        l4s, classic = l4s + info["l4s_pkts"], classic + info["classic_pkts"]
    return l4s, classic


def test_prague_outlives_its_registrar_and_is_registered_again_if_taken_away(
        tmp_path, require: Callable[[bool, str], None]) -> None:
    require(binary_path().is_file(), "linkemu is not built; run scripts/setup.sh")
    require("prague" not in available_ccas(), "prague is registered by another process already")
    registrar = subprocess.Popen([sys.executable, "-c", REGISTRAR], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 text=True)
    try:
        assert registrar.stdout is not None and registrar.stdout.readline().strip() == "ccswitch"
        with DualPi2Env(steps=10, workdir=tmp_path, mode="k", warmup_s=0.5) as env:
            l4s, classic = _episode_packets(env)  # on the other process's registration
            assert l4s > 0 and classic > 0, (l4s, classic)
            registrar.communicate("", timeout=10)  # that process ends: the env still uses prague
            time.sleep(3 * holder_mod.POLL_S)
            assert "prague" in available_ccas()
            l4s, classic = _episode_packets(env)
            assert l4s > 0 and classic > 0, (l4s, classic)
            (pid,) = holder_mod.running("prague")
            os.kill(pid, signal.SIGKILL)  # taken away from outside: gone kernel-wide
            deadline = time.monotonic() + 5
            while "prague" in available_ccas() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert "prague" not in available_ccas()
            l4s, classic = _episode_packets(env)  # the env's guard registered it again
            assert l4s > 0 and classic > 0, (l4s, classic)
    finally:
        if registrar.poll() is None:
            registrar.kill()
            registrar.wait()
