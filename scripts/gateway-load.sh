#!/usr/bin/env bash
# The gateway load test: 1,000 messages over 100
# sessions, sent concurrently through the http-channel plugin to one
# `bub gateway` (release, offline echo model). Checks one reply per message,
# per-session order and no overlapping turns; prints throughput and p50/p99.
# PREFILL_TURNS=N first gives every session N turns (not measured).
#
#   scripts/gateway-load.sh [MESSAGES] [SESSIONS] [ROUNDS]   (honours CARGO_TARGET_DIR;
#   BUB_LOAD_BIN=path/to/bub measures another build of bub)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --quiet --release -p bub-tests --example gateway_load
target="${CARGO_TARGET_DIR:-target}"
for round in $(seq "${3:-3}"); do
  "$target"/release/examples/gateway_load "${1:-1000}" "${2:-100}" | sed "s/^/round $round: /"
done
