#!/usr/bin/env bash
# Makes the venv bench/python/hook_bench.py runs in: Python Bub 0.6.0a3 and
# what it needs, pinned as the tests pin them (tests/python/requirements.txt,
# without its plugins), with the Python the bridge is built with.
#
#   bench/python/setup.sh DIR        (does nothing when DIR already has Bub 0.6.0a3)
set -euo pipefail
cd "$(dirname "$0")/../.."
dir="${1:?usage: bench/python/setup.sh DIR}"
if [[ -x "$dir/bin/python" ]] && "$dir/bin/python" -c 'import importlib.metadata as m, sys; sys.exit(m.version("bub") != "0.6.0a3")' 2>/dev/null; then
    exit 0
fi
exec scripts/bub-venv.sh "$dir"
