#!/usr/bin/env bash
# What OTLP traces cost a turn: the agent benchmark (scripts/agent-bench.sh:
# 5-step runs, one tool call per step, 10 no-op plugins, CPU time per step of
# the agent's process) with traces off (no OTEL variable), off by
# OTEL_SDK_DISABLED=true with an endpoint set, and on (exporting
# OTLP/HTTP protobuf to a local sink that answers 200), for bub-rs and for
# Python Bub 0.6.0a3 with its `trace` extra (pinned in
# tests/python/trace-requirements.txt), back to back, two rounds.
#
#   scripts/otel-bench.sh [RUNS]      (honours CARGO_TARGET_DIR; Python Bub's venv from scripts/bub-venv.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-50}"
target="${CARGO_TARGET_DIR:-target}"
venv="${BUB_BENCH_VENV:-/tmp/bub06}"
[ -x "$venv/bin/python" ] || scripts/bub-venv.sh "$venv" >&2
cargo build --quiet --release -p tp-agent-noop -p bub-tests --example agent_bench
trace="$target/diff-trace-site"
if [ ! -d "$trace/opentelemetry/sdk" ]; then
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps --target "$trace" \
        -r tests/python/trace-requirements.txt >&2
fi
trace="$(cd "$trace" && pwd)"
port_file="$(mktemp)"
sink_file="$(mktemp)"
python3 scripts/scripted_provider.py 5 >"$port_file" &
server=$!
# The OTLP sink: reads each export and answers an empty success.
python3 - >"$sink_file" <<'EOF' &
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class Sink(BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()
    def log_message(self, *a):
        pass
server = ThreadingHTTPServer(("127.0.0.1", 0), Sink)
print(server.server_address[1], flush=True)
server.serve_forever()
EOF
sink=$!
trap 'kill $server $sink 2>/dev/null; rm -f "$port_file" "$sink_file"' EXIT
for _ in $(seq 50); do [ -s "$port_file" ] && [ -s "$sink_file" ] && break; sleep 0.1; done
export BASE="http://127.0.0.1:$(cat "$port_file")/v1"
endpoint="http://127.0.0.1:$(cat "$sink_file")"
export TAPE_ENTRIES=10 MEMORY=0
p=$((runs / 5 > 5 ? runs / 5 : 5))
for round in 1 2; do
  for mode in off disabled on; do
    case $mode in
      off) vars=() ;;
      disabled) vars=(OTEL_EXPORTER_OTLP_ENDPOINT="$endpoint" OTEL_SDK_DISABLED=true) ;;
      on) vars=(OTEL_EXPORTER_OTLP_ENDPOINT="$endpoint") ;;
    esac
    env "${vars[@]}" "$target"/release/examples/agent_bench "$runs" | sed "s/^/round $round $mode: /"
    env "${vars[@]}" PYTHONPATH="$trace" "$venv"/bin/python scripts/agent_bench.py "$p" | sed "s/^/round $round $mode: /"
  done
done
