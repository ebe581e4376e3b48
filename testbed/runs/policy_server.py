"""`ccswitch policy serve` in the server namespace while a run lasts (scenario ``[daemon.remote]``).

The daemons' DQN forward pass then runs on the far side of the bottleneck, as on an
edge server (issue 15): each request and answer crosses the router's queues (in the
L queue of a DualPI2 bottleneck with ``l4s = true``), the server holds each answer
``latency_ms`` (an emulated control path, paper 003's second stage), and with
``joint = true`` it answers one decision per path (ccswitch/remote/joint.py).

    policy-server/key          a fresh shared key (mode 600) the daemons are pointed at
    policy-server/serve.log    the server's stderr; its last line is the stats JSON
                               (requests, refusals, late answers, joint rows), which
                               summary.json's ``meta.policy_server`` also records
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..scenario import RemoteDecisions, Scenario
from .netns import nsenter_argv, stop_process

PORT = 7070
START_TIMEOUT_S = 30.0
"""Importing numpy and loading the policy can take seconds on a loaded host."""
STOP_TIMEOUT_S = 5.0
SERVE = [sys.executable, "-c", "from ccswitch.cli import main; main()", "policy", "serve"]


@contextlib.contextmanager
def policy_server(ns: str, addr: str, remote: RemoteDecisions, out_dir: Path, policy_file: Path | None,
                  meta: dict[str, Any]) -> Iterator[RemoteDecisions]:
    """Start the server in *ns* on *addr*:PORT; yield *remote* with its endpoint and key filled in.

    Stopped with SIGTERM (SIGKILL after STOP_TIMEOUT_S) when the block ends, also on errors;
    its stats go into *meta* (``meta.policy_server``)."""
    from ccswitch.remote.protocol import write_key

    out_dir.mkdir(parents=True, exist_ok=True)
    key = write_key(out_dir / "key")
    log_path = out_dir / "serve.log"
    argv = [*SERVE, "--listen", f"{addr}:{PORT}", "--key", str(key),
            "--added-latency-ms", f"{remote.latency_ms:g}", *(["--l4s"] if remote.l4s else []),
            *(["--policy", str(policy_file)] if policy_file is not None else [])]
    meta["policy_server"] = rec = {"listen": f"{addr}:{PORT}", "latency_ms": remote.latency_ms,
                                   "deadline_ms": remote.effective_deadline_ms, "l4s": remote.l4s,
                                   "joint": remote.joint, "stats": None}
    with log_path.open("wb") as log:
        proc = subprocess.Popen(nsenter_argv(ns, argv), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                start_new_session=True)
    try:
        _await_listening(proc, log_path)
        yield replace(remote, server=f"{addr}:{PORT}", key_file=key)
    finally:
        stop_process(proc, STOP_TIMEOUT_S)
        rec["stats"] = _stats(log_path)


def with_remote(sc: Scenario, remote: RemoteDecisions) -> Scenario:
    """*sc* whose daemons are pointed at the started server."""
    assert sc.daemon is not None
    return replace(sc, daemon=replace(sc.daemon, remote=remote))


def _await_listening(proc: subprocess.Popen[bytes], log_path: Path) -> None:
    end = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < end:
        text = log_path.read_text(errors="replace")
        if "listening on" in text:
            return
        if proc.poll() is not None:
            raise RuntimeError(f"policy server exited ({proc.returncode}) before listening: {text[-400:]}")
        time.sleep(0.05)
    raise RuntimeError(f"policy server not listening after {START_TIMEOUT_S:g} s (log: {log_path})")


def _stats(log_path: Path) -> dict[str, Any] | None:
    """The stats JSON the server prints when it stops (None if it was killed)."""
    with contextlib.suppress(OSError):
        for line in reversed(log_path.read_text(errors="replace").splitlines()):
            if line.startswith("{"):
                with contextlib.suppress(ValueError):
                    return json.loads(line)
    return None
