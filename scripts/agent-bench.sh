#!/usr/bin/env bash
# The agent benchmark: bub-rs and Python Bub 0.6.0a3
# back to back against the same scripted provider (scripts/scripted_provider.py,
# its own process): 5-step runs, one tool call per step, 10 no-op plugins with
# the four interception hooks; CPU time per step of the agent's process. Then
# the memory of a 1,000-entry tape read back as context (bub-rs). Each round
# runs sessions whose tapes already hold 10, 1,000 and 10,000 entries
# (TAPE_ENTRIES; fewer runs for the larger tapes).
#
#   scripts/agent-bench.sh [RUNS] [TAPE SIZES...]      (honours CARGO_TARGET_DIR; Python Bub's venv from scripts/bub-venv.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-100}"
shift || true
sizes=("${@:-10 1000 10000}")
# shellcheck disable=SC2206
sizes=(${sizes[*]})
target="${CARGO_TARGET_DIR:-target}"
venv="${BUB_BENCH_VENV:-/tmp/bub06}"
[ -x "$venv/bin/python" ] || scripts/bub-venv.sh "$venv" >&2
cargo build --quiet --release -p tp-agent-noop -p bub-tests --example agent_bench
port_file="$(mktemp)"
python3 scripts/scripted_provider.py 5 >"$port_file" &
server=$!
trap 'kill $server 2>/dev/null; rm -f "$port_file"' EXIT
for _ in $(seq 50); do [ -s "$port_file" ] && break; sleep 0.1; done
export BASE="http://127.0.0.1:$(cat "$port_file")/v1"
for round in 1 2; do
  for n in "${sizes[@]}"; do
    r=$((n >= 10000 ? runs / 5 : runs))
    r=$((r > 5 ? r : 5))
    p=$((r / 5 > 5 ? r / 5 : 5))
    TAPE_ENTRIES=$n "$target"/release/examples/agent_bench "$r" | sed "s/^/round $round: /"
    TAPE_ENTRIES=$n "$venv"/bin/python scripts/agent_bench.py "$p" | sed "s/^/round $round: /"
  done
done
