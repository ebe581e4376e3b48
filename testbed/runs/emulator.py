"""Run linkemu (the userspace link emulator, ``testbed/linkemu``) inside a router namespace.

The emulator bridges the router's client-side veth ends and its server-side
end, impairing IP traffic per direction (rate or Mahimahi trace, delay,
loss, pfifo/CoDel/DualPI2, a shared WiFi medium); its config format is documented in
``testbed/linkemu/README.md``.  Typical use with the testbed topology::

    from ccswitch.testbed.runs.emulator import Emulator, emulator_config, link
    from ccswitch.testbed.runs.topology import Topology

    with Topology(2) as topo:
        cfg = emulator_config(topo.client_ifs, topo.server_if,
                              uplink=link(rate_mbit=100, delay_ms=5, limit_pkts=50),
                              downlink=link(rate_mbit=100, delay_ms=5, limit_pkts=50))
        with Emulator(topo.router, cfg, stats_dir=run_dir / "emulator") as emu:
            ...  # traffic between topo.clients and topo.server
        print(emu.summary["uplink"]["rate_mbit"])   # summary.json, read after the stop

:class:`Emulator` starts ``linkemu --config`` in the namespace (``nsenter
--net``), waits for its ``ready`` line, and on exit sends SIGTERM, waits for the
outputs and reads ``summary.json``.  It raises :class:`EmulatorError` (with
linkemu's stderr) when the binary is missing, the config is refused (exit 2)
or linkemu dies.  A process left over by a crashed caller is killed with the
namespace (:func:`ccswitch.testbed.runs.netns.delete_netns` kills what runs inside).
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import select
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from .netns import LiveHandles, Resource, popen_in, stop_process

__all__ = [
    "CRATE_DIR",
    "Emulator",
    "EmulatorError",
    "binary_path",
    "dualpi2",
    "emulator_config",
    "link",
]

CRATE_DIR = Path(__file__).resolve().parents[1] / "linkemu"
"""The Rust crate (``cargo build --release --manifest-path testbed/linkemu/Cargo.toml``)."""

EXIT_CONFIG = 2
"""linkemu's exit status for a refused configuration."""


class EmulatorError(RuntimeError):
    """linkemu is missing, refused its config, failed to start, or exited badly."""


def binary_path() -> Path:
    """The linkemu binary: ``$LINKEMU`` if set, else the crate's release build."""
    env = os.environ.get("LINKEMU")
    return Path(env) if env else CRATE_DIR / "target" / "release" / "linkemu"


def link(
    rate_mbit: float | None = None,
    delay_ms: float = 0.0,
    *,
    limit_pkts: int = 1000,
    qdisc: dict[str, Any] | None = None,
    loss: dict[str, Any] | None = None,
    trace: str | Path | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """One direction's ``LINK`` object: rate (None: unlimited) or trace, delay, loss, qdisc.

    *qdisc* defaults to ``{"kind": "pfifo", "limit_pkts": limit_pkts}``; *loss*
    is e.g. ``{"model": "bernoulli", "p": 0.01}``; *extra* passes further LINK
    fields (``overhead_bytes``, ``trace_bytes_per_opportunity``).
    """
    return {
        "rate_mbit": rate_mbit,
        "trace": str(trace) if trace is not None else None,
        "delay_ms": delay_ms,
        "loss": loss,
        "qdisc": qdisc if qdisc is not None else {"kind": "pfifo", "limit_pkts": limit_pkts},
        **extra,
    }


def dualpi2(**params: Any) -> dict[str, Any]:
    """A DualPI2 (RFC 9332) ``qdisc`` object for :func:`link`; *params* are its fields.

    Fields left out take linkemu's defaults (Linux sch_dualpi2's): ``target_ms`` 15,
    ``tupdate_ms`` 16, ``alpha_hz`` 0.16, ``beta_hz`` 3.2, ``k`` 2, ``l_min_th_ms`` 1
    (``l_max_th_ms`` for a ramp), ``l_min_qlen_pkts`` 1, ``classifier`` "ecn" or
    "dscp" with ``l_dscp``, ``scheduler`` "wrr" (``c_weight_pct`` 10) or "tsfifo"
    (``tshift_ms`` 50), ``drop_on_overload`` true, ``limit_pkts`` 10000.  linkemu
    validates them (a bad field exits 2 naming it, raised as :class:`EmulatorError`).
    Example: ``link(50, 5, qdisc=dualpi2(classifier="dscp", l_dscp=[40]))``.
    """
    return {"kind": "dualpi2", **params}


def emulator_config(
    client_ifs: Sequence[str],
    server_if: str,
    *,
    uplink: dict[str, Any] | None = None,
    downlink: dict[str, Any] | None = None,
    wifi: dict[str, Any] | None = None,
    seed: int = 1,
    interval_ms: float = 1000,
    per_packet: bool = False,
    **extra: Any,
) -> dict[str, Any]:
    """A complete linkemu config (``stats.dir`` is filled in by :class:`Emulator`)."""
    return {
        "client_ifs": list(client_ifs),
        "server_if": server_if,
        "seed": seed,
        "uplink": uplink if uplink is not None else link(),
        "downlink": downlink if downlink is not None else link(),
        "wifi": wifi,
        "stats": {"interval_ms": interval_ms, "per_packet": per_packet},
        **extra,
    }


class Emulator(Resource):
    """linkemu running in namespace *router_ns* with *config* (a dict, see :func:`emulator_config`).

    Parameters:
        router_ns: the router namespace (holding ``client_ifs`` and ``server_if``).
        config: the linkemu config; ``stats.dir`` is set to *stats_dir*.
        stats_dir: where summary.json, intervals.csv (and packets.csv) go; default
            a fresh temporary folder (kept after the run; see :attr:`stats_dir`).
        binary: linkemu path (default :func:`binary_path`).
        ready_timeout: seconds to wait for ``ready``.

    Attributes: ``pid``, ``returncode`` (after :meth:`stop`), ``summary`` (dict
    from summary.json after :meth:`stop`, else None), ``stats_dir``,
    ``config_path``.
    """

    def __init__(
        self,
        router_ns: str,
        config: dict[str, Any],
        *,
        stats_dir: str | Path | None = None,
        binary: str | Path | None = None,
        ready_timeout: float = 10.0,
    ) -> None:
        self.router_ns = router_ns
        self.binary = Path(binary) if binary is not None else binary_path()
        self.ready_timeout = ready_timeout
        self.stats_dir = Path(stats_dir) if stats_dir is not None else Path(tempfile.mkdtemp(prefix="linkemu-"))
        self.config = json.loads(json.dumps(config))  # private deep copy
        self.config.setdefault("stats", {})
        self.config["stats"]["dir"] = str(self.stats_dir)
        self.config_path = self.stats_dir / "config.json"
        self.summary: dict[str, Any] | None = None
        self.returncode: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._err: IO[bytes] | None = None
        self._err_text = ""

    # -- lifecycle --

    def open(self) -> None:
        self.start()

    def close(self) -> None:
        self.kill()

    def leave(self, failed: bool) -> None:
        """Stop and read the outputs; when the block failed, keep its exception (stop if we can, then kill)."""
        if not failed:
            self.stop()
        else:
            with contextlib.suppress(Exception):
                self.stop()
            self.kill()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stderr(self) -> str:
        """What linkemu wrote to stderr so far (warnings, errors)."""
        if self._err is None or self._err.closed:
            return self._err_text
        self._err.flush()
        self._err.seek(0)
        self._err_text = self._err.read().decode(errors="replace").strip()
        return self._err_text

    def start(self) -> None:
        """Start linkemu and wait for ``ready``; raise :class:`EmulatorError` on failure."""
        if self._proc is not None:
            raise EmulatorError("Emulator already started")
        if not self.binary.is_file():
            raise EmulatorError(
                f"linkemu binary not found at {self.binary}; build it with "
                f"`cargo build --release --manifest-path {CRATE_DIR}/Cargo.toml` (scripts/setup.sh does)"
            )
        self.stats_dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(json.dumps(self.config, indent=2) + "\n")
        self._err = tempfile.TemporaryFile()  # noqa: SIM115 (closed in kill())
        self._proc = popen_in(
            self.router_ns,
            [str(self.binary), "--config", str(self.config_path)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._err,
            start_new_session=True,  # Ctrl-C for the caller is the caller's to handle
        )
        _live.add(self)
        try:
            self._wait_ready()
        except BaseException:
            self.kill()
            raise

    def _wait_ready(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        deadline = time.monotonic() + self.ready_timeout
        buf = b""
        while b"\n" not in buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise EmulatorError(f"linkemu did not print 'ready' within {self.ready_timeout:g} s: {self.stderr()}")
            r, _, _ = select.select([fd], [], [], min(left, 0.1))
            if r:
                chunk = os.read(fd, 4096)
                if not chunk:  # EOF: it exited
                    rc = self._proc.wait()
                    what = "refused its config" if rc == EXIT_CONFIG else f"exited with status {rc}"
                    raise EmulatorError(f"linkemu {what}: {self.stderr() or '(no message)'}")
                buf += chunk
        if buf.split(b"\n", 1)[0].strip() != b"ready":
            raise EmulatorError(f"linkemu printed {buf!r} instead of 'ready'")

    def stop(self, timeout: float = 20.0) -> dict[str, Any]:
        """SIGTERM, wait for the outputs, read and return summary.json (idempotent)."""
        if self._proc is None:
            raise EmulatorError("Emulator not started")
        if self.returncode is None:
            if self._proc.poll() is None:
                self._proc.send_signal(signal.SIGTERM)
            try:
                self.returncode = self._proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise EmulatorError(f"linkemu did not exit within {timeout:g} s of SIGTERM") from None
            err = self.stderr()
            self.kill()  # closes the pipes (the process is gone)
            if self.returncode != 0:
                raise EmulatorError(f"linkemu exited with status {self.returncode}: {err or '(no message)'}")
            path = self.stats_dir / "summary.json"
            try:
                self.summary = json.loads(path.read_text())
            except (OSError, ValueError) as e:
                raise EmulatorError(f"cannot read {path}: {e}") from e
        assert self.summary is not None
        return self.summary

    def kill(self) -> None:
        """Stop linkemu without waiting for outputs (SIGTERM, then SIGKILL)."""
        if self._proc is not None:
            stop_process(self._proc, grace_s=5)
            if self.returncode is None:
                self.returncode = self._proc.returncode
            if self._proc.stdout is not None:
                self._proc.stdout.close()
        if self._err is not None and not self._err.closed:
            self.stderr()
            self._err.close()
        _live.discard(self)

    # -- outputs --

    def intervals(self) -> list[dict[str, str]]:
        """Rows of intervals.csv (strings; see the README for the columns)."""
        with open(self.stats_dir / "intervals.csv", newline="") as f:
            return list(csv.DictReader(f))

    def packets(self) -> list[dict[str, str]]:
        """Rows of packets.csv (needs ``stats.per_packet``)."""
        with open(self.stats_dir / "packets.csv", newline="") as f:
            return list(csv.DictReader(f))

    def __repr__(self) -> str:
        return f"Emulator(router_ns={self.router_ns!r}, pid={self.pid}, stats_dir={str(self.stats_dir)!r})"


_live: LiveHandles[Emulator] = LiveHandles(Emulator.kill)
