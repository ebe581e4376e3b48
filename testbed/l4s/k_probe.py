"""What the k-tuning agent's reward says about constant actions, on the training env's own conditions.

Issue 14's stretch item (docs/l4s.md, "Why the agent moves k the wrong way"): for each
ACTION pair (the residual factor's a_p, k's a_k; a_k alone for ``--mode k``), the first N
conditions with L4S flows of the env's condition space (RNG seed 1) each run one episode
with that action held constant, one condition after the other (one live emulated link at a
time), and the per-step reward of ``reward_k``, the per-flow L:C over the episode and the mean
per-interval |log2 L:C| term are printed and written to OUT/probe-ACTIONS.json.  Root::

    sudo .venv/bin/python testbed/l4s/k_probe.py OUT N 0,0 0,1 -0.9,0.9     # ~10 s per condition and action
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from ccswitch.bpf.prague import ensure_prague
from ccswitch.envs.dualpi2_env import ConditionSpace, DualPi2Env
from ccswitch.models.dualpi2_actor import lc_imbalance

STEPS = 100
WARMUP_S = 2.0


def probe(out: Path, n: int, action: tuple[float, ...]) -> list[dict[str, object]]:
    rng = np.random.default_rng(1)
    conds = [c for c in (ConditionSpace().draw(rng) for _ in range(200)) if c.n_l4s > 0][:n]
    mode = "residual-k" if len(action) == 2 else "k"
    rows: list[dict[str, object]] = []
    tag = "_".join(f"{a:g}" for a in action)
    with DualPi2Env(interval_s=0.05, steps=STEPS, workdir=out / tag, warmup_s=WARMUP_S, mode=mode) as env:
        for c in conds:
            env.reset(options={"condition": c})
            l_pkts = c_pkts = 0.0
            terms, rewards = [], []
            info: dict[str, object] = {}
            for _ in range(STEPS):
                _, r, _, _, info = env.step(np.array(action))
                l_pkts += float(info.get("l4s_pkts", 0.0))  # type: ignore[arg-type]
                c_pkts += float(info.get("classic_pkts", 0.0))  # type: ignore[arg-type]
                terms.append(lc_imbalance(info, c.n_l4s, c.n_classic))  # type: ignore[arg-type]
                rewards.append(r)
            lc = (l_pkts / c.n_l4s) / (c_pkts / c.n_classic) if l_pkts > 0 and c_pkts > 0 else float("nan")
            row = {"condition": c.label(), "k": info.get("k"), "lc": lc, "term": float(np.mean(terms)),
                   "reward": float(np.mean(rewards))}
            rows.append(row)
            print(tag, c.label(), f"k {row['k']:.2f} L:C {lc:.3f} term {row['term']:.3f} "
                  f"reward {row['reward']:+.3f}", flush=True)
    return rows


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__.split("\n\n")[-1].strip(), file=sys.stderr)
        return 2
    out, n = Path(argv[0]), int(argv[1])
    actions = [tuple(float(x) for x in a.split(",")) for a in argv[2:]]
    handle = ensure_prague()
    try:
        res = {",".join(f"{a:g}" for a in act): probe(out, n, act) for act in actions}
    finally:
        handle.close()
    (out / f"probe-{'_'.join(argv[2:])}.json").write_text(json.dumps(res, indent=1))
    for key, rows in res.items():
        print(f"{key}: reward/step {np.mean([r['reward'] for r in rows]):+.3f}, "
              f"L:C median {np.nanmedian([r['lc'] for r in rows]):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
