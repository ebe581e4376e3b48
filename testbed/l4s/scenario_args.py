"""A testbed scenario's DualPI2 bottleneck -> options of ``dualpi2-router.sh``.

The emulated and the real router must run the same AQM with the same
parameters.  The scenario file (``testbed/scenario/``, the one definition)
describes the bottleneck as ``[link.uplink]`` with ``rate_mbit`` and
``qdisc = { kind = "dualpi2", ... }`` in linkemu's terms
(``testbed/linkemu/README.md``); this module maps that onto the names of
Linux's sch_dualpi2 as tc(8) spells them (``tc/q_dualpi2.c``)::

    linkemu (scenario)        dualpi2-router.sh       tc dualpi2
    rate_mbit                 --rate-mbit N           (HTB parent at N Mbit/s)
    limit_pkts                --limit                 limit
    target_ms                 --target Nus            target
    tupdate_ms                --tupdate Nus           tupdate
    alpha_hz, beta_hz         --alpha, --beta         alpha, beta (Hz, unscaled)
    k                         --coupling-factor       coupling_factor (an integer in Linux)
    l_min_th_ms               --step-thresh Nus       step_thresh (Linux: a step only, no ramp)
    l_min_qlen_pkts           --min-qlen-step         min_qlen_step
    classifier = "ecn"        --ecn l4s_ect           l4s_ect (ECT(1) and CE)
    classifier = "dscp"       --dscp D (each l_dscp)  u32 filter dsfield -> classid :1
    scheduler = "wrr"         --classic-protection    classic_protection (C weight, %)
    drop_on_overload          --overload drop|overflow drop_on_overload | overflow

What Linux cannot do is reported on stderr, and the nearest Linux setting is
used: a ramp (``l_max_th_ms`` above ``l_min_th_ms``) becomes a step at
``l_min_th_ms``; ``scheduler = "tsfifo"`` (RFC 9332's time-shifted FIFO)
becomes Linux's WRR with its default 10 % classic protection; a fractional
``k`` is refused (tc takes an integer).

    python testbed/l4s/scenario_args.py testbed/scenarios/l4s-dyn-cubic-vs-prague.toml
    --rate-mbit 50 --limit 10000 --target 15000us ...

Exit 0 with the options on one line; exit 2 with one line naming the problem.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from ccswitch.testbed.scenario import ScenarioError, load_scenario  # the repository's .venv

PROG = "scenario_args.py"


class ArgsError(ValueError):
    """The scenario's bottleneck has no Linux sch_dualpi2 equivalent."""


def _us(ms: float) -> str:
    """Milliseconds -> a tc time in whole microseconds (tc's resolution)."""
    return f"{round(ms * 1000)}us"


def router_options(qdisc: dict[str, Any], rate_mbit: float | None,
                   warn: list[str] | None = None) -> list[str]:
    """linkemu's dualpi2 config dict (+ bottleneck rate) -> dualpi2-router.sh options."""
    warn = warn if warn is not None else []
    if qdisc.get("kind") != "dualpi2":
        raise ArgsError(f"link.uplink.qdisc.kind is {qdisc.get('kind')!r}, not \"dualpi2\": "
                        "nothing to configure on a DualPI2 router")
    opts: list[str] = []
    if rate_mbit is not None:
        opts += ["--rate-mbit", f"{rate_mbit:g}"]
    if "limit_pkts" in qdisc:
        opts += ["--limit", str(int(qdisc["limit_pkts"]))]
    if "target_ms" in qdisc:
        opts += ["--target", _us(qdisc["target_ms"])]
    if "tupdate_ms" in qdisc:
        opts += ["--tupdate", _us(qdisc["tupdate_ms"])]
    if "alpha_hz" in qdisc:
        opts += ["--alpha", f"{qdisc['alpha_hz']:g}"]
    if "beta_hz" in qdisc:
        opts += ["--beta", f"{qdisc['beta_hz']:g}"]
    if "k" in qdisc:
        k = float(qdisc["k"])
        if k != int(k) or not 1 <= k <= 255:
            raise ArgsError(f"link.uplink.qdisc.k = {k:g}: Linux's coupling_factor is an integer 1..255")
        opts += ["--coupling-factor", str(int(k))]
    if "l_min_th_ms" in qdisc:
        lo = float(qdisc["l_min_th_ms"])
        hi = qdisc.get("l_max_th_ms")
        if hi is not None and float(hi) > lo:
            warn.append(f"l_max_th_ms = {hi:g} (a ramp): Linux's L queue AQM is a step; using step_thresh "
                        f"= l_min_th_ms = {lo:g} ms")
        opts += ["--step-thresh", _us(lo)]
    if "l_min_qlen_pkts" in qdisc:
        opts += ["--min-qlen-step", str(int(qdisc["l_min_qlen_pkts"]))]
    classifier = qdisc.get("classifier", "ecn")
    if classifier == "ecn":
        opts += ["--ecn", "l4s_ect"]
    elif classifier == "dscp":
        dscps = [int(d) for d in qdisc.get("l_dscp", [])]
        if not dscps:
            raise ArgsError("link.uplink.qdisc.classifier = \"dscp\" needs l_dscp values")
        opts += ["--ecn", "l4s_ect"]  # ECT(1) senders still go to L; the DSCP filter adds the rest
        for d in dscps:
            opts += ["--dscp", str(d)]
    else:
        raise ArgsError(f"link.uplink.qdisc.classifier = {classifier!r}: expected \"ecn\" or \"dscp\"")
    scheduler = qdisc.get("scheduler", "wrr")
    if scheduler == "wrr":
        if "c_weight_pct" in qdisc:
            opts += ["--classic-protection", str(round(float(qdisc["c_weight_pct"])))]
    else:
        warn.append(f"scheduler = {scheduler!r}: Linux sch_dualpi2 schedules by WRR with classic_protection; "
                    "using its default 10 %")
    if "drop_on_overload" in qdisc:
        opts += ["--overload", "drop" if qdisc["drop_on_overload"] else "overflow"]
    return opts


def scenario_options(path: str | Path) -> tuple[list[str], list[str]]:
    """Options for the scenario file at *path*, and the warnings (what Linux does differently)."""
    sc = load_scenario(path)
    up = sc.link.uplink
    if up.qdisc is None:
        raise ArgsError(f"{Path(path).name}: link.uplink.qdisc is not set (pfifo default), not dualpi2")
    if up.trace is not None:
        raise ArgsError(f"{Path(path).name}: link.uplink.trace: a real router shapes to a constant rate; "
                        "give rate_mbit")
    warn: list[str] = []
    opts = router_options(up.qdisc.to_config(), up.rate_mbit, warn)
    return opts, warn


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] in ("-h", "--help"):
        print(f"usage: {PROG} SCENARIO.toml   (prints dualpi2-router.sh router options)", file=sys.stderr)
        return 2
    try:
        opts, warn = scenario_options(argv[0])
    except (ScenarioError, ArgsError) as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2
    for w in warn:
        print(f"{PROG}: note: {w}", file=sys.stderr)
    print(" ".join(opts))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
