#!/usr/bin/env bash
# Quick start, main job: set the machine up (scripts/setup.sh), then run the
# default two-client scenario (testbed/scenarios/default.toml: CUBIC vs BBR on
# paper 002's emulated WiFi link, ccswitchd on both clients, 30 s) and print
# its result table: each flow's share of its fair share, Jain's index,
# utilisation and p95 RTT over the last half of the run, against the targets.
#
#   sudo bash scripts/demo.sh [--out DIR] [--no-plots] [--quiet]   (options of `ccswitch testbed run`)
#
# The single-host demo of switching one flow is still `ccswitch demo`.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"

if [[ $EUID -ne 0 ]]; then
    echo "demo.sh: needs root (network namespaces, BPF); rerun with: sudo bash scripts/demo.sh" >&2
    exit 1
fi

bash "$REPO/scripts/setup.sh"

OUT="results/default-$(date +%Y%m%d-%H%M%S)"
for arg in "$@"; do
    [[ $arg == --out=* ]] && OUT="${arg#--out=}"
done
args=("$@")
if ! printf '%s\n' "$@" | grep -q -- '^--out'; then
    args+=(--out "$OUT")
fi

SCENARIO=testbed/scenarios/default.toml
if [[ ! -x testbed/linkemu/target/release/linkemu ]]; then
    echo "demo.sh: linkemu is not built (cargo missing?): using the kernel link instead of the emulated WiFi" >&2
    SCENARIO=testbed/scenarios/default-kernel.toml
fi

tables="$("$REPO/.venv/bin/ccswitch" testbed run "$SCENARIO" "${args[@]}")"
for table in $tables; do
    # the result section of table.md: from its first "## " heading to the next one
    awk '/^## /{n++} n==1' "$table"
    echo "Full table, plots and the daemons' records and decisions: $(dirname "$table")/"
done
