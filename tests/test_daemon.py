"""ccswitchd for real: a daemon in a sender namespace switching live iperf3 flows.

Every test starts the real `ccswitchd` (through nsenter, as the testbed does)
with --socket/--record/--decisions in a temporary folder and drives it with
the real `ccswitch` CLI.  Timing tolerances: decisions happen at most every
0.2 s tick here; waits are several times the configured guard times so that a
loaded 2-core machine (ticks of 100+ ms) still gets there, and every wait is
a poll with a deadline, not a fixed sleep.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from ccswitch.daemon.protocol import ProtocolError, request
from ccswitch.schema import FLOW_SAMPLE_SCHEMA
from ccswitch.testbed.runs.netns import nsenter_argv, popen_in

from helpers import load_bench

pytestmark = pytest.mark.kernel
REPO = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "ccswitch.cli"]


def bpf_programs_of(pid: int) -> int:
    """BPF programs/maps/links the process holds (fdinfo entries with prog_id/map_id/link_id)."""
    n = 0
    for fd in os.listdir(f"/proc/{pid}/fdinfo"):
        try:
            info = Path(f"/proc/{pid}/fdinfo/{fd}").read_text()
        except OSError:
            continue
        n += any(line.startswith(("prog_id:", "map_id:", "link_id:")) for line in info.splitlines())
    return n


class Daemon:
    def __init__(self, ns: str, tmp: Path, config: str, tag: str = "1", out: Path | None = None):
        """*out*: where the record and decisions files go (default *tmp*)."""
        self.ns, self.tmp, self.tag = ns, tmp, tag
        self.cfg = tmp / "c.toml"
        self.cfg.write_text(config)
        self.sock = str(tmp / "s.sock")
        self.record = (out or tmp) / f"r{tag}.parquet"
        self.decisions = (out or tmp) / "d.jsonl"
        self.err = (tmp / f"err{tag}.log").open("w")
        self.proc = subprocess.Popen(nsenter_argv(ns, [sys.executable, "-m", "ccswitch.daemon.main", "--config",
                                                       str(self.cfg), "--socket", self.sock, "--record",
                                                       str(self.record), "--decisions", str(self.decisions)]),
                                     stderr=self.err)
        wait_for(lambda: os.path.exists(self.sock) and self.ask("status"), 30, "daemon start", self)

    def ask(self, op: str, **kw: Any) -> Any:
        try:
            return request(self.sock, op, **kw)
        except Exception:
            if self.proc.poll() is not None:
                raise
            return None

    def cli(self, *args: str, user: int | None = None) -> subprocess.CompletedProcess[str]:
        pre = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups"] if user is not None else []
        return subprocess.run([*pre, *CLI, "--socket", self.sock, *args], capture_output=True, text=True,
                              timeout=60)

    def log(self) -> str:
        if not self.err.closed:
            self.err.flush()
        return (self.tmp / f"err{self.tag}.log").read_text()

    def stop(self, sig: int = signal.SIGTERM) -> int:
        self.proc.send_signal(sig)
        rc = self.proc.wait(30)
        self.err.close()
        return rc


def wait_for(pred: Callable[[], Any], timeout: float, what: str, d: Daemon | None = None) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        if d is not None and d.proc.poll() is not None:
            pytest.fail(f"ccswitchd exited ({d.proc.returncode}) while waiting for {what}: {d.log()[-2000:]}")
        time.sleep(0.2)
    pytest.fail(f"timed out after {timeout} s waiting for {what}" + (f": {d.log()[-2000:]}" if d else ""))


def data_flows(d: Daemon, port: int) -> list[dict]:
    """iperf3's data connections to *port*, busiest first.  Its control connection goes to the
    same port and can pass 100 kbit/s in its first interval (parameter exchange), never 1 Mbit/s."""
    rows = d.ask("flows") or []
    found = [r for r in rows if r["dport"] == port and r["throughput_bps"] > 1e6]
    return sorted(found, key=lambda r: -r["throughput_bps"])


@pytest.fixture
def server(bottleneck) -> Iterator[int]:
    port = 5301
    srv = popen_in(bottleneck.receiver, ["iperf3", "-s", "-p", str(port)], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    time.sleep(0.3)
    yield port
    srv.kill()
    srv.wait()


def iperf(bn, port: int, seconds: int, cca: str = "bbr", parallel: int = 1) -> subprocess.Popen[str]:
    return popen_in(bn.sender, ["iperf3", "-c", bn.receiver_addr, "-p", str(port), "-t", str(seconds), "-C", cca,
                                "-P", str(parallel), "-J"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def decisions(d: Daemon) -> list[dict]:
    return [json.loads(line) for line in d.decisions.read_text().splitlines() if line.strip()]


STATIC = (Path(__file__).parent / "fixtures" / "daemon-static-fast.toml").read_text()
"""Every managed flow to cubic, fast; shared with scripts/systemd-check.sh."""


def test_daemon_switches_a_real_flow_and_respects_a_manual_pin(bottleneck, server, tmp_path: Path) -> None:
    """Static policy "cubic": the daemon moves bbr flows to cubic through the guard (2 consecutive
    decisions); a manual override to bbr pins one flow, which the daemon then leaves alone.
    SIGTERM: exit 0, a readable FlowSample Parquet, decisions JSONL with reasons, BPF released."""
    d = Daemon(bottleneck.sender, tmp_path, STATIC)
    client = iperf(bottleneck, server, 12, "bbr", parallel=2)
    try:
        wait_for(lambda: len(data_flows(d, server)) == 2 and all(r["cca"] == "cubic" for r in data_flows(d, server)),
                 20, "both flows switched to cubic", d)
        flow = data_flows(d, server)[0]["flow_id"]
        cp = d.cli("switch", str(flow), "bbr")
        assert cp.returncode == 0 and "pinned" in cp.stdout, cp.stderr
        time.sleep(2.0)  # 10 ticks, 2 decisions' worth of static preference for cubic
        rows = {r["flow_id"]: r for r in data_flows(d, server)}
        assert rows[flow]["cca"] == "bbr" and rows[flow]["pinned"] == "bbr"
        assert rows[flow]["last_reason"].startswith("pinned")
        cp = d.cli("history", "--json")
        hist = json.loads(cp.stdout)
        assert [h["kind"] for h in hist].count("policy") >= 2 and hist[-1]["kind"] == "manual"
        exp = json.loads(d.cli("policy", "explain", "--flow", str(flow), "--json").stdout)
        assert exp["guard"]["reason"].startswith("pinned") and set(exp["q"]) >= {"cubic", "bbr"}
        st = json.loads(d.cli("status", "--json").stdout)
        assert st["policy"]["kind"] == "static" and st["switches"] >= 2 and st["manual"] == 1
        unknown = d.cli("switch", "999999999", "cubic")
        assert unknown.returncode == 1 and unknown.stderr.startswith("ccswitch: error: flow 999999999 not found")
        # ill-typed arguments: a one-line answer naming the argument, the flow untouched (fuzzed further
        # in tests/test_fuzz_parsers.py against the real server)
        for bad, needle in ((dict(flow=[flow], cca="cubic"), "argument 'flow' must be an integer"),
                            (dict(flow=flow, cca=3), "argument 'cca' must be a string"),
                            (dict(cca="cubic"), "missing argument 'flow'")):
            with pytest.raises(ProtocolError, match=needle):
                request(d.sock, "switch", **bad)
        with pytest.raises(ProtocolError, match="argument 'limit' must be an integer"):
            request(d.sock, "history", limit={"a": 1})
        assert {r["flow_id"]: r for r in data_flows(d, server)}[flow]["pinned"] == "bbr"
        nobody = d.cli("status", user=65534)
        assert nobody.returncode == 1 and "root-only" in nobody.stderr and nobody.stderr.count("\n") == 1
    finally:
        client.wait(30)
        pid = d.proc.pid
        assert bpf_programs_of(pid) > 0
        assert d.stop() == 0, d.log()
    t = pq.read_table(d.record)
    assert t.schema.equals(FLOW_SAMPLE_SCHEMA) and t.num_rows > 20
    assert {"cubic", "bbr"} <= set(t.column("cca").to_pylist())
    dec = decisions(d)
    sw = [x for x in dec if x["action"] == "switch" and x["verdict"] == "applied"]
    assert len(sw) >= 2 and all(x["to"] == "cubic" and x["reason"] and "q" in x for x in sw)
    assert any(x["action"] == "manual" and x["flow"] == flow for x in dec)
    assert '"msg":' not in d.log() and "msg=stopped" in d.log()


def test_restart_mid_flow_loses_and_doubles_no_switch(bottleneck, server, tmp_path: Path) -> None:
    """Stop (SIGTERM) and start again while flows run: the flows keep running; the restarted
    daemon repeats no switch (dwell and evaluation restored from the state file) and keeps the pin."""
    cfg = STATIC.replace("min_dwell_s = 1.0", "min_dwell_s = 30.0")
    d = Daemon(bottleneck.sender, tmp_path, cfg)
    client = iperf(bottleneck, server, 14, "bbr", parallel=2)
    try:
        wait_for(lambda: len(data_flows(d, server)) == 2 and all(r["cca"] == "cubic" for r in data_flows(d, server)),
                 20, "both flows switched to cubic", d)
        a, b = (r["flow_id"] for r in data_flows(d, server))
        assert d.cli("switch", str(a), "bbr").returncode == 0
        first = d.ask("status")
        assert d.stop() == 0
        d2 = Daemon(bottleneck.sender, tmp_path, cfg, tag="2")
        assert "state restored" in d2.log()
        time.sleep(3.0)  # 15 ticks, 3 decisions
        rows = {r["flow_id"]: r for r in data_flows(d2, server)}
        assert rows[a]["cca"] == "bbr" and rows[a]["pinned"] == "bbr"  # the manual switch is not lost
        assert rows[b]["cca"] == "cubic"
        st = d2.ask("status")
        assert st["switches"] == 0 and st["manual"] == 0  # nothing repeated
        hist = d2.ask("history", limit=0)
        assert len(hist) == first["switches"] + 1  # the history carried over, no new entry
    finally:
        client.wait(30)
    assert d2.stop() == 0
    out = json.loads(client.stdout.read()) if client.stdout else {}
    assert out["end"]["sum_sent"]["bytes"] > 0
    t2 = pq.read_table(d2.record)
    thr = [r["throughput_bps"] for r in t2.to_pylist() if r["flow_id"] in (a, b)]
    assert thr and max(thr) > 1e6  # the flows kept running under the second daemon


def test_kill9_leaves_flows_running_and_the_next_start_cleans_up(bottleneck, server, tmp_path: Path) -> None:
    """kill -9 while a flow runs on PCC: the flow keeps running (the kernel holds a reference to
    the struct_ops algorithm of a socket using it), the control socket file stays behind.  The next
    start removes the stale socket, restores the pin and, when it had to register PCC itself,
    re-homes the socket onto its registration (the orphaned copy is then freed)."""
    cfg = '[policy]\nkind = "observe"\n[flows]\nmin_age_s = 0.5\n'
    d = Daemon(bottleneck.sender, tmp_path, cfg)
    client = iperf(bottleneck, server, 12, "cubic")
    try:
        wait_for(lambda: data_flows(d, server), 15, "the flow", d)
        flow = data_flows(d, server)[0]["flow_id"]
        assert d.cli("switch", str(flow), "pcc").returncode == 0
        d.stop(signal.SIGKILL)
        assert os.path.exists(d.sock)  # nothing ran on the way out
        time.sleep(1.0)
        d2 = Daemon(bottleneck.sender, tmp_path, cfg, tag="2")
        log = d2.log()
        assert "stale control socket removed" in log and "state restored" in log
        st = d2.ask("status")
        rows = wait_for(lambda: data_flows(d2, server), 10, "the flow under the new daemon", d2)
        assert rows[0]["flow_id"] == flow and rows[0]["cca"] == "pcc" and rows[0]["pinned"] == "pcc"
        if st["pcc"] == "ccswitch":  # PCC died with the killed daemon: its sockets were re-homed
            assert "re-homed sockets from an unregistered pcc" in log
            assert any(x["action"] == "rehome" and x["flow"] == flow and x["verdict"] == "applied"
                       for x in decisions(d2))
    finally:
        client.wait(30)
    assert d2.stop() == 0
    out = json.loads(client.stdout.read()) if client.stdout else {}
    assert out["end"]["sum_sent"]["bytes"] > 0 and not out.get("error")


def test_read_group_members_read_but_never_switch(bottleneck) -> None:
    """daemon.read_group = "nogroup": a member (uid 65534, gid nogroup) gets status, flows and
    history; its switch is refused in one line; a non-member (gid 1) is refused everything; the
    socket is 0660 and group-owned.  (The socket lives in a world-traversable directory: pytest's
    tmp_path is under a 0700 directory a non-root user cannot cross.)"""
    import grp
    import shutil
    import stat
    import tempfile

    gid = grp.getgrnam("nogroup").gr_gid
    base = Path(tempfile.mkdtemp(prefix="ccs-readgroup-", dir="/tmp"))
    base.chmod(0o755)
    d = Daemon(bottleneck.sender, base, STATIC.replace("[daemon]", '[daemon]\nread_group = "nogroup"', 1))

    def as_user(g: int, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["setpriv", "--reuid=65534", f"--regid={g}", "--clear-groups", *CLI, "--socket",
                               d.sock, *args], capture_output=True, text=True, timeout=60)
    try:
        st = os.stat(d.sock)
        assert stat.S_IMODE(st.st_mode) == 0o660 and st.st_gid == gid and st.st_uid == 0
        member = as_user(gid, "status", "--json")
        assert member.returncode == 0 and json.loads(member.stdout)["policy"]["kind"] == "static", member.stderr
        assert as_user(gid, "flows", "--json").returncode == 0
        assert as_user(gid, "history", "--json").returncode == 0
        sw = as_user(gid, "switch", "1", "bbr")
        assert sw.returncode == 1 and sw.stderr.count("\n") == 1, sw.stderr
        assert "'switch' changes the daemon's state and is root-only" in sw.stderr
        other = as_user(1, "status")
        assert other.returncode == 1 and other.stderr.count("\n") == 1 and "permission denied" in other.stderr
        assert json.loads(d.cli("status", "--json").stdout)["manual"] == 0  # nothing reached the controller
    finally:
        assert d.stop() == 0, d.log()
        shutil.rmtree(base, ignore_errors=True)


def test_bad_config_and_bad_policy_refuse_to_start_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[daemon]\ntick_s = 0.01\n')
    cp = subprocess.run([sys.executable, "-m", "ccswitch.daemon.main", "--config", str(bad), "--socket",
                         str(tmp_path / "s.sock")], capture_output=True, text=True, timeout=60)
    assert cp.returncode == 1 and cp.stderr.strip() == (f"ccswitchd: error: {bad}: daemon.tick_s: must be >= 0.1, "
                                                        "got 0.01")
    pol = tmp_path / "p.json"
    pol.write_text("{not json")
    cfgf = tmp_path / "c.toml"
    cfgf.write_text(f'[policy]\nfile = "{pol}"\n')
    cp = subprocess.run([sys.executable, "-m", "ccswitch.daemon.main", "--config", str(cfgf), "--socket",
                         str(tmp_path / "s.sock")], capture_output=True, text=True, timeout=60)
    assert cp.returncode == 1 and cp.stderr.count("\n") == 1 and "invalid JSON" in cp.stderr
    assert "policy.fallback" in cp.stderr and not (tmp_path / "s.sock").exists()
    cfgf.write_text('[daemon]\nread_group = "no-such-group-ccs"\n')
    cp = subprocess.run([sys.executable, "-m", "ccswitch.daemon.main", "--config", str(cfgf), "--check-config"],
                        capture_output=True, text=True, timeout=60)
    assert cp.returncode == 1 and cp.stderr.count("\n") == 1, cp.stderr
    assert "daemon.read_group: no group 'no-such-group-ccs' on this host; create it" in cp.stderr


def test_socket_churn_leaks_nothing() -> None:
    """10 s of 1,000 connections/s (bench/daemon_churn.py, which runs the 60 s version): the
    monitor's flow map is back to its size, RSS grows <= 15 MB between the first and last
    quarter (bounds and their reasons in the bench's docstring), and the daemon keeps up: its own
    tick time p99 <= 1 s, i.e. within 5 ticks.  The bench's 100 ms p99 is a speed target, checked by
    the bench on a quiet machine; here the connection generator shares the 2 cores with the daemon
    and any other load (248 ms p99 seen at load average 9), so the test bounds only falling behind."""
    mod = load_bench("daemon_churn")
    res = mod.run(rate=1000, seconds=10, quiet=True)
    assert res["connections"] >= 5000, res  # the generator got close to its rate
    assert not [bad for bad in mod.check(res) if "tick" not in bad], res
    assert res["own_p99_ms"] <= 1000.0, res


HEURISTIC = """
[daemon]
tick_s = 0.2
[policy]
kind = "heuristic"
explore_every_s = 600.0
[guard]
min_dwell_s = 1.0
eval_window_s = 1.0
revert_threshold = 1000.0
max_switches_per_min = 10
jitter_s = 0.0
[flows]
min_age_s = 0.5
"""


def test_heuristic_explores_a_lone_real_flow(bottleneck, server, tmp_path: Path) -> None:
    """The heuristic on one real CUBIC flow (nothing else on its path to learn from) tries bbr and
    pcc on the live socket ("explore: trying ..."), each for the dwell time, so the record shows the
    flow under all three.  (Fake-clock counterpart: tests/test_daemon_controller.py.)  Timing: a round is
    2 x max(dwell, evaluation) = 2 s of decisions; 20 s allows a loaded machine 10x slower ticks, and the
    flow is started for longer than the waits (it used to last 9 s, shorter than the 20 s allowed) and
    stopped as soon as the daemon has seen it carry data under all three."""
    d = Daemon(bottleneck.sender, tmp_path, HEURISTIC)
    client = iperf(bottleneck, server, 40, "cubic")
    try:
        first = wait_for(lambda: data_flows(d, server), 15, "the flow", d)[0]
        flow = first["flow_id"]
        seen = {first["cca"]}

        def tried() -> set[str]:
            hist = d.ask("history", limit=0) or []
            return {h["to"] for h in hist if h["flow"] == flow and h["kind"] == "explore"
                    and h["reason"].startswith("explore: trying")}

        def carried_data_under_each() -> set[str]:  # polled: a candidate runs for ~1 s
            seen.update(r["cca"] for r in d.ask("flows") or []
                        if r["flow_id"] == flow and r["throughput_bps"] > 1e5)
            return seen

        def explored() -> bool:  # watches the flow's CCA while it waits for the switches
            carried_data_under_each()
            return tried() >= {"bbr", "pcc"}

        wait_for(explored, 20, "explore switches to bbr and pcc", d)
        wait_for(lambda: carried_data_under_each() >= {"cubic", "bbr", "pcc"}, 10,
                 "the flow carrying data under each", d)
    finally:
        client.terminate()
        client.wait(30)
    assert d.stop() == 0, d.log()
    t = pq.read_table(d.record)
    under = {r["cca"] for r in t.to_pylist() if r["flow_id"] == flow and r["throughput_bps"] > 1e5}
    assert under >= {"cubic", "bbr", "pcc"}, under
