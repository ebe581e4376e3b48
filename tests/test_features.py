"""The per-tick fast path against the rule spelled out, bit for bit.

Fast path: envs/features.py's WindowStore (windows kept standardised in observation-shaped rows, shifted by
one flat copy) behind ObservationBuilder and the daemon's LiveObservations, and models/policy.py's
q_values / decide (reused buffers, bias and ReLU in blocks).  Reference: each flow's raw window in a dict,
standardised and concatenated every tick, and a plain ``x @ k + b`` forward pass.
"""

from __future__ import annotations

import copy
import dataclasses
import pickle
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from ccswitch.daemon.observations import LiveObservations
from ccswitch.envs.features import (
    BASE_COLUMNS,
    Normalisation,
    ObservationBuilder,
    base_feature_columns,
    base_features,
    competition_columns,
    competition_features,
    is_active,
    short_string_index,
)
from ccswitch.frame import FlowFrame
from ccswitch.models.policy import Policy, _argmax_rows, load_policy
from ccswitch.schema import FLOW_SAMPLE_SCHEMA

CCAS = ("cubic", "bbr", "pcc", "reno", "")


class Reference:
    """ObservationBuilder's rule without shortcuts: raw windows per flow id, standardised every tick."""

    def __init__(self, norm: Normalisation, window: int, actions: tuple[str, ...], forget_after: int = 3) -> None:
        self.norm, self.window, self.actions, self.forget_after = norm, window, actions, forget_after
        self.windows: dict[int, list[np.ndarray]] = {}
        self.last_seen: dict[int, int] = {}
        self.tick = 0

    def update(self, table: pa.Table) -> np.ndarray:
        self.tick += 1
        cols = {c: table.column(c).to_numpy(zero_copy_only=False) for c in table.column_names}
        raw = base_features(cols)
        windows = []
        for i, fid in enumerate(cols["flow_id"].tolist()):
            w = self.windows.get(fid)
            w = [raw[i]] * self.window if w is None else [*w[1:], raw[i]]
            self.windows[fid], self.last_seen[fid] = w, self.tick
            windows.append(w)
        n = len(windows)
        z = (np.array(windows) - np.asarray(self.norm.mean)) / np.asarray(self.norm.std)
        z = np.clip(np.nan_to_num(z, nan=0.0), -self.norm.clip, self.norm.clip).reshape(n, -1)
        onehot = np.array([[float(c == a) for a in self.actions] for c in table.column("cca").to_pylist()])
        thr = cols["throughput_bps"]
        ctx = competition_features(thr, cols["netns_cookie"], is_active(thr, cols["sndq_bytes"]))
        obs = np.concatenate([z, onehot.reshape(n, -1), np.clip(ctx, 0.0, 1.0)], axis=1).astype(np.float32)
        if self.tick % 16 == 0:
            for fid in [f for f, t in self.last_seen.items() if self.tick - t >= self.forget_after]:
                del self.windows[fid], self.last_seen[fid]
        return obs


def reference_q(policy: Policy, obs: np.ndarray) -> np.ndarray:
    x = obs
    for i, (k, b) in enumerate(zip(policy.kernels, policy.biases, strict=True)):
        x = x @ k + b
        if i < len(policy.kernels) - 1:
            x = np.maximum(x, 0.0)
    return x


def flow_tables(seed: int, ticks: int = 48) -> Iterator[pa.Table]:
    """Random FlowSample tables: 300 flows on 5 namespaces coming, going (long enough to be forgotten) and
    coming back, in a fixed or shuffled order; NaN and infinite values, CCAs outside the actions."""
    rng = np.random.default_rng(seed)
    pool = np.arange(1, 301, dtype=np.uint64) * np.uint64(2**54 + 7)  # ids beyond 2^63 too
    netns = rng.integers(0, 5, len(pool)).astype(np.uint64)
    for tick in range(ticks):
        if tick < 6:  # the same flows in the same order: the steady state
            rows = np.arange(120)
        elif tick < 21 or tick >= 40:
            rows = rng.permutation(np.flatnonzero(rng.random(len(pool)) < 0.6))
        else:  # 50 flows only: the others are forgotten, and start new windows from tick 40
            rows = np.arange(200, 250) if tick % 3 else rng.permutation(np.arange(200, 250))
        n = len(rows)
        thr = rng.uniform(0, 5e7, n)
        thr[rng.random(n) < 0.05] = np.nan
        thr[rng.random(n) < 0.02] = np.inf
        rtt = rng.uniform(500, 1e5, n)
        rtt[rng.random(n) < 0.05] = np.nan
        cols: dict[str, object] = {f.name: np.zeros(n) for f in FLOW_SAMPLE_SCHEMA}
        cols.update(
            flow_id=pool[rows], netns_cookie=netns[rows], cgroup_id=np.zeros(n, np.uint64),
            src=["10.0.0.1"] * n, dst=["10.0.0.2"] * n, sport=np.zeros(n, np.uint16), dport=np.zeros(n, np.uint16),
            cca=rng.choice(CCAS, n).tolist(), throughput_bps=thr, sending_rate_bps=rng.uniform(0, 6e7, n),
            rtt_us=rtt, min_rtt_us=np.full(n, 500.0), rtt_ratio=rtt / 500.0,
            loss_rate=np.where(rng.random(n) < 0.05, np.nan, rng.uniform(0, 0.05, n)),
            jitter_us=np.where(rng.random(n) < 0.2, np.nan, rng.uniform(0, 5e3, n)),
            sndq_bytes=rng.integers(0, 3, n).astype(np.uint32) * 1000,
        )
        yield pa.Table.from_arrays([pa.array(cols[f.name], type=f.type) for f in FLOW_SAMPLE_SCHEMA],
                                   schema=FLOW_SAMPLE_SCHEMA)


def literal_base_features(cols: dict[str, np.ndarray]) -> list[np.ndarray]:
    """BASE_FEATURES as their formulas read (envs/features.py's docs)."""
    thr, rtt, ratio, loss, jit, snd = (np.asarray(cols[c], dtype=np.float64) for c in BASE_COLUMNS)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        return [np.log(np.maximum(np.nan_to_num(thr, nan=0.0) / 1e6, 1e-3)), np.log(np.maximum(rtt / 1e3, 1e-2)),
                np.log(np.clip(ratio, 1.0, 100.0)), np.clip(np.nan_to_num(loss, nan=0.0), 0.0, 1.0),
                np.log1p(np.maximum(np.nan_to_num(jit, nan=0.0), 0.0) / 1e3),
                np.log(np.maximum(np.nan_to_num(snd, nan=0.0) / 1e6, 1e-3))]


def literal_competition(thr: np.ndarray, group: np.ndarray, act: np.ndarray) -> list[np.ndarray]:
    """(local.others, local.share, local.jain) row by row: each row's host, the row counted in."""
    thr = np.maximum(np.nan_to_num(thr, nan=0.0), 0.0)
    inv = np.unique(group, return_inverse=True)[1]
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        n_g = np.bincount(inv, weights=act.astype(np.float64))
        s_g = np.bincount(inv, weights=thr * act)
        q_g = np.bincount(inv, weights=thr * thr * act)
        n, s, q = n_g[inv] + (~act), s_g[inv] + thr * (~act), q_g[inv] + thr * thr * (~act)
        share = np.where(s > 0, thr / s, 1.0 / np.maximum(n, 1))
        jain = np.where(n <= 1, 1.0, np.where(q > 0, s * s / (n * q), 1.0))
    return [np.clip((n - 1) / 4, 0.0, 1.0), share, jain]


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)  # NaN == NaN, -0.0 != 0.0


@pytest.mark.filterwarnings("ignore:overflow:RuntimeWarning", "ignore:invalid value:RuntimeWarning")  # inf rates
@pytest.mark.parametrize("seed", [1, 2])
def test_fast_tick_equals_the_reference_bit_for_bit(seed: int) -> None:
    """Observations, Q-values and decisions of ObservationBuilder (pyarrow tables, FlowFrames, numpy columns)
    and LiveObservations equal the reference's over ticks in which flows come, go, are forgotten and return."""
    policy = load_policy()
    rng = np.random.default_rng(seed)
    norm = policy.normalisation if seed == 1 else Normalisation(tuple(rng.uniform(-2, 2, 6)),
                                                                  tuple(rng.uniform(0.05, 2, 6)), 3.0)
    ref = Reference(norm, policy.window, policy.actions)
    arrow, frame, arrays = (ObservationBuilder(norm, window=policy.window, actions=policy.actions) for _ in range(3))
    live = LiveObservations(norm, window=policy.window, actions=policy.actions)
    steady = 0
    for tick, table in enumerate(flow_tables(seed)):
        want = ref.update(table)
        q_want = reference_q(policy, want)
        ids = table.column("flow_id").to_numpy()
        f = FlowFrame.from_arrow(table)
        cols = {c: f.column(c) for c in (*BASE_COLUMNS, "flow_id", "sndq_bytes", "netns_cookie")}
        got = {
            "arrow": arrow.update(table),
            "frame": frame.update(f),
            "arrays": arrays.update_arrays(cols, table.column("cca").to_pylist()),
            "live": live.update(cols, *f.codes("cca")),
        }
        store = arrow._store  # was the steady-state path (the same flows, consecutive slots) taken?
        steady += store._slots_range[0] is arrow._prev_slots and store._slots_range[1] is not None
        for name, (got_ids, obs) in got.items():
            assert np.array_equal(got_ids, ids), (name, tick)
            assert obs.dtype == np.float32 and obs.flags.c_contiguous, (name, tick)
            assert np.array_equal(bits(obs), bits(want)), (name, tick)
        obs = got["arrow"][1]
        assert np.array_equal(bits(policy.q_values(obs)), bits(q_want)), tick
        assert policy.decide(obs) == [policy.actions[i] for i in np.argmax(q_want, axis=1)], tick
        assert len(arrow) == len(live) == len(ref.windows), tick
    assert steady >= 5


def test_forward_pass_edge_cases_equal_the_plain_one() -> None:
    """q_values on one row, column-major rows, more rows than the reused buffers hold, after rows of other
    counts, with float64 weights; decide on one row; policies still pickle and copy."""
    policy = load_policy()
    rng = np.random.default_rng(3)
    for n in (1, 7, 600, 513, 70_000, 3):
        x = rng.uniform(-3, 3, (n, policy.n_features)).astype(np.float32)
        assert np.array_equal(bits(policy.q_values(x)), bits(reference_q(policy, x))), n
        xf = np.asfortranarray(x)
        assert np.array_equal(bits(policy.q_values(xf)), bits(reference_q(policy, xf))), n
    one = x[0]
    assert np.array_equal(bits(policy.q_values(one)), bits(reference_q(policy, one[None])[0]))
    assert policy.decide(one) == [policy.actions[int(np.argmax(reference_q(policy, one[None])))]]
    wide = dataclasses.replace(policy, kernels=[k.astype(np.float64) for k in policy.kernels])
    assert wide.q_values(x).dtype == np.float64
    assert np.array_equal(wide.q_values(x), reference_q(wide, x))
    for clone in (pickle.loads(pickle.dumps(policy)), copy.deepcopy(policy)):
        assert np.array_equal(bits(clone.q_values(x)), bits(policy.q_values(x)))


def test_normalisation_apply_equals_the_formula_and_leaves_its_input() -> None:
    norm = Normalisation((1.0, 2.0, 3.0, 4.0, 5.0, 6.0), (2.0, 2.0, 2.0, 2.0, 2.0, 0.5))
    raw = np.random.default_rng(4).normal(size=(5, 4, 6)) * 20
    raw[0, 0, 0], raw[1, 1, 1], raw[2, 2, 2] = np.nan, np.inf, -np.inf
    for x in (raw, raw[0], raw[0, 0], raw[:1, :1], raw[:0], np.asfortranarray(raw[1])):
        before = x.copy()
        want = np.clip(np.nan_to_num((x - np.asarray(norm.mean)) / np.asarray(norm.std), nan=0.0), -10.0, 10.0)
        got = norm.apply(x)
        assert got.shape == x.shape and np.array_equal(got.view(np.uint64), want.view(np.uint64)), x.shape
        assert np.array_equal(x, before, equal_nan=True), x.shape


EDGES = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, -1.0, 1e-300, 1e-3, 0.5, 1.0, 99.0, 150.0, 1e5, 1e154, 1e200,
                  np.finfo(np.float64).max])


def test_base_features_and_competition_equal_their_formulas_bit_for_bit() -> None:
    """The few-pass base_feature_columns and per-host competition_columns against the formulas as written, on
    NaN, infinities, signed zeros, negatives and rates whose square overflows, idle and active rows."""
    rng = np.random.default_rng(5)
    n = 4000
    with np.errstate(over="ignore"):
        cols = {c: rng.choice(EDGES, n) * rng.choice([1.0, 1.0, 3.7], n) for c in BASE_COLUMNS}
    for got, want in zip(base_feature_columns(cols), literal_base_features(cols), strict=True):
        assert got.dtype == np.float64 and np.array_equal(got.view(np.uint64), want.view(np.uint64))
    for groups in (1, 3, 50):
        group = rng.integers(0, groups, n).astype(np.uint64)
        thr = np.where(rng.random(n) < 0.5, rng.choice(EDGES, n), rng.uniform(0, 1e8, n))
        thr[group == 1] = rng.choice([0.0, -0.0, -1.0, np.nan], int((group == 1).sum()))  # a host at a standstill
        for act in (np.ones(n, bool), rng.random(n) < 0.7, np.zeros(n, bool)):
            with np.errstate(invalid="ignore", over="ignore"):
                got = competition_columns(thr, group, act)
            for g, w in zip(got, literal_competition(thr, group, act), strict=True):
                assert np.array_equal(g.view(np.uint64), w.view(np.uint64)), (groups, act.mean())
    assert all(len(c) == 0 for c in competition_columns(np.empty(0), np.empty(0), np.empty(0, bool)))


def test_short_string_index_equals_index_in() -> None:
    """Matches of the actions by length and first 8 bytes, as pc.index_in (-1 for none): prefixes, NUL bytes,
    non-ASCII, empty strings, 8-byte values, repeated values, slices, large strings; None where it does not
    apply (nulls, values over 8 bytes, another type)."""
    rng = np.random.default_rng(6)
    pool = ["cubic", "bbr", "pcc", "", "cubic2", "bb", "bbr\0", "cub", "reno", "bbr2", "dctcp", "prague",
            "\u00e9t\u00e9", "cubiccubic", "12345678", "123456789", "1234567"]
    values_sets = [("cubic", "bbr", "pcc"), ("pcc", "", "12345678", "\u00e9t\u00e9"), ("bbr", "bbr", "cubic"), ()]
    strings = rng.choice(pool, 3000).tolist()
    for typ in (pa.string(), pa.large_string()):
        arr = pa.array(strings, typ)
        for a in (arr, arr.slice(7, 2000), arr.slice(0, 0)):
            for values in values_sets:
                want = pc.index_in(a, value_set=pa.array(values, pa.string())).fill_null(-1).to_numpy(
                    zero_copy_only=False)
                got = short_string_index(a, values)
                assert got is not None and np.array_equal(got, want), (typ, len(a), values)
    assert short_string_index(pa.array(["cubic", None]), ("cubic",)) is None
    assert short_string_index(pa.array(["cubic"]), ("123456789",)) is None
    assert short_string_index(pa.array([1, 2]), ("cubic",)) is None


def test_argmax_rows_equals_numpy() -> None:
    """Greedy actions column by column: ties to the lowest index, signed zeros, NaN (numpy's rule), 1 to 5
    actions."""
    rng = np.random.default_rng(7)
    for a in (1, 2, 3, 5):
        q = rng.choice(np.float32([-1.0, -0.0, 0.0, 0.5, 2.0]), (500, a))
        assert np.array_equal(_argmax_rows(q), np.argmax(q, axis=1)), a
        q[3, -1] = np.nan
        assert np.array_equal(_argmax_rows(q), np.argmax(q, axis=1)), a
    assert _argmax_rows(np.float32([1.0, 3.0, 2.0])) == 1
