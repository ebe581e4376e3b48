"""Limited vs full inheritance when a live CUBIC flow is switched to PCC.

For each mode, a CUBIC flow through a 50 Mbit/s tbf runs 4 s, is switched to
PCC, and runs 4 s more; the monitor samples every 100 ms.  Printed side by
side per mode (median over --reps runs): goodput over the 0.5 s before the
switch, over the first 0.5 s and the first 2 s after it, the lowest 100 ms
sample after it, and the ratio full/limited.

    sudo .venv/bin/python bench/inheritance.py [--reps 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

from ccswitch.dataplane import DataPlane
from ccswitch.testbed.runs.iperf import start_flow, start_server
from ccswitch.testbed.runs.netns import Bottleneck, entered

TICK_S = 0.1
CPORT = 43001


def run(bn: Bottleneck, dp: DataPlane, mode: str, port: int) -> dict[str, float]:
    with start_server(bn.receiver, port, bind=bn.receiver_addr):
        flow = start_flow(bn.sender, bn.receiver_addr, port, cca="cubic", seconds=8, cport=CPORT)
        dp.sample()
        t0, rows, fid, switched_at = time.monotonic(), [], None, None
        while flow.returncode is None:
            time.sleep(TICK_S)
            t = time.monotonic() - t0
            for r in dp.sample().to_pylist():
                if r["sport"] == CPORT:
                    fid = r["flow_id"]
                    rows.append((t, r["goodput_bps"]))
            if switched_at is None and t >= 4 and fid is not None:
                res = dp.switch(fid, "pcc", mode)
                assert res.ok, res.error
                switched_at = t
        flow.wait(timeout=30)

    def mean(lo: float, hi: float) -> float:
        vals = [g for t, g in rows if switched_at + lo < t <= switched_at + hi]
        return statistics.mean(vals) / 1e6 if vals else float("nan")

    return {"before": mean(-0.5, 0), "after_0.5s": mean(0, 0.5), "after_2s": mean(0, 2),
            "min_after": min(g for t, g in rows if switched_at < t <= switched_at + 2) / 1e6}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    out: dict[str, list[dict[str, float]]] = {"limited": [], "full": []}
    with Bottleneck(rate_mbit=50) as bn, entered(bn.sender), DataPlane() as dp:
        for rep in range(args.reps):
            for mode in ("limited", "full"):
                out[mode].append(run(bn, dp, mode, 5500 + 2 * rep + (mode == "full")))
                print(f"rep {rep + 1} {mode:>7}: " + "  ".join(
                    f"{k} {v:6.2f}" for k, v in out[mode][-1].items()) + "  (Mbit/s)", flush=True)
    keys = list(out["limited"][0])
    med = {m: {k: statistics.median(r[k] for r in rs) for k in keys} for m, rs in out.items()}
    print(f"{'median Mbit/s':>14} " + " ".join(f"{k:>11}" for k in keys))
    for m in ("limited", "full"):
        print(f"{m:>14} " + " ".join(f"{med[m][k]:>11.2f}" for k in keys))
    print(f"{'full/limited':>14} " + " ".join(
        f"{med['full'][k] / med['limited'][k]:>11.2f}" for k in keys))


if __name__ == "__main__":
    main()
