#!/usr/bin/env bash
# Makes a venv with Python Bub 0.6.0a3 alone (no plugins), the counterpart
# the differential and comparison scripts run bub-rs against:
#
#   scripts/bub-venv.sh DIR
#
# Bub and everything it needs are pinned as in the tests' venv
# (tests/python/requirements.txt, without its plugins); the Python is the
# one the python bridge is built with (scripts/python-for-bridge.sh), so
# that scenarios running Python plugins through the bridge share the venv.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:?usage: scripts/bub-venv.sh DIR}"
python="$(scripts/python-for-bridge.sh)"
[[ -n "$python" ]] || { echo "scripts/bub-venv.sh: no Python 3.12+ with a shared libpython found" >&2; exit 1; }
"$python" -m venv "$dir"
pins="$(mktemp)"
trap 'rm -f "$pins"' EXIT
# The plugins the tests' venv adds to Bub (packages whose names start with
# `bub-`) stay out: a venv's plugins are all loaded.
grep -vE '^(#|bub-)' tests/python/requirements.txt > "$pins"
"$dir/bin/python" -m pip install -q --disable-pip-version-check -r "$pins"
echo "Python Bub $("$dir/bin/python" -c 'import importlib.metadata as m; print(m.version("bub"))') in $dir"
