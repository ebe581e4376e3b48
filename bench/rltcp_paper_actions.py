"""Why the trained RL-TCP agent does not use the paper's action space: fixed policies in both modes.

On the live env (``envs/rltcp_env.py``: 10 Mbit/s, 40 ms, 100-packet FIFO),
one episode (15 s) per (mode, fixed action, competitor): the paper's best
cases -- always +1 MSS with ssthresh 2 MSS (action 1) or with ssthresh
bytesInFlight / 2 (action 3) -- and the multiplicative mode's +40 % (action 3)
and hold (action 1).  No learning is involved: this measures what the action
space allows.  Printed per episode: goodput over the first 3 s and the last
10 s, mean cwnd, median srtt, losses, steps until the flow's goodput per step
first reached 9 Mbit/s.

    sudo .venv/bin/python bench/rltcp_paper_actions.py
"""

from __future__ import annotations

import json

import numpy as np

from ccswitch.envs.rltcp_env import RlTcpEnv

CASES = [("paper", 1), ("paper", 3), ("mult", 3), ("mult", 1)]


def episode(env: RlTcpEnv, action: int) -> dict[str, float]:
    env.reset()
    infos = []
    done = False
    while not done:
        _, _, term, trunc, info = env.step(action)
        done = term or trunc
        if not info.get("gone"):
            infos.append(info)
    mbit = np.array([i["acked"] * 1448 * 8 / i["dt"] / 1e6 for i in infos])
    full = np.nonzero(mbit >= 9.0)[0]
    return {"mbit_first3s": float(mbit[:30].mean()), "mbit_last10s": float(mbit[-100:].mean()),
            "cwnd_mean": float(np.mean([i["cwnd"] for i in infos])),
            "srtt_ms": float(np.median([i["srtt_ms"] for i in infos])), "lost": sum(i["lost"] for i in infos),
            "steps_to_9mbit": int(full[0]) if len(full) else -1}


def main() -> int:
    for p_cubic in (0.0, 1.0):
        for mode, action in CASES:
            with RlTcpEnv(mode=mode, p_cubic=p_cubic) as env:
                r = episode(env, action)
            print(json.dumps({"mode": mode, "action": action, "cubic": bool(p_cubic), **r}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
