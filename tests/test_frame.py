"""FlowFrame (ccswitch/frame.py): the daemon's numpy form of FlowSample batches, and issue 12's rule
that ccswitchd's decision path never imports pyarrow (~40 MB resident, docs/daemon.md "Costs")."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap

import numpy as np
import pyarrow as pa

from ccswitch.frame import FlowFrame, as_frame, frame_from_rows
from ccswitch.schema import FIELD_NAMES, FIELDS, FLOW_SAMPLE_SCHEMA, REQUIRED_FIELD_NAMES, complete


def _rows(n: int) -> list[dict]:
    rng = np.random.default_rng(5)
    out = []
    for i in range(n):
        r = {f.name: (f"x{i % 3}" if f.is_string else (float(rng.uniform()) if f.kind == "float64" else i + 1))
             for f in FIELDS}
        r.update(flow_id=2**64 - 1 - i, cca=("cubic", "bbr", "pcc")[i % 3],
                 dst=("10.0.0.10", "10.0.0.9", "fd00::1")[i % 3], src="ä-10.0.0.1",
                 jitter_us=math.nan if i % 4 == 0 else 3.0)
        out.append(r)
    return out


def test_arrow_round_trip_is_lossless_including_nulls() -> None:
    rows = _rows(7)
    rows[2]["ecn_mode"] = None  # optional columns may be null (files from before they existed)
    rows[3]["ce_fraction"] = None
    t = pa.Table.from_pylist(rows, schema=FLOW_SAMPLE_SCHEMA)
    f = FlowFrame.from_arrow(t)
    back = f.to_arrow()
    assert back.schema.equals(FLOW_SAMPLE_SCHEMA, check_metadata=True)
    assert _same(back.to_pylist(), t.to_pylist()) and back.column("ce_fraction").null_count == 1
    assert _same(f.to_pylist(), t.to_pylist())
    assert f.null_mask("ecn_mode").tolist() == [False, False, True, False, False, False, False]
    assert f.column("flow_id").dtype == np.uint64 and int(f.column("flow_id")[0]) == 2**64 - 1
    # sliced / chunked input, and a file without the optional columns: nulls there
    sl = pa.concat_tables([t.slice(0, 3), t.slice(3)]).slice(1, 5)
    assert _same(FlowFrame.from_arrow(sl).to_pylist(), sl.to_pylist())
    old = t.select(list(REQUIRED_FIELD_NAMES))
    assert _same(FlowFrame.from_arrow(old).to_pylist(), complete(old).to_pylist())
    assert FlowFrame.empty().to_arrow().equals(FLOW_SAMPLE_SCHEMA.empty_table())


def test_codes_take_concat_and_columns() -> None:
    f = frame_from_rows(_rows(6))
    codes, values = f.codes("dst")
    assert values == sorted(set(values)) == ["10.0.0.10", "10.0.0.9", "fd00::1"]
    assert [values[c] for c in codes] == f.column("dst").tolist()
    g = f.take([5, 0, 0])
    assert g.column("cca").tolist() == ["pcc", "cubic", "cubic"] and g.codes("cca")[1] == ["cubic", "pcc"]
    # unsorted, repeated values (as the sampler builds them) read the same
    h = f.with_columns({"cca": (np.array([1, 0, 2, 1, 0, 2]), ["pcc", "bbr", "pcc"])})
    assert h.codes("cca")[0].tolist() == [0, 1, 1, 0, 1, 1] and h.codes("cca")[1] == ["bbr", "pcc"]
    both = FlowFrame.concat([f, h])
    assert both.num_rows == 12 and both.column("cca").tolist() == f.column("cca").tolist() + h.column("cca").tolist()
    assert as_frame(f) is f and list(f.to_pylist()[0]) == list(FIELD_NAMES)
    assert list(g.value_counts("cca").items()) == [("pcc", 1), ("cubic", 2)]  # first appearance, as Arrow


def _same(a: list[dict], b: list[dict]) -> bool:
    """Row lists equal, NaN == NaN."""
    def norm(v: object) -> object:
        return "NaN" if isinstance(v, float) and math.isnan(v) else v
    return [{k: norm(v) for k, v in r.items()} for r in a] == [{k: norm(v) for k, v in r.items()} for r in b]


LEAN = textwrap.dedent("""
    import sys
    import numpy as np
    import ccswitch.daemon.main, ccswitch.dataplane, ccswitch.daemon.server  # what ccswitchd imports
    from ccswitch.bpf.switcher import SwitchResult
    from ccswitch.daemon.config import parse_config
    from ccswitch.daemon.controller import Controller
    from ccswitch.daemon.policies import build_decider
    from ccswitch.daemon.recorder import Recorder
    from ccswitch.frame import FlowFrame
    from ccswitch.schema import FIELDS

    class Plane:  # as DataPlane: sample_frame() gives FlowFrames
        def __init__(self):
            self.cca = {i: ("cubic", "bbr", "pcc")[i % 3] for i in range(1, 31)}
            self.k = 0
        def sample_frame(self):
            self.k += 1
            ids = sorted(self.cca)
            n = len(ids)
            cols = {f.name: np.zeros(n, f.dtype) for f in FIELDS if not f.is_string}
            names = sorted(set(self.cca.values()))
            cols.update(flow_id=np.array(ids, np.uint64), state=np.ones(n, np.uint8), interval_s=np.ones(n),
                        throughput_bps=np.linspace(1e6, 5e7, n) * (1 + 0.1 * self.k), rtt_us=np.full(n, 2e4),
                        rtt_ratio=np.ones(n), sent_segs=np.full(n, 100, np.uint32),
                        sndq_bytes=np.full(n, 1000, np.uint32),
                        src=(np.zeros(n, np.int64), ["10.0.0.1"]), dst=(np.arange(n) % 2, ["10.0.1.1", "10.0.1.2"]),
                        cca=(np.array([names.index(self.cca[i]) for i in ids]), names))
            return FlowFrame(cols)
        def sample(self):
            raise AssertionError("the controller must read sample_frame()")
        def switch_many(self, reqs):
            out = []
            for f, c, inh in reqs:
                out.append(SwitchResult(f, c, inh, ok=True, cca_before=self.cca[f], cca_after=c))
                self.cca[f] = c
            return out

    for kind in ("observe", "dqn", "heuristic", "static"):
        cfg = parse_config({"daemon": {"tick_s": 0.5}, "policy": {"kind": kind, "decision_interval_s": 1.0},
                            "flows": {"min_age_s": 0.0, "dst_prefixes": ["10.0.0.0/8"]},
                            "guard": {"min_dwell_s": 0.0, "consecutive": 1, "jitter_s": 0.0, "eval_window_s": 1.0}})
        dec, _ = build_decider(dict(cfg.policy))
        with Recorder(decisions=sys.argv[1] + f"/{kind}.jsonl") as rec:
            ctl = Controller(cfg, dec, Plane(), available=lambda: ["cubic", "bbr", "pcc"], recorder=rec)
            for _ in range(6):
                ctl.tick()
            ctl.status(), ctl.flows(), ctl.explain_flow(1) if kind in ("observe", "dqn") else None
            ctl.stop_actions("cubic", True)
        assert ctl.stats.decisions > 0, kind
        bad = sorted(m for m in sys.modules if m.split(".")[0] == "pyarrow")
        assert not bad, f"{kind}: the daemon's decision path imported {bad[:3]}"
    print("ok")
""")


def test_daemon_decision_path_never_imports_pyarrow(tmp_path) -> None:
    """A fresh interpreter imports what ccswitchd imports and runs decisions in observe, dqn, heuristic
    and static mode (aggregation, selection, fairness, scores, guard, the control socket's queries,
    the decisions file) on a FlowFrame plane: pyarrow must stay unloaded (it costs ~40 MB)."""
    cp = subprocess.run([sys.executable, "-c", LEAN, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert cp.returncode == 0 and cp.stdout.strip() == "ok", cp.stderr[-2000:]
