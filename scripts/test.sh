#!/usr/bin/env bash
# Set the machine up (scripts/setup.sh), lint with ruff, and run the test suite.
# Extra arguments go to pytest, e.g.  scripts/test.sh tests/test_netns.py -k tbf
# Both ruff and pytest always run; the exit status is non-zero if either failed.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"

CCSWITCH_PREBUILD_TESTS=1 bash "$REPO/scripts/setup.sh"

status=0
echo "ccswitch test: ruff check ."
"$REPO/.venv/bin/ruff" check . || status=1
# --durations: the 25 slowest tests end the log (the suite must stay under 20 min; see what to trim).
"$REPO/.venv/bin/python" -m pytest -v --durations=25 "$@" || status=$?
if [ "$status" -ne 0 ]; then
    echo "ccswitch test: FAILED (exit $status)" >&2
fi
exit "$status"
