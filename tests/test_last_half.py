"""The last-half target metrics on the conditions the generated space adds: web-like flows,
flows that come and go, and trace-driven links (utilisation against the trace's capacity).

Synthetic run data with numbers the metrics can be checked against exactly; the
real counterpart is every matrix run (tests/test_matrix.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from ccswitch.testbed.reports.run_folder import RunData, Series
from ccswitch.testbed.reports.run_metrics import last_half, trace_capacity_mbit


def _run(tmp_path: Path, flows: list[dict], goodput: dict[str, list[float]], *, dur: float = 10.0,
         rate: float | None = 100.0, emulator: dict | None = None) -> RunData:
    series = {}
    for name, g in goodput.items():
        s = Series(name)
        for k, v in enumerate(g, 1):
            if math.isnan(v):
                continue
            s.t_s.append(float(k))
            s.interval_s.append(1.0)
            s.cca.append("cubic")
            s.goodput_mbps.append(v)
            s.throughput_mbps.append(v * 1.03)
            s.rtt_ms.append(10.0)
        series[name] = s
    meta = {"sample_interval_s": 1.0, "duration_s": dur, "uplink_rate_mbit": rate, "t0_epoch": 1000.0,
            "flows": flows}
    return RunData(tmp_path, {"meta": meta, "emulator": emulator}, flows, series, [])


def _flow(name: str, start: float = 0.0, dur: float = 10.0, kind: str = "bulk") -> dict:
    return {"name": name, "client": 1, "cca": "cubic", "start_s": start, "duration_s": dur, "kind": kind}


NAN = math.nan


def test_web_flows_are_not_judged(tmp_path: Path) -> None:
    """Two equal bulk flows and a short web flow at 1 Mbit/s: the bulk flows share fairly."""
    run = _run(tmp_path, [_flow("C1"), _flow("C2"), _flow("W1", 6.0, 2.0, "web")],
               {"C1": [40.0] * 10, "C2": [40.0] * 10, "W1": [NAN] * 6 + [1.0, 1.0] + [NAN] * 2})
    lh = last_half(run)
    assert set(lh["share_of_fair"]) == {"C1", "C2"} and lh["min_share"] == pytest.approx(1.0)
    assert lh["targets"]["min_share"] and lh["jain"] == pytest.approx(1.0)


def test_early_stopper_is_judged_while_it_ran(tmp_path: Path) -> None:
    """C2 stops at 8 s. In 6-8 s C1 and C2 get 30/30, in 9-10 s C1 alone gets 60: every interval
    is fair, so both shares are 1 (the ratio of means would have called C2 starved: 30 vs 42)."""
    run = _run(tmp_path, [_flow("C1"), _flow("C2", 0.0, 8.0)],
               {"C1": [30.0] * 8 + [60.0, 60.0], "C2": [30.0] * 8 + [NAN, NAN]})
    lh = last_half(run)
    assert lh["share_method"].startswith("per-interval")
    assert lh["share_of_fair"] == pytest.approx({"C1": 1.0, "C2": 1.0})
    assert lh["targets"]["min_share"]


def test_late_joiner_that_never_gets_going_is_starved(tmp_path: Path) -> None:
    """C2 joins at 4 s and gets 5 of 60 Mbit/s: share 2 * 5 / 60 = 0.17 per interval."""
    run = _run(tmp_path, [_flow("C1"), _flow("C2", 4.0, 6.0)],
               {"C1": [60.0] * 4 + [55.0] * 6, "C2": [NAN] * 4 + [5.0] * 6})
    lh = last_half(run)
    assert lh["share_of_fair"]["C2"] == pytest.approx(5 / 30, rel=1e-6)
    assert not lh["targets"]["min_share"] and lh["min_share_flow"] == "C2"


def test_trace_capacity_over_the_window(tmp_path: Path) -> None:
    """A 1 s Mahimahi trace of 4 opportunities per ms (48 Mbit/s) then 2 per ms (24 Mbit/s) for
    the next second, 1500 B each, looped; linkemu started 1 s before the scenario clock. Scenario
    5-10 s = emulator 6-11 s: halves of 48 and 24 except one extra 48-second (6, 8, 10 even)."""
    trace = tmp_path / "t.trace"
    lines = [ms for ms in range(1, 1001) for _ in range(4)] + [ms for ms in range(1001, 2001) for _ in range(2)]
    trace.write_text("\n".join(map(str, lines)) + "\n")
    (tmp_path / "emulator").mkdir()
    (tmp_path / "emulator" / "config.json").write_text(json.dumps(
        {"uplink": {"trace": str(trace), "trace_bytes_per_opportunity": 1500}}))
    emu = {"run": {"start_unix_s": 999.0}}
    run = _run(tmp_path, [_flow("C1"), _flow("C2")], {"C1": [20.0] * 10, "C2": [20.0] * 10}, rate=None,
               emulator=emu)
    # emulator seconds [6, 11): 6,8,10 at 48 Mbit/s; 7,9 at 24 (second k covers ms (1000k, 1000k+1000])
    cap = trace_capacity_mbit(run, 5.0, 10.0)
    assert cap == pytest.approx((3 * 48 + 2 * 24) / 5, rel=0.01)
    lh = last_half(run)
    assert lh["capacity_source"] == "trace" and not math.isnan(lh["utilisation"])
    assert lh["utilisation"] == pytest.approx(40 * 1.03 / cap, rel=0.01)  # wire throughput / capacity


def test_run_plot_marks_daemon_switches_and_flow_lifetimes(tmp_path: Path) -> None:
    """The plot's legend gives each flow's CCA path and lifetime; a daemon's switch gets a line.

    C1 is switched cubic -> bbr by a daemon at 4 s (seen in the samples, no
    scripted switch): one marker labelled "bbr" at 4 s in C1's colour; C2
    joins at 3 s and leaves at 8 s.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ccswitch.testbed.reports import run_plots as runrep

    run = _run(tmp_path, [_flow("C1"), _flow("C2", 3.0, 5.0)],
               {"C1": [40.0] * 10, "C2": [NAN] * 3 + [20.0] * 5 + [NAN] * 2})
    run.series["C1"].cca[3:] = ["bbr"] * 7
    changes = runrep._daemon_changes(run, [])
    assert changes == {"C1": [(4.0, "cubic", "bbr")], "C2": []}
    assert runrep._cca_path(run, run.flows[0], changes) == "cubic->bbr"
    assert runrep._lifetime(run.flows[1], run) == "3-8 s"
    # a scripted switch (the scenario's own) is drawn once, not again as the daemon's
    assert runrep._daemon_changes(run, [{"flow": "C1", "at_s": 3.5, "cca": "bbr"}]) == {"C1": [], "C2": []}
    fig, ax = plt.subplots()
    runrep._mark_daemon_switches(ax, run, changes, ["tab:blue", "tab:orange"])
    assert [t.get_text() for t in ax.texts] == ["bbr"]
    assert [tuple(line.get_xdata()) for line in ax.lines] == [(4.0, 4.0)]
    plt.close(fig)  # plot_run itself draws these on every real run (tests/test_runner.py)
