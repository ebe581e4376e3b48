#!/usr/bin/env bash
# Set the machine up (scripts/setup.sh) and run `ccswitch demo`; arguments are passed on.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"

bash "$REPO/scripts/setup.sh"
exec "$REPO/.venv/bin/ccswitch" demo "$@"
