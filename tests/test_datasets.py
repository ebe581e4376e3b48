"""Traces: format round trip, validation errors, iperf3/tshark import, corpus specs, binning, capture."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest

from ccswitch.datasets.corpus_runs import scenario_text
from ccswitch.datasets.corpus_spec import SpecError, parse_spec
from ccswitch.datasets.importers import import_iperf3, import_tshark, tshark_samples
from ccswitch.datasets.synthetic import make_corpus
from ccswitch.datasets.trace import (
    MANIFEST,
    SAMPLES,
    Capture,
    TraceError,
    bin_flows,
    find_captures,
    read_manifest,
    read_samples,
    write_capture,
)
from ccswitch.schema import FIELD_NAMES, FLOW_SAMPLE_SCHEMA

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "datasets" / "examples"
SAMPLE = REPO / "datasets" / "sample"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_corpus(tmp_path_factory.mktemp("syn") / "corpus", n_conditions=3, duration_s=12)


@pytest.fixture
def samples_file(corpus: Path, tmp_path: Path) -> Path:
    src = next(corpus.rglob(SAMPLES))
    dst = tmp_path / SAMPLES
    shutil.copyfile(src, dst)
    return dst


def _rewrite(path: Path, table: pa.Table, **kw: object) -> None:
    pq.write_table(table, path, **kw)


# ---------------------------------------------------------------- format ---


def test_capture_round_trip_and_corpus_readable_as_one_dataset(corpus: Path) -> None:
    caps = find_captures(corpus)
    assert len(caps) == 3 * 9  # 3 conditions x (3 static + 6 switch arms)
    for c in caps:
        c.validate()
        t = c.samples()
        assert t.schema.equals(FLOW_SAMPLE_SCHEMA)
        assert c.agent_flow() is not None and c.condition is not None
    # one Parquet dataset across every capture (what pandas / DuckDB / Spark do with a glob)
    files = sorted(str(p) for p in corpus.rglob(SAMPLES))
    total = pads.dataset(files, format="parquet").to_table()
    assert total.num_rows == sum(c.samples().num_rows for c in caps)
    assert set(total.column_names) >= set(FIELD_NAMES)


def test_manifest_records_format_versions_and_checksum(corpus: Path) -> None:
    m = read_manifest(next(corpus.rglob(MANIFEST)))
    assert m["format"] == "ccswitch-trace" and m["format_version"] == 1 and m["schema_version"] == 1
    assert len(m["files"][SAMPLES]["sha256"]) == 64
    assert {"python", "pyarrow", "kernel", "ccswitch"} <= set(m["tools"])


def test_corrupt_file_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(TraceError, match=r"bad\.parquet: not a readable Parquet file"):
        read_samples(bad)
    with pytest.raises(TraceError, match=r"nothere\.parquet: no such file"):
        read_samples(tmp_path / "nothere.parquet")


def test_corrupt_column_names_the_file_and_the_column(samples_file: Path) -> None:
    _rewrite(samples_file, pq.read_table(samples_file), compression="none")
    md = pq.ParquetFile(samples_file).metadata
    i = [md.schema.column(j).name for j in range(md.num_columns)].index("rtt_us")
    chunk = md.row_group(0).column(i)
    off = chunk.dictionary_page_offset or chunk.data_page_offset
    data = bytearray(samples_file.read_bytes())
    data[off:off + 12] = b"\xff" * 12
    samples_file.write_bytes(bytes(data))
    with pytest.raises(TraceError, match=rf"{samples_file.name}: column 'rtt_us' is corrupt"):
        read_samples(samples_file)


def test_missing_column_names_the_file_and_the_column(samples_file: Path) -> None:
    _rewrite(samples_file, pq.read_table(samples_file).drop_columns(["jitter_us"]))
    with pytest.raises(TraceError) as e:
        read_samples(samples_file)
    msg = str(e.value)
    assert str(samples_file) in msg and "missing column 'jitter_us'" in msg and "\n" not in msg


def test_schema_mismatch_names_the_column_and_types(samples_file: Path) -> None:
    t = pq.read_table(samples_file)
    i = t.column_names.index("rtt_us")
    t = t.set_column(i, "rtt_us", pa.array([str(x) for x in t.column("rtt_us").to_pylist()]))
    _rewrite(samples_file, t)
    with pytest.raises(TraceError, match=r"column 'rtt_us' has type string, expected double"):
        read_samples(samples_file)


def test_compatible_types_are_cast_and_overflow_is_named(samples_file: Path) -> None:
    t = pq.read_table(samples_file)
    i = t.column_names.index("sent_segs")
    as_int64 = t.set_column(i, "sent_segs", t.column("sent_segs").cast(pa.int64()))  # how Spark writes uint32
    _rewrite(samples_file, as_int64)
    assert read_samples(samples_file).schema.field("sent_segs").type == pa.uint32()
    neg = t.set_column(i, "sent_segs", pa.array([-1] * t.num_rows, pa.int64()))
    _rewrite(samples_file, neg)
    with pytest.raises(TraceError, match=r"column 'sent_segs': cannot convert int64 to uint32"):
        read_samples(samples_file)


def test_nulls_and_schema_version_are_rejected(samples_file: Path) -> None:
    t = pq.read_table(samples_file)
    i = t.column_names.index("rtt_us")
    vals = t.column("rtt_us").to_pylist()
    vals[0] = None
    _rewrite(samples_file, t.set_column(i, "rtt_us", pa.array(vals, pa.float64())))
    with pytest.raises(TraceError, match=r"column 'rtt_us' has 1 null value"):
        read_samples(samples_file)
    meta = {b"ccswitch.schema": b"FlowSample", b"ccswitch.schema_version": b"2"}
    _rewrite(samples_file, t.replace_schema_metadata(meta))
    with pytest.raises(TraceError, match=r"FlowSample schema version 2, this ccswitch reads version 1"):
        read_samples(samples_file)


def test_manifest_errors_name_the_file_and_key(corpus: Path, tmp_path: Path) -> None:
    src = next(corpus.rglob(MANIFEST)).parent
    cap = tmp_path / "cap"
    shutil.copytree(src, cap)
    m = json.loads((cap / MANIFEST).read_text())
    del m["interval_s"]
    (cap / MANIFEST).write_text(json.dumps(m))
    with pytest.raises(TraceError, match=rf"{cap / MANIFEST}: missing key 'interval_s'"):
        Capture.open(cap)
    (cap / MANIFEST).write_text("{not json")
    with pytest.raises(TraceError, match=r"manifest\.json: not valid JSON"):
        Capture.open(cap)
    shutil.copytree(src, tmp_path / "cap2")
    with (tmp_path / "cap2" / SAMPLES).open("ab") as f:
        f.write(b"")
    _rewrite(tmp_path / "cap2" / SAMPLES, pq.read_table(tmp_path / "cap2" / SAMPLES).slice(0, 3))
    with pytest.raises(TraceError, match=r"sha256 differs"):
        Capture.open(tmp_path / "cap2").validate()


def test_write_capture_refuses_tables_without_a_column(tmp_path: Path) -> None:
    t = FLOW_SAMPLE_SCHEMA.empty_table().drop_columns(["cca"])
    with pytest.raises(TraceError, match=r"without column 'cca'"):
        write_capture(tmp_path / "x", t, {"id": "x", "source": "monitor", "interval_s": 1.0, "flows": []})


def test_cli_validate_one_line_per_problem(corpus: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad" / "samples.parquet"
    bad.parent.mkdir()
    bad.write_bytes(b"garbage")
    cp = subprocess.run([sys.executable, "-m", "ccswitch.cli", "dataset", "validate", str(bad),
                         str(next(corpus.rglob(MANIFEST)).parent)], capture_output=True, text=True)
    assert cp.returncode == 1
    errors = [line for line in cp.stderr.splitlines() if line.startswith("ccswitch: error:")]
    assert len(errors) == 1 and "bad/samples.parquet: not a readable Parquet file" in errors[0]
    assert cp.stdout.startswith("ok  ")


# ---------------------------------------------------------------- binning ---


def test_binning_merges_a_discovery_row_weighted_by_interval() -> None:
    t0 = 1000.0
    rows = []
    for ts, dt, thr, retr, sent in ((t0 + 0.25, 0.25, 4e6, 0, 10), (t0 + 1.0, 0.75, 8e6, 3, 30),
                                    (t0 + 2.01, 1.01, 10e6, 0, 40)):
        r = dict.fromkeys(FIELD_NAMES, 0)
        r.update(ts_s=ts, interval_s=dt, flow_id=7, src="a", dst="b", cca="cubic", throughput_bps=thr,
                 goodput_bps=thr, sending_rate_bps=thr, byte_rate_bps=thr, rtt_us=2000.0 + ts - t0,
                 min_rtt_us=1000.0, jitter_us=100.0, rtt_samples=5, retrans_segs=retr, sent_segs=sent,
                 loss_rate=0.5, delivery_rate_bps=0.0, pacing_rate_bps=0.0, rttvar_us=0.0, rtt_ratio=0.0)
        rows.append(r)
    b = bin_flows(pa.Table.from_pylist(rows, schema=FLOW_SAMPLE_SCHEMA), t0, 1.0, 3)[7]
    assert list(b.present) == [True, True, False]
    assert b["throughput_bps"][0] == pytest.approx((4e6 * 0.25 + 8e6 * 0.75) / 1.0)
    assert b["loss_rate"][0] == pytest.approx(3 / 40)  # recomputed from the summed counters
    assert b["rtt_us"][0] == pytest.approx(2001.0)  # state: the last row
    assert b["rtt_ratio"][0] == pytest.approx(2.001)
    assert b["throughput_bps"][1] == pytest.approx(10e6) and math.isnan(b["throughput_bps"][2])


# ---------------------------------------------------------------- imports ---


def test_import_iperf3_json(tmp_path: Path) -> None:
    src = EXAMPLES / "iperf3-cubic-4mbit.json"
    data = json.loads(src.read_text())
    cap = Capture.open(import_iperf3([src], tmp_path / "cap"))
    cap.validate()
    t = cap.samples()
    streams = [iv["streams"][0] for iv in data["intervals"]]
    assert t.num_rows == len(streams)
    assert set(t.column("cca").to_pylist()) == {data["end"]["sender_tcp_congestion"]} == {"cubic"}
    assert t.column("rtt_us").to_pylist() == [float(s["rtt"]) for s in streams]
    assert t.column("goodput_bps").to_pylist() == pytest.approx([s["bits_per_second"] for s in streams])
    assert t.column("retrans_segs").to_pylist() == [s["retransmits"] for s in streams]
    assert cap.manifest["source"] == "iperf3" and "jitter_us" in cap.manifest["notes"]["estimated_columns"]
    with pytest.raises(TraceError, match=r"not an iperf3 JSON report"):
        (tmp_path / "x.json").write_text("{}")
        import_iperf3([tmp_path / "x.json"], tmp_path / "cap2")


def test_tshark_fields_by_hand() -> None:
    """Two intervals of a flow A->B, hand-computed goodput, loss, RTT and jitter."""
    head = "\t".join(("frame.time_epoch", "frame.len", "ip.src", "ip.dst", "tcp.stream", "tcp.srcport",
                      "tcp.dstport", "tcp.len", "tcp.ack", "tcp.analysis.ack_rtt", "tcp.analysis.retransmission"))

    def pkt(t: float, src: str, plen: int, ack: int = 0, rtt: str = "", retr: str = "") -> str:
        sp, dp, dst = (40000, 5201, "B") if src == "A" else (5201, 40000, "A")
        return f"{t}\t{plen + 66}\t{src}\t{dst}\t0\t{sp}\t{dp}\t{plen}\t{ack}\t{rtt}\t{retr}"

    lines = [head, pkt(10.0, "A", 1000), pkt(10.2, "A", 1000), pkt(10.4, "A", 1000, retr="1"),
             pkt(10.5, "B", 0, ack=2001, rtt="0.010"), pkt(10.9, "B", 0, ack=3001, rtt="0.014"),
             pkt(11.5, "A", 1000), pkt(11.6, "B", 0, ack=4001, rtt="0.011")]
    t, flows, t0 = tshark_samples(lines, "hand", interval_s=1.0, cca="cubic")
    assert t0 == 10.0 and len(flows) == 1 and flows[0]["name"] == "A:40000->B:5201"
    r = t.to_pylist()
    assert len(r) == 2
    assert r[0]["goodput_bps"] == pytest.approx(3000 * 8)  # acks 1 -> 3001
    assert r[0]["sent_segs"] == 3 and r[0]["retrans_segs"] == 1 and r[0]["loss_rate"] == pytest.approx(1 / 3)
    assert r[0]["rtt_us"] == pytest.approx(12_000) and r[0]["jitter_us"] == pytest.approx(4_000)
    assert r[1]["goodput_bps"] == pytest.approx(1000 * 8)
    assert r[1]["jitter_us"] == pytest.approx(3_000)  # |11 - 14| ms: successive samples across intervals
    assert r[1]["min_rtt_us"] == pytest.approx(10_000) and r[1]["rtt_samples"] == 1


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark not installed")
def test_import_tshark_pcap_agrees_with_iperf3(tmp_path: Path) -> None:
    """The same 3 s cubic flow (datasets/examples/): the capture and iperf3 agree on the volume."""
    cap = Capture.open(import_tshark(EXAMPLES / "tshark-cubic-4mbit.pcapng.gz", tmp_path / "cap", interval_s=0.5,
                                     cca="cubic"))
    cap.validate()
    t = cap.samples()
    ids = t.column("flow_id").to_numpy()
    data_flow = max(set(ids.tolist()), key=lambda f: float(np.sum(t.column("goodput_bps").to_numpy()[ids == f])))
    sel = ids == data_flow
    acked_mb = float(np.sum(t.column("goodput_bps").to_numpy()[sel] * 0.5)) / 8 / 1e6
    ipf = json.loads((EXAMPLES / "iperf3-cubic-4mbit.json").read_text())
    sent_mb = ipf["end"]["sum_sent"]["bytes"] / 1e6
    assert acked_mb == pytest.approx(sent_mb, rel=0.1)
    rtts = t.column("rtt_us").to_numpy()[sel]
    assert np.nanmedian(rtts) > 1000  # the tbf queue, seen from the sender


# ---------------------------------------------------------------- corpus ---

SPEC = """
name = "t"
backend = "bottleneck"
duration_s = 10
ccas = ["cubic", "bbr"]
switch_at_s = [5]
[matrix]
rate_mbit = [10, 20]
queue_ms = [5]
competitors = [[], ["bbr"]]
"""


def test_corpus_spec_matrix_and_arms() -> None:
    sp = parse_spec(SPEC, "t.toml")
    assert [c.id for c in sp.conditions] == ["r10-q5-Lnone", "r10-q5-Lbbr", "r20-q5-Lnone", "r20-q5-Lbbr"]
    assert [a.id for a in sp.arms()] == ["cubic", "bbr", "cubic-bbr@5", "bbr-cubic@5"]
    assert len(sp.runs) == 16 and sp.runs[0].rel_dir == "r10-q5-Lnone/cubic--s1"


@pytest.mark.parametrize(("old", "new", "message"), [
    ('["bbr"]]', '["vegas"]]', r"t\.toml: matrix\.competitors: unknown congestion control 'vegas'"),
    ("queue_ms = [5]", "queue_ms = [5]\nloss = [0.01]",
     r'matrix\.loss: condition r10-q5-l0p01-Lnone needs backend = "runner"'),
    ("queue_ms = [5]", "queue_ms = [5]\ncolour = 1", r"t\.toml: matrix\.colour: unknown key"),
    ("duration_s = 10", "duration_s = 10\nduration_s = 11", r"t\.toml: invalid TOML"),
    ("switch_at_s = [5]", "switch_at_s = [9.5]", r"t\.toml: switch_at_s: must be an array of times"),
    ('backend = "bottleneck"', 'backend = "ns3"', r"t\.toml: backend: must be one of bottleneck, runner"),
])
def test_corpus_spec_errors_name_file_and_key(old: str, new: str, message: str) -> None:
    assert old in SPEC
    with pytest.raises(SpecError, match=message):
        parse_spec(SPEC.replace(old, new), "t.toml")


def test_runner_backend_scenarios_validate() -> None:
    scenario = pytest.importorskip("ccswitch.testbed.scenario")
    text = SPEC.replace('backend = "bottleneck"', 'backend = "runner"').replace(
        "competitors = [[], [\"bbr\"]]", "competitors = [[], [\"bbr\"]]\nremote_competitors = [[\"cubic\"]]\n"
                                         "delay_ms = [5]\nwifi = [\"ax-jitter\"]")
    sp = parse_spec(text, "t.toml")
    for run in sp.runs:
        sc = scenario.parse_scenario(scenario_text(sp, run), "s.toml", ccas=["bbr", "cubic", "pcc", "reno"])
        assert sc.flows[0].name == "agent" and sc.duration_s == 10
        assert [f.client for f in sc.flows][-1] == 2  # the remote competitor on its own client
        assert sc.link.emulator == "linkemu" and sc.link.wifi is not None


def test_shipped_sample_is_valid_complete_and_small() -> None:
    """The sample in the repository: every capture valid (checksums too), every condition has all
    9 arms (3 static, 6 switches), under 20 MB."""
    caps = find_captures(SAMPLE)
    size = sum(p.stat().st_size for p in SAMPLE.rglob("*") if p.is_file())
    assert size < 20e6
    index = json.loads((SAMPLE / "corpus.json").read_text())
    assert len(caps) == index["runs_planned"] == index["runs_done"] == 351
    arms: dict[str, set[str]] = {}
    for c in caps:
        c.validate()
        assert c.manifest["source"] == "runner" and c.agent_flow() is not None
        arm = c.manifest["arm"]
        arms.setdefault(c.condition, set()).add(arm["start"] + "".join(f"-{s['cca']}" for s in arm["switches"]))
    assert len(arms) == 39 and all(len(a) == 9 for a in arms.values()), arms


def test_shipped_dataset_card_matches_the_data() -> None:
    """datasets/sample/README.md is the template filled with numbers computed from the files now."""
    from ccswitch.datasets.card import card_stats, render_card, template_for

    tpl = template_for(SAMPLE)
    assert tpl.name == "sample.card.md"
    card = (SAMPLE / "README.md").read_text()
    assert "@" not in card.replace("@12", "")  # no placeholder left ("@12" is an arm name)
    assert card == render_card(tpl.read_text(), card_stats(SAMPLE)), "run: ccswitch dataset card datasets/sample"
    with pytest.raises(KeyError, match=r"placeholder @NOPE@ has no value"):
        render_card("x @NOPE@", {"SIZE": "1"})


# ---------------------------------------------------------------- capture ---


@pytest.mark.kernel
def test_capture_bottleneck_arm_with_switch(tmp_path: Path, iperf3: str) -> None:
    from ccswitch.datasets.capture import Arm, Condition, Switch, capture_bottleneck

    cond = Condition(rate_mbit=20, queue_ms=10, competitors=("cubic",))
    arm = Arm("cubic", (Switch(3.0, "bbr"),))
    cap = Capture.open(capture_bottleneck(tmp_path / "cap", cond, arm, duration_s=5, interval_s=1.0))
    cap.validate()
    assert cap.manifest["condition"] == "r20-q10-Lcubic" and cap.manifest["switch_results"][0]["ok"]
    agent = cap.agent_flow()
    assert agent is not None
    bins = bin_flows(cap.samples(), cap.manifest["t0_epoch"], 1.0, 5)
    a = bins[agent["flow_id"]]
    assert a.cca[1:3] == ["cubic", "cubic"] and a.cca[3:] == ["bbr", "bbr"]
    assert np.nanmean(a["throughput_bps"][1:]) > 2e6
    comp = next(f for f in cap.flows if f["role"] == "competitor")
    assert bins[comp["flow_id"]].present[1:].all()


@pytest.mark.kernel
def test_record_live_from_the_monitor(tmp_path: Path, bottleneck: object, iperf3: str) -> None:
    from ccswitch.datasets.capture import record_live
    from ccswitch.testbed.runs.iperf import start_flow, start_server

    bn = bottleneck
    with start_server(bn.receiver, 5201, bind=bn.receiver_addr), \
            start_flow(bn.sender, bn.receiver_addr, 5201, cca="bbr", seconds=4, cport=61001) as flow:
        path = record_live(tmp_path / "rec", duration_s=3, interval_s=0.5, ports=[5201], netns=bn.sender)
        flow.wait()
    cap = Capture.open(path)
    cap.validate()
    t = cap.samples()
    assert t.num_rows >= 4 and "bbr" in set(t.column("cca").to_pylist())
    assert cap.manifest["source"] == "monitor" and cap.flows and cap.flows[0]["role"] == "observed"
