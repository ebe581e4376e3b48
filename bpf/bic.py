"""User-space half of BIC (bic.bpf.c, bic.h): make `bic` available for paper 001's reproduction.

The kernels here are built without tcp_bic (docs/network/lfq.md says why CUBIC
is not a faithful stand-in).  Same protocol as Prague and PCC (prague.py,
holder.py), so it is idempotent and outlives the process that registered it
only while some ccswitch process still uses it:
1. the kernel already offers `bic` (our registration, or a real tcp_bic
   module): use it as it is;
2. otherwise register ours and hand its struct_ops link to a holder process.

    python -m ccswitch.bpf.bic      # keep bic registered until Ctrl-C (root)
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from ccswitch.bpf import holder
from ccswitch.host import available_ccas

OBJ_PATH = Path(__file__).with_name("bic.bpf.o")
NAME = "bic"
STRUCT_OPS_MAP = "ccs_bic"


class BicHandle(holder.Held):
    """bic in use by this process (holder.Held: its source, close(), a context manager)."""


def _existing(use: holder.Use) -> BicHandle:
    return BicHandle(holder.existing_source(STRUCT_OPS_MAP), None, use)


def _register(obj_path: Path, use: holder.Use) -> BicHandle:
    return BicHandle("ccswitch", holder.register_held(NAME, obj_path, STRUCT_OPS_MAP), use)


def ensure_bic(obj_path: Path = OBJ_PATH) -> BicHandle:
    """Make bic available until the handle is closed or this process ends (module docstring)."""
    if not obj_path.is_file():
        raise RuntimeError(f"{obj_path} is missing: build it with `make -C bpf` (scripts/setup.sh does)")
    return holder.ensure(NAME, lambda: NAME in available_ccas(), _existing,
                         lambda use: _register(obj_path, use))


def main(argv: Sequence[str] | None = None) -> int:
    import argparse
    import signal

    argparse.ArgumentParser(prog="python -m ccswitch.bpf.bic",
                            description="keep bic registered until SIGINT/SIGTERM (root)").parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        handle = ensure_bic()
    except Exception as e:
        print(f"bic: error: cannot register bic ({e}); run as root after scripts/setup.sh", file=sys.stderr)
        return 1
    try:
        print(f"bic registered ({handle.source}); Ctrl-C to stop", flush=True)
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        handle.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
