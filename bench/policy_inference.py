"""Batched inference throughput of the exported policy on one core (numpy only, no TensorFlow).

For 1, 100 and 10,000 flows, times (a) the forward pass + argmax on ready
observations and (b) the daemon's whole per-tick decision: FlowSample table ->
ObservationBuilder (windows, normalisation, competition) -> forward pass ->
CCA names.  Prints decisions per second side by side with the target of
100,000 decisions/s batched (issue 4).  BLAS threads are limited to one and
the process is pinned to one CPU.

    .venv/bin/python bench/policy_inference.py [--policy models/policy.json] [--seconds 1.0]
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

from ccswitch.envs.features import ObservationBuilder, feature_names  # noqa: E402
from ccswitch.models.policy import DEFAULT_POLICY, load_policy  # noqa: E402
from ccswitch.schema import FIELD_NAMES, FLOW_SAMPLE_SCHEMA  # noqa: E402

TARGET = 100_000


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


def timed(fn: object, seconds: float) -> float:
    """Mean seconds per call of fn() over at least *seconds* (and 5 calls)."""
    fn()  # warm up
    n, t0 = 0, time.perf_counter()
    while True:
        fn()
        n += 1
        el = time.perf_counter() - t0
        if el >= seconds and n >= 5:
            return el / n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--policy", type=Path, default=DEFAULT_POLICY)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--sizes", default="1,100,10000")
    args = ap.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    pol = load_policy(args.policy)
    rng = np.random.default_rng(0)
    print(f"policy {args.policy} ({pol.n_features} features, layers "
          f"{' x '.join(str(k.shape[1]) for k in pol.kernels)}), numpy {np.__version__}, 1 thread, 1 CPU; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"{'flows':>7} {'forward us':>11} {'decisions/s':>13} {'vs target':>10}   "
          f"{'tick us':>10} {'decisions/s':>13} {'vs target':>10}")
    print(f"{'':>7} {'(forward pass + argmax)':>36}   {'(table -> features -> forward -> names)':>35}")
    assert pol.feature_names == tuple(feature_names(pol.window, pol.actions))
    for n in (int(s) for s in args.sizes.split(",")):
        obs = rng.uniform(-3, 3, (n, pol.n_features)).astype(np.float32)
        fwd = timed(lambda obs=obs: pol.act(obs), args.seconds)
        builder = ObservationBuilder(pol.normalisation, window=pol.window, actions=pol.actions)
        tables = [flow_table(n, rng, t) for t in range(4)]
        i = [0]

        def tick(builder: ObservationBuilder = builder, tables: list[pa.Table] = tables, i: list[int] = i) -> None:
            i[0] += 1
            _ids, o = builder.update(tables[i[0] % 4])
            pol.decide(o)

        full = timed(tick, args.seconds)
        print(f"{n:>7} {fwd * 1e6:>11.1f} {n / fwd:>13,.0f} {n / fwd / TARGET:>9.2f}x   "
              f"{full * 1e6:>10.1f} {n / full:>13,.0f} {n / full / TARGET:>9.2f}x")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
