"""ccswitchd: the switching daemon's entry point.

Today it runs the data plane in observe-only mode: it holds the monitor and
PCC's registration for this network namespace and writes one JSON line per
flow per tick to stdout.  The control loop (features -> policy -> guard ->
switch), systemd integration and the CLI socket arrive with issue 5.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

from ccswitch.bpf.libbpf import BpfError
from ccswitch.host import HostError
from ccswitch.sampler import check_interval


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="ccswitchd", description=__doc__.splitlines()[0])
    parser.add_argument("--interval", type=float, default=0.2, help="tick, s (>= 0.1)")
    args = parser.parse_args(argv)
    from ccswitch.dataplane import DataPlane, install_signal_handlers

    try:
        check_interval(args.interval)
        install_signal_handlers()
        with DataPlane() as dp:
            dp.sample()
            while True:
                time.sleep(args.interval)
                for row in dp.sample().to_pylist():
                    clean = {k: (None if isinstance(v, float) and math.isnan(v) else v)
                             for k, v in row.items()}
                    print(json.dumps(clean), flush=True)
    except (HostError, BpfError, ValueError) as exc:
        print(f"ccswitchd: error: {exc}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
