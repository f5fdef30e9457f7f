#!/usr/bin/env bash
# Differential test against Python Bub 0.6.0a3: the
# same scripted provider replies, through `bub run`, to both; compares what
# each sent the provider, printed and recorded (scripts/differential.py).
#
#   scripts/differential.sh [--only SCENARIO] [--report FILE]
#
# Honours CARGO_TARGET_DIR; makes Python Bub's venv with scripts/bub-venv.sh
# (BUB_BENCH_VENV, default /tmp/bub06) when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
venv="${BUB_BENCH_VENV:-/tmp/bub06}"
[ -x "$venv/bin/bub" ] || scripts/bub-venv.sh "$venv" >&2
# Two builds: with `--example`, cargo builds only example targets of every
# package named, so the plugins' libraries would be left out.
# The python bridge is built for the venv's Python (scenarios with
# "bridge"/"pypi" run Python plugins under both hosts).
PYO3_PYTHON="$(cd "$venv" && pwd)/bin/python"
export PYO3_PYTHON
cargo build --quiet --release -p bub-host -p tool-policy -p tp-scripted -p python-bridge -p mcp
# The PyPI plugins the "pypi" scenarios load, with what they need beyond
# Bub itself, pinned as in tests/python/requirements.txt (once).
site="$target/diff-pypi-site"
if [ ! -d "$site/bub_schedule" ]; then
    pins() { grep -iE "^($(IFS='|'; echo "$*"))==" tests/python/requirements.txt; }
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps --target "$site" \
        $(pins bub-schedule APScheduler tzlocal) >&2
fi
export BUB_RS_PYPI_SITE="$(cd "$site" && pwd)"
# nowledge-mem-bub (its own site: its prompt hooks would change the others'
# requests), pinned as in tests/python/published-requirements.txt.
nowledge="$target/diff-pypi-nowledge"
if [ ! -d "$nowledge/nowledge_mem_bub" ]; then
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps --target "$nowledge" \
        "$(grep -iE '^nowledge-mem-bub==' tests/python/published-requirements.txt)" >&2
fi
export BUB_RS_PYPI_NOWLEDGE_SITE="$(cd "$nowledge" && pwd)"
# bub-mcp (its own site: under Python Bub it serves the "mcp_servers"
# scenarios' servers; fastmcp is in Python Bub's venv already).
mcp_site="$target/diff-pypi-mcp"
if [ ! -d "$mcp_site/bub_mcp" ]; then
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps --target "$mcp_site" \
        "$(grep -iE '^bub-mcp==' tests/python/requirements.txt)" >&2
fi
export BUB_RS_PYPI_MCP_SITE="$(cd "$mcp_site" && pwd)"
# Bub's `trace` extra and opentelemetry-proto (the "otlp" scenarios'
# Python Bub exports with it; the receiver decodes with it), pinned.
trace="$target/diff-trace-site"
if [ ! -d "$trace/opentelemetry/sdk" ]; then
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps --target "$trace" \
        -r tests/python/trace-requirements.txt >&2
fi
export BUB_RS_TRACE_SITE="$(cd "$trace" && pwd)"
export BUB_RS_PYTHON_VENV="$venv"
cargo build --quiet --release -p bub-tests --example steer_run
export BUB_RS_STEER_RUN="$(cd "$target/release/examples" && pwd)/steer_run"
BUB_RS_TARGET="$target/release" exec python3 scripts/differential.py "$target/release/bub" "$venv/bin/bub" "$@"
