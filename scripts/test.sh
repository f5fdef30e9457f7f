#!/usr/bin/env bash
# Every test: `cargo test --workspace`, with the python bridge built for a
# Python 3.12+ when one is installed (scripts/python-for-bridge.sh), so the
# Python plugin tests run instead of skipping.
set -euo pipefail
cd "$(dirname "$0")/.."
PYO3_PYTHON="$(scripts/python-for-bridge.sh)"
if [[ -n "$PYO3_PYTHON" ]]; then export PYO3_PYTHON; else unset PYO3_PYTHON; fi
exec cargo test --workspace "$@"
