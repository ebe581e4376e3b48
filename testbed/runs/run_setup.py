"""What a run sets up before its clock starts, torn down in reverse when it ends.

* :func:`netns_side` -- the namespace testbed: topology, link emulator (linkemu
  or the kernel bridge), router agents beside linkemu, Prague as the default
  CCA where prague flows run, ``tcp_ecn`` in the clients, iperf3 servers and
  the tshark :class:`Capture` on the server's veth.
* :func:`prague_default_here` -- external mode: Prague as this host's default CCA.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from ..scenario import Flow, Scenario
from ..scenario.model import CONTROL_SOCKET
from ..scenario.model_qdisc import Lfq
from .iperf import IperfServer, start_server
from .netns import entered, nsenter_argv
from .run_error import RunError
from .topology import Topology, kernel_emulator

# ----------------------------------------------------------------- tshark ---


class Capture:
    """``tshark`` on *dev* in *ns* writing pcapng: headers only, iperf3 ports only."""

    def __init__(self, ns: str, dev: str, ports: Sequence[int], path: Path, snaplen: int = 96) -> None:
        self.ns, self.dev, self.path = ns, dev, path
        filt = " or ".join(f"tcp port {p}" for p in ports)
        self.argv = ["tshark", "-i", dev, "-s", str(snaplen), "-f", filt, "-w", str(path), "-q"]
        self.proc: subprocess.Popen[bytes] | None = None
        self._log = path.with_suffix(".log")
        self._log_f: IO[bytes] | None = None

    def start(self, timeout_s: float = 15.0) -> None:
        if shutil.which("tshark") is None:
            raise RunError("tshark is not installed (run scripts/setup.sh)")
        self._log_f = self._log.open("wb")
        self.proc = subprocess.Popen(nsenter_argv(self.ns, self.argv), stdin=subprocess.DEVNULL,
                                     stdout=self._log_f, stderr=self._log_f, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RunError(f"tshark exited with {self.proc.returncode}: {self.log()[-500:]}")
            if "Capturing on" in self.log():
                return
            time.sleep(0.05)
        raise RunError(f"tshark did not start capturing within {timeout_s:g} s: {self.log()[-500:]}")

    def log(self) -> str:
        try:
            return self._log.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self) -> None:
        """SIGINT (tshark flushes and closes the file), then SIGTERM/SIGKILL if it hangs."""
        if self.proc is not None and self.proc.poll() is None:
            for sig, wait in ((signal.SIGINT, 10.0), (signal.SIGTERM, 3.0), (signal.SIGKILL, 3.0)):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, sig)
                try:
                    self.proc.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        if self._log_f is not None:
            self._log_f.close()
            self._log_f = None

    def __enter__(self) -> Capture:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# ---------------------------------------------------------------- emulator ---


def _emulator(sc: Scenario, topo: Topology, run_dir: Path, seed: int,
              control_socket: Path | None = None) -> contextlib.AbstractContextManager[Any]:
    """The link between the router's ports: linkemu or the kernel fallback."""
    emu_dir = run_dir / "emulator"
    emu_dir.mkdir(parents=True, exist_ok=True)
    config = sc.emulator_config(topo.client_ifs, topo.server_if, seed, emu_dir,
                                interval_ms=max(1, round(sc.sample_interval_s * 1000)),
                                control_socket=control_socket)
    if sc.link.emulator == "kernel":
        config["emulator"] = "kernel (bridge + htb + pfifo on the uplink; downlink unshaped)"
        (emu_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        up = sc.link.uplink
        return kernel_emulator(topo, up.rate_mbit, up.queue_limit_pkts)
    from .emulator import Emulator  # writes emu_dir/config.json, reads summary.json on exit

    return Emulator(topo.router, config, stats_dir=emu_dir)


def _emulator_summary(run_dir: Path, emu: Any) -> dict[str, Any] | None:
    summary = getattr(emu, "summary", None)
    if isinstance(summary, dict):
        return summary
    path = run_dir / "emulator" / "summary.json"
    if path.is_file():
        with contextlib.suppress(ValueError):
            return json.loads(path.read_text())
    return None


def netns_side(sc: Scenario, flows: Sequence[Flow], run_dir: Path, seed: int, meta: dict[str, Any],
                stack: contextlib.ExitStack) -> tuple[str, dict[int, str | None], dict[str, IperfServer]]:
    """Topology, emulator, iperf3 servers and capture, entered into *stack* (torn down in reverse)."""
    topo = stack.enter_context(Topology(sc.clients))
    meta["topology"] = {"id": topo.id, "clients": topo.clients, "router": topo.router, "server": topo.server,
                        "client_addrs": topo.client_addrs, "server_addr": topo.server_addr}
    emu: dict[str, Any] = {}  # read by the callback after the emulator has stopped (LIFO order)
    stack.callback(lambda: meta.__setitem__("emulator_summary", _emulator_summary(run_dir, emu.get("e"))))
    control = None
    if sc.router_agents():  # linkemu's control socket in a short private directory (107-byte limit), removed last
        sock_dir = tempfile.mkdtemp(prefix="ccse-")
        stack.callback(shutil.rmtree, sock_dir, True)
        control = Path(sock_dir) / CONTROL_SOCKET
    emu["e"] = stack.enter_context(_emulator(sc, topo, run_dir, seed, control))
    _router_agents(sc, run_dir, meta, stack, control)
    _prague_defaults(flows, topo, stack)
    servers = {f.name: stack.enter_context(start_server(topo.server, f.port, bind=topo.server_addr,
                                                        extra_args=["-J"])) for f in flows}
    if sc.capture.tshark:
        stack.enter_context(Capture(topo.server, topo.server_dev, [f.port for f in flows],
                                    run_dir / "capture.pcapng", sc.capture.snaplen))
    client_ns: dict[int, str | None] = {f.client: topo.clients[f.client - 1] for f in flows}
    meta["tcp_ecn"] = _tcp_ecn(sc, client_ns, topo.server)
    return topo.server_addr, client_ns, servers


def _router_agents(sc: Scenario, run_dir: Path, meta: dict[str, Any], stack: contextlib.ExitStack,
                   control: Path | None) -> None:
    """Start the agent of every direction whose queue names one (``agent``); stopped before linkemu.

    dualpi2: paper 000's A3C agent (testbed/runs/dualpi2_agent.py); lfq: paper 001's LFQ agent
    (testbed/runs/lfq_agent.py).  Each writes ``emulator/agent-DIR.csv`` (one row per interval, per flow
    for lfq); summary.json's ``meta.router_agents`` records the actor file, its checksum, the steps taken,
    the loop's CPU time and any error (and an lfq floor, ``share_floor_bdp`` / ``share_floor_min_pkts``, when the
    scenario sets one).
    """
    agents = sc.router_agents()
    if not agents:
        return
    meta["router_agents"] = {}
    for direction, q in agents.items():
        assert q.agent is not None
        log_csv = run_dir / "emulator" / f"agent-{direction}.csv"
        assert control is not None  # netns_side makes one whenever the scenario has router agents
        sock = control
        loop: Any
        if isinstance(q, Lfq):
            from ccswitch.models.lfq_actor import load_actor as load_lfq_actor

            from .lfq_agent import AgentLoop as LfqAgentLoop

            actor: Any = load_lfq_actor(q.agent)
            interval = q.agent_interval_ms / 1000 if q.agent_interval_ms else actor.interval_s
            loop = LfqAgentLoop(sock, actor, direction=direction, interval_s=interval, log_csv=log_csv,
                                share_floor_bdp=q.share_floor_bdp, share_floor_min_pkts=q.share_floor_min_pkts)
        else:
            from ccswitch.models.dualpi2_actor import load_actor

            from .dualpi2_agent import AgentLoop

            actor = load_actor(q.agent)
            rate = getattr(sc.link, direction).rate_mbit or q.agent_rate_mbit
            interval = q.agent_interval_ms / 1000 if q.agent_interval_ms else actor.interval_s
            loop = AgentLoop(sock, actor, rate_mbit=rate, direction=direction, interval_s=interval, log_csv=log_csv,
                             k_restore=q.k if q.k is not None else 2.0)
        rec: dict[str, Any] = {"kind": "lfq" if isinstance(q, Lfq) else "dualpi2", "actor": str(q.agent),
                               "checksum": actor.checksum, "interval_s": interval}
        if isinstance(q, Lfq):  # the run's limits are not the actor's alone
            rec.update({k: v for k, v in (("share_floor_bdp", q.share_floor_bdp),
                                          ("share_floor_min_pkts", q.share_floor_min_pkts)) if v})
        meta["router_agents"][direction] = rec

        def record(loop: Any = loop, rec: dict[str, Any] = rec) -> None:
            rec.update(steps=loop.steps, cpu_s=round(loop.cpu_s, 3), error=loop.error)

        stack.callback(record)
        stack.enter_context(loop)


TCP_ECN_KEY = "net.ipv4.tcp_ecn"


def _read_sysctl(ns: str, key: str) -> str:
    with entered(ns):
        return Path("/proc/sys", *key.split(".")).read_text().strip()


def _tcp_ecn(sc: Scenario, client_ns: dict[int, str | None], server_ns: str) -> dict[str, Any]:
    """Set the scenario's ``tcp_ecn`` in the client namespaces (the senders; before any flow starts).

    net.ipv4.tcp_ecn is per namespace and a new one starts at the kernel's default 2 (accept ECN
    when the peer asks, never ask): the server keeps that and so accepts the clients' requests.
    Returns the values read back (client namespace -> value, and the server's) for summary.json.
    """
    out: dict[str, Any] = {"requested": sc.tcp_ecn, "clients": {}, "server": None}
    for client, ns in sorted(client_ns.items()):
        if ns is None:
            continue
        if sc.tcp_ecn is not None:
            try:
                with entered(ns):
                    Path("/proc/sys", *TCP_ECN_KEY.split(".")).write_text(f"{sc.tcp_ecn}\n")
            except OSError as e:
                raise RunError(f"cannot set {TCP_ECN_KEY}={sc.tcp_ecn} in client {client}'s namespace: {e}") from e
        value = _read_sysctl(ns, TCP_ECN_KEY)
        if sc.tcp_ecn is not None and value != str(sc.tcp_ecn):
            raise RunError(f"{TCP_ECN_KEY} in client {client}'s namespace reads {value} after setting {sc.tcp_ecn}")
        out["clients"][f"C{client}"] = int(value)
    out["server"] = int(_read_sysctl(server_ns, TCP_ECN_KEY))
    return out


def _prague_defaults(flows: Sequence[Flow], topo: Topology, stack: contextlib.ExitStack) -> None:
    """Register Prague and make it the default where its flows connect and are accepted.

    ECN (and AccECN) is negotiated in the handshake, but iperf3 sets -C only
    after connect(): a prague flow started that way negotiates no ECN and
    Prague falls back to Reno (docs/l4s-kernel.md).  So prague becomes the
    namespace default of the server (listeners must run it to accept AccECN;
    done before the iperf3 servers start) and of every client whose flows are
    all prague.  A client mixing prague with other CCAs is refused: its other
    sockets would start on prague and keep Prague's DSCP after iperf3 switches them.
    """
    prague = [f for f in flows if f.cca == "prague"]
    if not prague:
        return
    from ccswitch.bpf.prague import ensure_prague, make_default

    for client in sorted({f.client for f in prague}):
        others = sorted({f.cca for f in flows if f.client == client and f.cca != "prague"})
        if others:
            raise RunError(f"client {client} runs prague and {', '.join(others)}: prague flows need a client "
                           f"of their own (prague is made the client's default CCA so that ECN is negotiated)")
    handle = ensure_prague()
    stack.callback(handle.close)
    make_default(topo.server)
    for client in sorted({f.client for f in prague}):
        make_default(topo.clients[client - 1])


def prague_default_here(flows: Sequence[Flow], stack: contextlib.ExitStack) -> None:
    """External mode: register Prague and make it this host's default CCA while the run lasts.

    The same reason as _prague_defaults (ECN is negotiated in the handshake,
    iperf3 sets -C only after connect()).  The host's previous default comes
    back when the run ends, also on errors, before Prague's registration goes:
    a default holds a reference on the algorithm, so the host would otherwise
    keep an unregistered prague for every new socket.  This host's flows must
    then all be prague (one default per host).  The server's listeners are not
    this host's: testbed/l4s/README.md has the server side.
    """
    if not any(f.cca == "prague" for f in flows):
        return
    others = sorted({f.cca for f in flows if f.cca != "prague"})
    if others:
        raise RunError(f"this host runs prague and {', '.join(others)} flows: prague becomes the host's default "
                       f"CCA (so that ECN is negotiated); run the prague clients on a host of their own (--client N)")
    from ccswitch.bpf.prague import ensure_prague, make_default, set_default

    try:
        handle = ensure_prague()
    except Exception as e:
        raise RunError(f"cannot register prague on this host ({e}); run as root after scripts/setup.sh "
                       f"(or load a tcp_prague module)") from e
    stack.callback(handle.close)
    try:
        previous = make_default(None)
    except (OSError, RuntimeError) as e:
        raise RunError(f"cannot make prague this host's default CCA ({e}); run as root") from e
    stack.callback(set_default, None, previous)
