"""PCC (bpf/pcc.bpf.c) on a real bottleneck: efficiency and fairness.

Efficiency on the tbf bottleneck, which sits on a router namespace so queue
overflow is real loss, as at paper 002's MikroTik router; fairness between two
PCC clients through linkemu with a WAN-like RTT (why not the tbf: at the test).
iperf3's per-second receiver-side intervals are the independent measurement.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from ccswitch.dataplane import DataPlane
from ccswitch.host import available_ccas
from ccswitch.testbed.runs.emulator import binary_path
from ccswitch.testbed.runs.iperf import start_flow, start_server
from ccswitch.testbed.runs.netns import entered, run_in

from helpers import unregistered_within

pytestmark = pytest.mark.kernel
RATE_MBIT = 50.0


@pytest.mark.bottleneck(rate_mbit=RATE_MBIT, router=True)
def test_pcc_is_registered_and_released(bottleneck) -> None:
    with entered(bottleneck.sender), DataPlane() as dp:
        assert "pcc" in available_ccas()
        source = dp.pcc.source if dp.pcc else None
    if source == "ccswitch":  # ours, its holder's only user that DataPlane: gone with it
        assert unregistered_within("pcc")


@pytest.mark.slow
@pytest.mark.bottleneck(rate_mbit=RATE_MBIT, router=True)
def test_single_pcc_flow_fills_bottleneck(bottleneck, iperf3) -> None:
    """PCC holds the link: the median per-second rate over seconds 5..20 (the first seconds are
    PCC's start-up) >= 90 % of 50 Mbit/s, and the mean >= 80 %.

    The ceiling is ~95.6%: 1448 payload bytes per 1514-byte frame; quiet and loaded (two busy
    loops) runs give 46.8-47.9 Mbit/s mean, every second >= 44 Mbit/s.  The median is the
    efficiency claim; the mean is a floor against a collapse.  A mean-only bound at 90 % failed a
    CI run whose ping test in the same run saw 6 ms scheduler stalls (41.3 Mbit/s: a few seconds
    at 31-42, the rest at the link): a stalled VM, not PCC's choice of rate.  A PCC that settles
    below 45 Mbit/s fails the median; one that keeps collapsing fails the mean.  The sender uses
    net.ipv4.tcp_tso_rtt_log = 0: this path's base RTT is tens of microseconds, and below 512 us the
    kernel sizes TSO packets for a data centre (up to 64 KB per skb whatever the pacing rate);
    at 0 a TSO packet is ~1 ms of data at the pacing rate, as on every path of >= 512 us
    (docs/pcc-tuning.md).
    """
    run_in(bottleneck.sender, ["sysctl", "-qw", "net.ipv4.tcp_tso_rtt_log=0"])
    with start_server(bottleneck.receiver, 5321, bind=bottleneck.receiver_addr), \
            entered(bottleneck.sender), DataPlane():
        res = start_flow(bottleneck.sender, bottleneck.receiver_addr, 5321, cca="pcc",
                         seconds=20).wait(timeout=60)
    per_s = [iv.bits_per_second / 1e6 for iv in res.intervals]
    shown = f"Mbit/s per second: {[round(x, 1) for x in per_s]}"
    assert statistics.median(per_s[5:20]) >= 0.9 * RATE_MBIT, shown
    assert statistics.mean(per_s[5:20]) >= 0.8 * RATE_MBIT, shown


TWO_PCC_FLOWS = """\
name = "two-pcc-flows"
description = "two PCC clients through linkemu: 50 Mbit/s, 20 ms base RTT, a 1-BDP pfifo"
duration_s = 30
clients = 2
seeds = [1]
sample_interval_s = 1.0
daemon = false

[link]
emulator = "linkemu"

[link.uplink]
rate_mbit = 50
delay_ms = 10
qdisc = { kind = "pfifo", limit_pkts = 83 }

[link.downlink]
rate_mbit = 50
delay_ms = 10
qdisc = { kind = "pfifo", limit_pkts = 1000 }

[[flows]]
name = "P1"
client = 1
cca = "pcc"

[[flows]]
name = "P2"
client = 2
cca = "pcc"

[capture]
tshark = false
"""


@pytest.mark.slow
def test_two_pcc_flows_share_fairly(tmp_path: Path, iperf3: str, require: Callable[[bool, str], None]) -> None:
    """Two PCC flows started together on a WAN-like path converge to a fair share: Jain's index
    >= 0.95 and each flow >= 0.8 of its fair share over the last half (15 s) of a 30 s run, with
    >= 90 % of the link used (the testbed's own last-half metrics, from iperf3's per-second
    receiver-side rates and linkemu's delivery counter).

    The path is the one PCC is for: 20 ms base RTT and a one-BDP (83-packet) tail-drop queue
    through linkemu, two client namespaces.  27 Nov: Jain 0.995-1.000, min share 0.93-0.99,
    96.7-97.1 % in 9 of 9 runs (and 0.97-1.00 in 8 of 8 with ~0 base RTT through linkemu).  0.95
    allows a 39/61 split.  This test used to run on the tbf bottleneck's microsecond path, where
    two PCC flows drift apart (Jain 0.81-0.86 in 7 of 20 runs on 27 Nov, with and without the
    monitor loaded): a known limit, docs/pcc-tuning.md "Two flows on a microsecond path".
    """
    require(binary_path().is_file(), f"linkemu is not built ({binary_path()}); run scripts/setup.sh")
    scenario = tmp_path / "two-pcc-flows.toml"
    scenario.write_text(TWO_PCC_FLOWS)
    out = tmp_path / "out"
    cp = subprocess.run([sys.executable, "-m", "ccswitch.cli", "testbed", "run", str(scenario), "--out", str(out),
                         "--quiet"], capture_output=True, text=True, timeout=180, check=False)
    assert cp.returncode == 0, cp.stderr[-2000:]
    last = json.loads((out / "run-01-seed-1" / "summary.json").read_text())["metrics"]["last_half"]
    shown = {k: last[k] for k in ("throughput_mbps", "jain", "min_share", "utilisation")}
    assert last["jain"] >= 0.95, shown
    assert last["min_share"] >= 0.8, shown
    assert last["utilisation"] >= 0.9, shown  # fair, and still using the link
