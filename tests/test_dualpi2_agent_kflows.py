"""The k agents' ``flows`` observation (issue 14: per-class active flow counts for actor and critic).

* Unit (no kernel): ``features_for``/``state_keys_for`` per mode and option (``flows`` only for the modes that
  set k); a ``flows`` k actor file round-trips (17 features, ``observation: flows`` recorded) and a file whose
  option and network or features disagree is refused; a file saved without the option has no ``observation``
  key (files written before it are what they were) and the shipped k actor loads as ``base`` and acts exactly as
  its mean network; the observer's two extra numbers on synthetic states (the first 15 are the base
  observer's); the router loop asks linkemu for the flow counts and logs 17 features.
* Kernel: linkemu's DualPI2 state counts 2 L4S and 3 Classic UDP flows sent through a live link, and none once
  they have been silent for longer than its 200 ms window; the flows observer reads them through the socket.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from test_dualpi2_agent_k import MODELS, _FakeDualPi2, _run_until

from ccswitch.models.dualpi2_actor import (
    OBS_FEATURES,
    OBS_FEATURES_K,
    OBS_FEATURES_KF,
    OBS_KINDS,
    STATE_KEYS,
    STATE_KEYS_K,
    STATE_KEYS_KF,
    ActorError,
    Observer,
    features_for,
    load_actor,
    save_actor,
    state_keys_for,
)
from ccswitch.models.policy import write_signed

# The k actor shipped before the flows option (residual-k, 15 features), its checksum as committed.
OLD_K_ACTOR = "dualpi2_a3c_k.json"


def flows_actor(path: Path, a_k: float, interval_s: float = 0.02, *, w_flows: float = 0.0) -> Path:
    """A ``k`` actor with the flows observation; output a_k, plus *w_flows* x (the l4s_flows feature)."""
    n = len(OBS_FEATURES_KF)
    k0 = np.zeros((n, 4), np.float32)
    k0[OBS_FEATURES_KF.index("l4s_flows"), 0] = w_flows
    k1 = np.zeros((4, 1), np.float32)
    k1[0, 0] = 1.0
    biases = [np.zeros(4, np.float32), np.arctanh(np.clip(np.array([a_k]), -0.999999, 0.999999)).astype(np.float32)]
    save_actor(path, kernels=[k0, k1], biases=biases, interval_s=interval_s, mode="k", obs="flows")
    return path


# ---------------------------------------------------------------- unit ---


def test_features_and_state_keys_per_mode_and_option() -> None:
    assert OBS_KINDS == ("base", "flows")
    for mode in ("k", "residual-k"):
        assert features_for(mode) == features_for(mode, "base") == OBS_FEATURES_K
        assert features_for(mode, "flows") == OBS_FEATURES_KF
        assert state_keys_for(mode) == STATE_KEYS_K and state_keys_for(mode, "flows") == STATE_KEYS_KF
    assert (*OBS_FEATURES_K, "l4s_flows", "classic_flows") == OBS_FEATURES_KF
    assert (*STATE_KEYS_K, "l4s_flows", "classic_flows") == STATE_KEYS_KF
    for mode in ("step", "residual"):
        assert features_for(mode) == OBS_FEATURES and state_keys_for(mode) == STATE_KEYS
        with pytest.raises(ValueError, match="not one of mode"):
            features_for(mode, "flows")
    with pytest.raises(ValueError, match="not one of mode"):
        features_for("k", "bogus")


def test_flows_actor_file_round_trip_and_refusals(tmp_path: Path) -> None:
    a = load_actor(flows_actor(tmp_path / "f.json", 0.5))
    doc = json.loads((tmp_path / "f.json").read_text())
    assert (a.mode, a.obs, doc["observation"], doc["features"]) == ("k", "flows", "flows", list(OBS_FEATURES_KF))
    assert a.act(np.zeros(len(OBS_FEATURES_KF), np.float32)) == pytest.approx(0.5, abs=1e-5)
    # The flow counts reach the network: 3 L4S flows (log2(4) / 4 = 0.5) through a weight of 1.
    b = load_actor(flows_actor(tmp_path / "w.json", 0.0, w_flows=1.0))
    x = np.zeros(len(OBS_FEATURES_KF), np.float32)
    x[OBS_FEATURES_KF.index("l4s_flows")] = 0.5
    assert b.act(x) == pytest.approx(math.tanh(0.5), abs=1e-6)
    # The option and the features (or the network's inputs) must agree.
    bad = dict(doc, features=list(OBS_FEATURES_K))
    write_signed(tmp_path / "feat.json", bad)
    with pytest.raises(ActorError, match="its features are not"):
        load_actor(tmp_path / "feat.json")
    base = dict(doc)
    del base["observation"]
    write_signed(tmp_path / "noobs.json", base)
    with pytest.raises(ActorError, match="its features are not"):
        load_actor(tmp_path / "noobs.json")
    write_signed(tmp_path / "bogus.json", dict(doc, observation="bogus"))
    with pytest.raises(ActorError, match="observation 'bogus' is not one"):
        load_actor(tmp_path / "bogus.json")
    step = json.loads((MODELS / "dualpi2_a3c_step.json").read_text())
    write_signed(tmp_path / "step.json", dict(step, observation="flows"))
    with pytest.raises(ActorError, match="observation 'flows' is not one"):
        load_actor(tmp_path / "step.json")
    n = len(OBS_FEATURES_K)
    save_actor(tmp_path / "short.json", kernels=[np.zeros((n, 1), np.float32)], biases=[np.zeros(1, np.float32)],
               interval_s=0.05, mode="k", obs="flows")
    with pytest.raises(ActorError, match="do not chain from 17 inputs to 1 output"):
        load_actor(tmp_path / "short.json")


def test_base_files_carry_no_observation_key_and_the_shipped_k_actor_acts_as_before(tmp_path: Path) -> None:
    n = len(OBS_FEATURES_K)
    save_actor(tmp_path / "b.json", kernels=[np.zeros((n, 1), np.float32)], biases=[np.zeros(1, np.float32)],
               interval_s=0.05, mode="k")
    assert "observation" not in json.loads((tmp_path / "b.json").read_text())
    assert load_actor(tmp_path / "b.json").obs == "base"
    a = load_actor(MODELS / OLD_K_ACTOR)
    doc = json.loads((MODELS / OLD_K_ACTOR).read_text())
    assert (a.mode, a.obs, "observation" in doc, tuple(doc["features"])) == ("residual-k", "base", False,
                                                                              OBS_FEATURES_K)
    assert a.checksum == doc["checksum"]
    rng = np.random.default_rng(5)
    for _ in range(50):
        obs = rng.uniform(-1, 2, n).astype(np.float32)
        x = obs
        for k, b in zip(a.kernels[:-1], a.biases[:-1], strict=True):
            x = np.maximum(x @ k + b, 0.0)
        want = tuple(map(float, np.tanh(x @ a.kernels[-1] + a.biases[-1])))
        assert a.act_all(obs) == want
    try:
        head = subprocess.run(["git", "-C", str(MODELS.parent), "show", f"HEAD:models/{OLD_K_ACTOR}"],
                              capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    assert (MODELS / OLD_K_ACTOR).read_bytes() == head


def test_flows_observer_appends_log2_counts_to_the_base_observation() -> None:
    states = [{"base_prob": 0.1, "k": 2.0, "classic_delay_ms": 15.0, "bytes_out": 0, "classic_packets_in": 0,
               "l4s_packets_in": 0, "classic_drops": 0, "l4s_flows": 3, "classic_flows": 1},
              {"base_prob": 0.1, "k": 2.0, "classic_delay_ms": 14.0, "bytes_out": 50_000, "classic_packets_in": 40,
               "classic_drops": 10, "l4s_packets_in": 90, "l4s_flows": 15, "classic_flows": 0}]
    fo, bo = Observer(rate_mbit=8.0, extended=True, flows=True), Observer(rate_mbit=8.0, extended=True)
    for t, s in enumerate(states):
        of, rf = fo.update(s, 1.0 + 0.05 * t)
        ob, _ = bo.update(s, 1.0 + 0.05 * t)
        assert of.shape == (17,) and of.dtype == np.float32 and of[:15].tolist() == ob.tolist()
        f = dict(zip(OBS_FEATURES_KF, of.tolist(), strict=True))
        want_l, want_c = math.log2(1 + s["l4s_flows"]) / 4, math.log2(1 + s["classic_flows"]) / 4
        assert (f["l4s_flows"], f["classic_flows"]) == (pytest.approx(want_l), pytest.approx(want_c))
        assert (rf["l4s_flows"], rf["classic_flows"]) == (s["l4s_flows"], s["classic_flows"])
    assert of[-2:].tolist() == [1.0, 0.0]  # 15 L4S flows -> 1, none -> 0
    # A linkemu without the counts (older build): zeros, as any missing state value.
    o, _ = Observer(rate_mbit=8.0, extended=True, flows=True).update({"base_prob": 0.1}, 0.0)
    assert o[-2:].tolist() == [0.0, 0.0]


def test_flows_loop_asks_for_the_counts_and_logs_17_features(tmp_path: Path) -> None:
    from ccswitch.testbed.runs.dualpi2_agent import AgentLoop

    fake = _FakeDualPi2(tmp_path / "ctl.sock")
    loop = AgentLoop(tmp_path / "ctl.sock", load_actor(flows_actor(tmp_path / "f.json", 1.0)), rate_mbit=50,
                     interval_s=0.005, k_restore=2.0, log_csv=tmp_path / "agent.csv").start()
    _run_until(loop, lambda: loop.steps >= 5)
    assert fake.k == pytest.approx(4.0, rel=1e-5)
    loop.stop()
    assert loop.error is None and fake.k == 2.0
    assert next(r for r in fake.requests if r["op"] == "state")["fields"] == list(STATE_KEYS_KF)
    rows = (tmp_path / "agent.csv").read_text().splitlines()
    assert rows[0].split(",")[1:18] == list(OBS_FEATURES_KF) and rows[0].split(",")[-3:] == ["action_k", "k_set",
                                                                                           "reward"]
    assert len(rows[1].split(",")) == len(rows[0].split(","))


# -------------------------------------------------------------- kernel ---

_SENDER = """
import socket, sys, time
dst, secs = sys.argv[1], float(sys.argv[2])
socks = []
for i, tos in enumerate((1, 1, 2, 0, 2)):  # 2 x ECT(1) (L4S), then ECT(0), Not-ECT, ECT(0) (Classic)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
    s.bind(("", 40001 + i))
    socks.append(s)
end = time.monotonic() + secs
while time.monotonic() < end:
    for s in socks:
        s.sendto(b"x" * 200, (dst, 9))
    time.sleep(0.002)
"""


@pytest.mark.kernel
def test_linkemu_counts_active_flows_per_class(tmp_path: Path) -> None:
    from ccswitch.testbed.runs.emulator import Emulator, dualpi2, emulator_config, link
    from ccswitch.testbed.runs.linkemu_control import LinkemuControl
    from ccswitch.testbed.runs.topology import Topology

    sock = tmp_path / "linkemu.sock"
    with Topology(1) as topo:
        cfg = emulator_config(topo.client_ifs, topo.server_if, uplink=link(20, 5, qdisc=dualpi2()),
                              downlink=link(20, 5), control={"socket": str(sock)})
        with Emulator(topo.router, cfg, stats_dir=tmp_path / "emu"), LinkemuControl(sock) as ctl:
            up = ctl.state("uplink")["uplink"]
            assert (up["l4s_flows"], up["classic_flows"], up["flow_window_ms"]) == (0, 0, 200.0)
            sender = subprocess.Popen(["ip", "netns", "exec", topo.clients[0], sys.executable, "-c", _SENDER,
                                       topo.server_addr, "1.5"])
            try:
                obs = Observer(rate_mbit=20, extended=True, flows=True)
                deadline, got = time.monotonic() + 1.4, (0, 0)
                while got != (2, 3) and time.monotonic() < deadline:
                    time.sleep(0.1)
                    st = ctl.state("uplink", fields=STATE_KEYS_KF)
                    o, raw = obs.update(st["uplink"], float(st["t_s"]))
                    got = (raw["l4s_flows"], raw["classic_flows"])
                assert got == (2, 3)
                assert o[-2:].tolist() == pytest.approx([math.log2(3) / 4, math.log2(4) / 4])
            finally:
                sender.wait(timeout=10)
            time.sleep(0.4)  # silent for longer than the window
            up = ctl.state("uplink")["uplink"]
            assert (up["l4s_flows"], up["classic_flows"]) == (0, 0)
