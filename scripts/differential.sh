#!/usr/bin/env bash
# Differential test against Python Bub 0.6.0a3 (issue "agent" item 9): the
# same scripted provider replies, through `bub run`, to both; compares what
# each sent the provider, printed and recorded (scripts/differential.py).
#
#   scripts/differential.sh [--only SCENARIO] [--report FILE]
#
# Honours CARGO_TARGET_DIR; makes the Python venv with ../shared/bench/setup.sh
# (BUB_BENCH_VENV, default /tmp/bub06) when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
venv="${BUB_BENCH_VENV:-/tmp/bub06}"
[ -x "$venv/bin/bub" ] || bash ../shared/bench/setup.sh "$venv" >&2
# Two builds: with `--example`, cargo builds only example targets of every
# package named, so the plugins' libraries would be left out.
cargo build --quiet --release -p bub-host -p tool-policy -p tp-scripted
cargo build --quiet --release -p bub-tests --example steer_run
export BUB_RS_STEER_RUN="$(cd "$target/release/examples" && pwd)/steer_run"
BUB_RS_TARGET="$target/release" exec python3 scripts/differential.py "$target/release/bub" "$venv/bin/bub" "$@"
