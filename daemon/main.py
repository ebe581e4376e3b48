"""ccswitchd: the switching daemon (one per network namespace).

    ccswitchd [--config FILE] [--socket PATH] [--record FILE.parquet] [--decisions FILE.jsonl]
    ccswitchd --check-config [--config FILE]
    ccswitchd --install [--root DIR]

Start-up, in order: config (validated: every problem named, exit 1), policy
(a missing or corrupt file refuses the start unless policy.fallback is
set), data plane (monitor, switcher, PCC; the instance lock refuses a
second daemon in the namespace), clean-up of what a killed predecessor left
(sockets on its unregistered PCC are moved to the fresh registration, so
the old BPF programs are freed; a stale control socket is removed; its
state file is read, so pins, dwell times and hold-offs carry over), the
control socket, then READY=1 to systemd.

The loop (single thread): tick every daemon.tick_s (controller.py), and in
between serve control requests and signals.  SIGHUP reloads config and
policy file (a bad new one is logged and the old one kept), SIGTERM/SIGINT
stop: optional restore/PCC fallback switches (stop.*), state saved, record
files closed, BPF links detached (DataPlane.close), exit 0.
"""

from __future__ import annotations

import os

# One BLAS thread: the batched forward pass is small (N x 30 x 64), and BLAS worker threads
# spinning on a busy 2-core host made it 100x slower.  Must be set before numpy loads.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
# pyarrow is loaded only with --record (the decision path is numpy, ccswitch/frame.py).  Its buffers
# then come from the system allocator: pyarrow's default (mimalloc) reserves arenas at the first
# allocation (4 MB) and keeps freed ones (resident memory crept up ~15 MB under socket churn).
os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")

import argparse  # noqa: E402
import logging  # noqa: E402
import selectors  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from ccswitch.daemon import config as config_mod  # noqa: E402
from ccswitch.daemon.config import ConfigError, load_config  # noqa: E402
from ccswitch.daemon.logs import setup as setup_logs  # noqa: E402
from ccswitch.daemon.policies import build_decider, close_decider, remote_counters  # noqa: E402
from ccswitch.daemon.recorder import Recorder, RecordError  # noqa: E402
from ccswitch.daemon.sdnotify import Notifier  # noqa: E402

log = logging.getLogger("ccswitchd")
MAX_TICK_ERRORS = 10


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ccswitchd", description="ccswitch switching daemon (one per network "
                                "namespace): monitor -> features -> policy -> guard -> switch.")
    p.add_argument("--config", metavar="FILE", help=f"config file (default {config_mod.DEFAULT_PATH}; "
                   "missing default = built-in defaults)")
    p.add_argument("--check-config", action="store_true", help="validate the config and the policy file, then exit")
    p.add_argument("--socket", metavar="PATH", help="control socket (overrides daemon.socket)")
    p.add_argument("--record", metavar="FILE.parquet", help="write every tick's FlowSample rows here (Parquet)")
    p.add_argument("--decisions", metavar="FILE.jsonl", help="append one JSON line per decision here")
    p.add_argument("--install", action="store_true",
                   help="install the systemd unit, the default config and the man pages")
    p.add_argument("--root", metavar="DIR", default="/", help="with --install: install below DIR (packaging, tests)")
    return p


def _fail(msg: str) -> None:
    print(f"ccswitchd: error: {msg}", file=sys.stderr)
    sys.exit(1)


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.install:
        from ccswitch.daemon.install import install

        try:
            for line in install(Path(args.root)):
                print(line)
        except (OSError, ValueError) as e:
            _fail(str(e))
        return
    try:
        cfg = load_config(args.config)
    except ConfigError as e:
        where = f"{e.path}: " if e.path else ""
        for p in e.problems:
            print(f"ccswitchd: error: {where}{p}", file=sys.stderr)
        sys.exit(1)
    from ccswitch.models.policy import PolicyError

    try:
        decider, warning = build_decider(dict(cfg.policy))
        read_group_gid(cfg.daemon["read_group"])
    except (PolicyError, ValueError) as e:
        _fail(str(e))
    if args.check_config:
        src = cfg.path or "built-in defaults"
        extra = f" ({warning})" if warning else ""
        print(f"ccswitchd: config {src} is valid; policy: {decider.kind}{extra}")
        return
    setup_logs(cfg.log["format"], cfg.log["level"])
    if warning:
        log.warning("policy fallback", extra={"fields": {"detail": warning}})
    try:
        Daemon(cfg, decider, args).run()
    except (RecordError, OSError, RuntimeError, ValueError) as e:
        # HostError, BpfError, ServerError are RuntimeErrors: one line, exit 1
        log.debug("start-up failed", exc_info=True)
        _fail(str(e).replace("\n", " "))


def trim_heap() -> None:
    """Give the C heap's free memory back to the kernel (glibc malloc_trim; elsewhere nothing).

    Loading the BPF objects (libbpf parses their ELF files and the kernel's BTF) leaves ~12 MB of
    freed heap that glibc keeps resident because live allocations sit above it; start-up is the
    daemon's only such peak (and a re-registration of PCC, which loads pcc.bpf.o again), so one trim
    after it keeps the resident memory at what the daemon uses.
    """
    import contextlib
    import ctypes

    with contextlib.suppress(OSError, AttributeError):  # AttributeError: not glibc
        ctypes.CDLL(None).malloc_trim(0)


def read_group_gid(name: str) -> int | None:
    """The gid of daemon.read_group (None: root only); ValueError naming the fix when no such group."""
    if not name:
        return None
    import grp

    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        raise ValueError(f"daemon.read_group: no group {name!r} on this host; create it (groupadd {name}) "
                         "or set read_group = \"\"") from None


class Daemon:
    def __init__(self, cfg: config_mod.Config, decider: Any, args: argparse.Namespace):
        self.cfg = cfg
        self.decider = decider
        self.args = args
        self.config_path = args.config
        self.socket_path = Path(args.socket or cfg.daemon["socket"])
        self.read_gid = read_group_gid(cfg.daemon["read_group"])
        sf = cfg.daemon["state_file"]
        self.state_path = Path(sf) if sf else self.socket_path.with_name(self.socket_path.name + ".state")
        self.stop = False
        self.reload = False
        self.notifier = Notifier()

    # ----------------------------------------------------------- signals
    def _signals(self) -> socket.socket:
        r, w = socket.socketpair()
        r.setblocking(False)
        w.setblocking(False)
        signal.set_wakeup_fd(w.fileno(), warn_on_full_buffer=False)
        self._wake_w = w

        def on_stop(signum: int, _f: object) -> None:
            self.stop = True

        def on_hup(signum: int, _f: object) -> None:
            self.reload = True

        signal.signal(signal.SIGTERM, on_stop)
        signal.signal(signal.SIGINT, on_stop)
        signal.signal(signal.SIGHUP, on_hup)
        return r

    # --------------------------------------------------------------- run
    def run(self) -> None:
        from ccswitch.bpf.pcc import OWN as PCC_OWN
        from ccswitch.daemon.controller import Controller
        from ccswitch.daemon.server import ControlServer
        from ccswitch.dataplane import DataPlane

        wake = self._signals()
        metrics = None
        with Recorder(self.args.record, self.args.decisions) as rec, DataPlane() as dp:
            self.dp = dp
            self._warn_unseeded_pcc()
            self._rehome_orphaned_pcc(dp, rec)
            dp.sample_frame()  # baseline counters: the first tick covers one full interval
            ctl = self.ctl = Controller(self.cfg, self.decider, dp, recorder=rec, state_path=self.state_path)
            if self.cfg.metrics["listen"]:
                from ccswitch.daemon.metrics import Metrics

                metrics = ctl.metrics = Metrics(self.cfg.metrics["listen"])
            server = ControlServer(self.socket_path, self.handle, read_gid=self.read_gid)
            server.open()
            trim_heap()
            try:
                log.info("started", extra={"fields": {
                    "pid": os.getpid(), "policy": self.decider.kind, "tick_s": ctl.tick_s,
                    "decision_interval_s": ctl.decision_interval_s, "socket": str(self.socket_path),
                    "pcc": dp.pcc.source if dp.pcc else "none", "allowed": ",".join(ctl.allowed()),
                    "record": self.args.record or "", "decisions": self.args.decisions or ""}})
                self.notifier.ready(f"policy {self.decider.kind}, tick {ctl.tick_s:g} s")
                self._loop(ctl, server, wake)
            finally:
                self.notifier.stopping()
                try:
                    own = bool(dp.pcc and dp.pcc.source == PCC_OWN)
                    ctl.stop_actions(self.cfg.stop["pcc_fallback"], own)
                except Exception:
                    log.exception("stop actions failed")
                ctl.save_state()
                remote = remote_counters(self.decider)
                close_decider(self.decider)
                server.close()
                if metrics is not None:
                    metrics.close()
                log.info("stopped", extra={"fields": {**ctl.stats.as_dict(), "record_rows": rec.rows,
                                                      "decisions_written": rec.decisions, **remote}})
        signal.set_wakeup_fd(-1)

    def _loop(self, ctl: Any, server: Any, wake: socket.socket) -> None:
        sel = selectors.DefaultSelector()
        sel.register(server.fileno(), selectors.EVENT_READ, "server")
        sel.register(server.pending_fileno(), selectors.EVENT_READ, "pending")
        sel.register(wake, selectors.EVENT_READ, "wake")
        errors = 0
        next_tick = time.monotonic() + ctl.tick_s
        while not self.stop:
            if self.reload:
                self.reload = False
                self._reload(ctl)
            now = time.monotonic()
            if now >= next_tick:
                # before deciding: a PCC whose holder was stopped must not look
                # unavailable to this tick's decision (one /proc read per tick)
                self._check_pcc()
                try:
                    ctl.tick()
                    errors = 0
                except (OSError, RuntimeError, ValueError) as e:
                    errors += 1
                    log.error("tick failed", extra={"fields": {"error": str(e), "consecutive": errors}})
                    if errors >= MAX_TICK_ERRORS:
                        raise RuntimeError(f"{errors} ticks in a row failed, last: {e}") from e
                if self.cfg.daemon["watchdog"]:
                    self.notifier.watchdog()
                server.drop_expired()  # silent control connections, when no other request comes
                next_tick += ctl.tick_s
                if next_tick < time.monotonic():  # overran: skip, do not burst
                    next_tick = time.monotonic() + ctl.tick_s
                continue
            for key, _ in sel.select(max(0.0, next_tick - now)):
                if key.data == "server":
                    server.serve_ready()
                    server.serve_pending()  # a request that came with its connection
                elif key.data == "pending":
                    server.serve_pending()
                else:
                    try:
                        while wake.recv(64):
                            pass
                    except BlockingIOError:
                        pass
        sel.close()

    def _check_pcc(self) -> None:
        try:
            if self.dp.refresh_pcc():
                log.warning("pcc re-registered", extra={"fields": {
                    "detail": "pcc vanished from the kernel (its holder process was stopped or killed, e.g. "
                              "with the unit that started it, or its struct_ops link was detached from "
                              "outside); this daemon registered it again",
                    "source": self.dp.pcc.source if self.dp.pcc else ""}})
                self._warn_unseeded_pcc()  # lost the race to a daemon whose seed map it cannot see
                trim_heap()  # loading pcc.bpf.o again: the start-up's libbpf garbage again
        except (OSError, RuntimeError) as e:
            log.error("pcc re-registration failed", extra={"fields": {"error": str(e)}})

    def _pcc_source(self) -> str:
        from ccswitch.bpf.pcc import NONE

        return self.dp.pcc.source if self.dp.pcc else NONE

    def _pcc_status(self) -> dict[str, Any]:
        """status fields: the PCC source (bpf/pcc.py SOURCES), what it means, whether full inheritance seeds."""
        from ccswitch.bpf.pcc import SEEDABLE, SOURCES

        src = self._pcc_source()
        return {"pcc": src, "pcc_detail": SOURCES[src], "pcc_seedable": src in SEEDABLE}

    def _warn_unseeded_pcc(self) -> None:
        """One warning when PCC is shared but its seed map is out of reach (no CAP_SYS_ADMIN)."""
        from ccswitch.bpf.pcc import SHARED_UNSEEDED, SOURCES, UNSEEDED_WARNING

        if self._pcc_source() == SHARED_UNSEEDED:
            log.warning("pcc shared without its seed map", extra={"fields": {
                "source": SHARED_UNSEEDED, "detail": SOURCES[SHARED_UNSEEDED], "consequence": UNSEEDED_WARNING}})

    def _rehome_orphaned_pcc(self, dp: Any, rec: Recorder) -> None:
        """Sockets still on a PCC whose registration died with a killed daemon: move them to ours.

        When this process had to register PCC itself (source "ccswitch"), no
        `pcc` existed a moment ago, so every socket showing "pcc" runs an
        unregistered copy whose BPF programs stay loaded until the socket
        closes.  Switching them to the fresh registration (full inheritance:
        rate and min RTT seeded) keeps them on PCC and frees the old copy.
        """
        from ccswitch.bpf.pcc import OWN as PCC_OWN

        if not dp.pcc or dp.pcc.source != PCC_OWN or not dp.monitor:
            return
        raw = dp.monitor.snapshot()
        cookies = [int(c) for c, name in zip(raw["cookie"], raw["cca"], strict=True) if name == b"pcc"]
        if not cookies:
            return
        res = dp.switch_many([(c, "pcc", "full") for c in cookies])
        ok = sum(r.ok for r in res)
        for r in res:
            rec.decision({"ts": time.time(), "flow": r.flow_id, "from": "pcc (unregistered)", "to": "pcc",
                          "action": "rehome", "reason": "start-up: socket on a PCC registration that died with a "
                          "previous process", "q": {}, "verdict": "applied" if r.ok else f"failed: {r.error}",
                          "policy": "-"})
        log.warning("re-homed sockets from an unregistered pcc", extra={"fields": {"sockets": len(cookies), "ok": ok}})

    def _reload(self, ctl: Any) -> None:
        from ccswitch.models.policy import PolicyError

        self.notifier.reloading()
        try:
            cfg = load_config(self.config_path)
            decider, warning = build_decider(dict(cfg.policy))
        except (ConfigError, PolicyError) as e:
            log.error("reload failed, keeping the running config", extra={"fields": {"error": str(e)}})
            self.notifier.ready("reload failed; running the previous config")
            return
        for key in ("socket", "state_file"):
            if cfg.daemon[key] != self.cfg.daemon[key]:
                log.warning("reload: change needs a restart", extra={"fields": {"key": f"daemon.{key}"}})
        if cfg.metrics["listen"] != self.cfg.metrics["listen"]:
            log.warning("reload: change needs a restart", extra={"fields": {"key": "metrics.listen"}})
        setup_logs(cfg.log["format"], cfg.log["level"])
        if warning:
            log.warning("policy fallback", extra={"fields": {"detail": warning}})
        close_decider(self.decider)
        self.cfg, self.decider = cfg, decider
        ctl.configure(cfg, decider)
        trim_heap()
        log.info("reloaded", extra={"fields": {"policy": decider.kind, "tick_s": ctl.tick_s,
                                               "config": str(cfg.path or "defaults")}})
        self.notifier.ready(f"policy {decider.kind}, tick {ctl.tick_s:g} s (reloaded)")

    # ---------------------------------------------------------- requests
    def handle(self, op: str, args: dict[str, Any]) -> Any:
        ctl = self.ctl
        if op == "status":
            return {**ctl.status(), "socket": str(self.socket_path), "config": str(self.cfg.path or "defaults"),
                    **self._pcc_status(), "record_file": self.args.record,
                    "decisions_file": self.args.decisions, "state_file": str(self.state_path)}
        if op == "flows":
            return ctl.flows()
        if op == "policy_show":
            return self.decider.describe()
        if op == "history":
            limit = _int_arg(args, "limit", 50)
            return list(ctl.history)[-limit:] if limit > 0 else list(ctl.history)
        if op == "switch":
            flow, cca = _flow_arg(args), _str_arg(args, "cca")
            if cca != "auto" and ctl._row_of(flow) is None:
                raise ValueError(f"flow {flow} not found among this namespace's TCP sockets (closed, or in "
                                 "another namespace); list flows with `ccswitch flows`")
            return ctl.manual_switch(flow, cca, args.get("inherit"))
        if op == "explain":
            if args.get("flow") is not None:
                return ctl.explain_flow(_flow_arg(args))
            from ccswitch.daemon.explain import explain_state

            policy = getattr(self.decider, "policy", None) or getattr(getattr(self.decider, "inner", None),
                                                                      "policy", None)
            if policy is None:
                raise ValueError(f"explain --state needs the DQN; this daemon decides with {self.decider.kind}")
            state = args.get("state") or {}
            if not isinstance(state, dict):
                raise ValueError("argument 'state' must be an object of feature: value")
            out = explain_state(policy, state)
            allowed = ctl.allowed()
            sc = {a: v for a, v in out["q"].items() if a in allowed}
            out["guard"] = ctl.guard.would(None, out["cca"], sc).as_dict()
            return out
        raise ValueError(f"unknown operation {op!r}")


_NO_DEFAULT = object()


def _int_arg(args: dict[str, Any], key: str, default: Any = _NO_DEFAULT) -> int:
    """A request's integer argument; ValueError (a one-line answer) when missing or not an integer."""
    v = args.get(key, default)
    if v is _NO_DEFAULT:
        raise ValueError(f"missing argument '{key}'")
    if isinstance(v, bool) or not isinstance(v, int | str):
        raise ValueError(f"argument '{key}' must be an integer, got {type(v).__name__}")
    try:
        return int(v)
    except ValueError:
        raise ValueError(f"argument '{key}' must be an integer, got {v!r}") from None


def _flow_arg(args: dict[str, Any]) -> int:
    """A flow id: the socket cookie, an unsigned 64-bit integer (ccswitch flows lists them)."""
    flow = _int_arg(args, "flow")
    if not 0 <= flow < 1 << 64:
        raise ValueError(f"argument 'flow' must be a flow id from `ccswitch flows` (0 .. 2^64-1), got {flow}")
    return flow


def _str_arg(args: dict[str, Any], key: str) -> str:
    v = args.get(key)
    if not isinstance(v, str):
        raise ValueError(f"argument '{key}' must be a string" + ("" if v is None else f", got {type(v).__name__}"))
    return v


if __name__ == "__main__":
    main()
