"""Batched inference throughput of the exported policy on one core (numpy only, no TensorFlow).

For 1, 100 and 10,000 flows, times (a) the forward pass + argmax on ready
observations and (b) the daemon's whole per-tick decision: FlowSample table ->
ObservationBuilder (windows, normalisation, competition) -> forward pass ->
CCA names.  Prints decisions per second side by side with the targets: 100,000
decisions/s for (a) (issue 4), 1.5 million for (b) at 10,000 flows (issue 12);
then (b) by stage.  BLAS threads are limited to one and the process is pinned
to one CPU.  Each figure is the median of single calls, over --seconds.

--clock cpu times the thread's CPU time instead of the wall clock: on a shared
machine, time spent waiting for the CPU then does not count (cache misses
caused by the others still do).  --against DIR compares (b) with another
implementation in the same run: DIR/envs/features.py and DIR/models/policy.py
(e.g. ``git archive HEAD envs models | tar -x -C DIR``) tick on the same tables,
alternating call by call with this checkout's, and must give the same
observations and decisions.

    .venv/bin/python bench/policy_inference.py [--policy models/policy.json] [--seconds 1.0] [--clock cpu]
        [--against DIR]
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import importlib.util  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from types import ModuleType  # noqa: E402

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

from ccswitch.envs.features import ObservationBuilder, feature_names  # noqa: E402
from ccswitch.models.policy import DEFAULT_POLICY, load_policy  # noqa: E402
from ccswitch.schema import FIELD_NAMES, FLOW_SAMPLE_SCHEMA  # noqa: E402

TARGET = 100_000
TICK_TARGET = 1_500_000


def flow_table(n: int, rng: np.random.Generator, tick: int) -> pa.Table:
    """n flows of 50 hosts (network namespaces), plausible values."""
    cols: dict[str, object] = {name: np.zeros(n) for name in FIELD_NAMES}
    cols.update(
        ts_s=np.full(n, 1.7e9 + tick), interval_s=np.ones(n), flow_id=np.arange(n, dtype=np.uint64) + 1,
        netns_cookie=(np.arange(n) % 50).astype(np.uint64), cgroup_id=np.zeros(n, np.uint64),
        src=["10.0.0.1"] * n, dst=["10.0.0.2"] * n, sport=(np.arange(n) % 60000).astype(np.uint16),
        dport=np.full(n, 443, np.uint16), cca=rng.choice(["cubic", "bbr", "pcc"], n).tolist(),
        throughput_bps=rng.uniform(1e5, 1e8, n), sending_rate_bps=rng.uniform(1e5, 1e8, n),
        rtt_us=rng.uniform(500, 80_000, n), min_rtt_us=np.full(n, 500.0), loss_rate=rng.uniform(0, 0.05, n),
        jitter_us=rng.uniform(0, 5000, n), sndq_bytes=rng.integers(0, 100_000, n).astype(np.uint32),
    )
    cols["rtt_ratio"] = cols["rtt_us"] / cols["min_rtt_us"]  # type: ignore[operator]
    arrays = [pa.array(cols[f.name], type=f.type) for f in FLOW_SAMPLE_SCHEMA]
    return pa.Table.from_arrays(arrays, schema=FLOW_SAMPLE_SCHEMA)


def timed(fn: Callable[[], object], seconds: float, clock: Callable[[], float] = time.perf_counter) -> float:
    """Median seconds per call of fn() over at least *seconds* of calls (and 5 calls)."""
    fn()  # warm up
    times: list[float] = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or len(times) < 5:
        t0 = clock()
        fn()
        times.append(clock() - t0)
    return float(np.median(times))


def load_module(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def compare(other: Path, policy: Path, sizes: list[int], seconds: float, clock: Callable[[], float]) -> None:
    """(b) of *other*'s envs/features.py and models/policy.py against this checkout's, interleaved."""
    feats = load_module("other_features", other / "envs" / "features.py")
    pols = load_module("other_policy", other / "models" / "policy.py")
    mine, theirs = load_policy(policy), pols.load_policy(policy)
    print(f"\n{'flows':>7} {'other tick us':>14} {'this tick us':>13} {'speed-up':>9}   "
          f"(median of single calls, alternating; other: {other})")
    rng = np.random.default_rng(1)
    for n in sizes:
        tables = [flow_table(n, rng, t) for t in range(4)]
        norm = mine.normalisation
        builders = (feats.ObservationBuilder(feats.Normalisation(norm.mean, norm.std, norm.clip), window=mine.window,
                                             actions=mine.actions),
                    ObservationBuilder(norm, window=mine.window, actions=mine.actions))
        ticks = [0, 0]
        times: tuple[list[float], list[float]] = ([], [])

        def tick(k: int, pol: object, builders: tuple[object, ObservationBuilder] = builders,
                 tables: list[pa.Table] = tables, ticks: list[int] = ticks) -> tuple[np.ndarray, list[str]]:
            ticks[k] += 1
            obs = builders[k].update(tables[ticks[k] % 4])[1]  # type: ignore[attr-defined]
            return obs, pol.decide(obs)  # type: ignore[attr-defined]

        end = time.perf_counter() + 2 * seconds
        while time.perf_counter() < end or len(times[1]) < 5:
            (o0, d0), (o1, d1) = tick(0, theirs), tick(1, mine)  # the same table and history for both
            assert np.array_equal(o0.view(np.uint32), o1.view(np.uint32)) and d0 == d1, "results differ"
            for k, pol in ((0, theirs), (1, mine)) if len(times[1]) % 2 else ((1, mine), (0, theirs)):
                t0 = clock()
                tick(k, pol)
                times[k].append(clock() - t0)
        a, b = (float(np.median(t)) for t in times)
        print(f"{n:>7} {a * 1e6:>14.1f} {b * 1e6:>13.1f} {a / b:>8.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--policy", type=Path, default=DEFAULT_POLICY)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--sizes", default="1,100,10000")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    ap.add_argument("--against", type=Path, help="another checkout to compare (b) with, in the same run")
    args = ap.parse_args()
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    pol = load_policy(args.policy)
    rng = np.random.default_rng(0)
    print(f"policy {args.policy} ({pol.n_features} features, layers "
          f"{' x '.join(str(k.shape[1]) for k in pol.kernels)}), numpy {np.__version__}, 1 thread, 1 CPU, "
          f"{args.clock} clock; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"{'flows':>7} {'forward us':>11} {'decisions/s':>13} {'vs target':>10}   "
          f"{'tick us':>10} {'decisions/s':>13} {'vs target':>10}")
    print(f"{'':>7} {'(forward pass + argmax)':>36}   {'(table -> features -> forward -> names)':>35}")
    assert pol.feature_names == tuple(feature_names(pol.window, pol.actions))
    stages = []
    sizes = [int(s) for s in args.sizes.split(",")]
    for n in sizes:
        obs = rng.uniform(-3, 3, (n, pol.n_features)).astype(np.float32)
        fwd = timed(lambda obs=obs: pol.act(obs), args.seconds, clock)
        builder = ObservationBuilder(pol.normalisation, window=pol.window, actions=pol.actions)
        tables = [flow_table(n, rng, t) for t in range(4)]
        i = [0]

        def update(builder: ObservationBuilder = builder, tables: list[pa.Table] = tables, i: list[int] = i
                   ) -> np.ndarray:
            i[0] += 1
            return builder.update(tables[i[0] % 4])[1]

        full = timed(lambda update=update: pol.decide(update()), args.seconds, clock)
        print(f"{n:>7} {fwd * 1e6:>11.1f} {n / fwd:>13,.0f} {n / fwd / TARGET:>9.2f}x   "
              f"{full * 1e6:>10.1f} {n / full:>13,.0f} {n / full / TICK_TARGET:>9.2f}x")
        o = update()
        stages.append((n, full, [timed(f, args.seconds / 2, clock) for f in (
            update, lambda o=o: pol.q_values(o), lambda o=o: pol.act(o), lambda o=o: pol.decide(o))]))
    print(f"targets: forward {TARGET:,} decisions/s (issue 4), tick {TICK_TARGET:,} decisions/s (issue 12)")
    print(f"\n{'flows':>7} {'table->obs us':>14} {'q_values us':>12} {'+argmax us':>11} {'+names us':>10} "
          f"{'obs+names us':>13} {'tick us':>9}   (the tick by stage, each timed alone; + includes the previous)")
    for n, full, (obs_t, q_t, act_t, names_t) in stages:
        print(f"{n:>7} {obs_t * 1e6:>14.1f} {q_t * 1e6:>12.1f} {act_t * 1e6:>11.1f} {names_t * 1e6:>10.1f} "
              f"{(obs_t + names_t) * 1e6:>13.1f} {full * 1e6:>9.1f}")
    if args.against:
        compare(args.against, args.policy, sizes, args.seconds, clock)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
