#!/usr/bin/env bash
# A long session in one gateway: TURNS messages (10,000 by default) to one
# session of one `bub gateway` (release, http-channel, a model on loopback
# that reports its usage), each sent when the last was answered. Every
# 1,000 turns: the gateway's CPU per turn, its memory, the largest request
# the model saw, the folds so far (see tests/examples/long_session.rs).
#
#   scripts/long-session.sh [TURNS]   (honours CARGO_TARGET_DIR;
#   BUB_LOAD_BIN=path/to/bub measures another build of bub;
#   BUB_CONTEXT_BUDGET_TOKENS is passed to the gateway)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --quiet --release -p bub-tests --example long_session
target="${CARGO_TARGET_DIR:-target}"
"$target"/release/examples/long_session "${1:-10000}"
