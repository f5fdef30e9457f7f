#!/usr/bin/env bash
# The python bridge's costs beside Python Bub for the same plugin
# (tests/python/bub-rs-bench), back to back on this machine:
#   1. per hook: criterion (tests/benches/python_bridge.rs, bub-rs calling
#      the plugin through the release-built bridge), then
#      tests/python/bench_bub.py (Bub 0.6.0a3 calling it) three times;
#   2. start-up: `bub hooks` (loads every plugin, prints, exits) ten times
#      each without the bridge, with the bridge and its venv, and Python
#      Bub's own `bub hooks` in that venv; medians.
# Writes target/bench/python-bridge.md. Honours CARGO_TARGET_DIR; builds
# the bridge for scripts/python-for-bridge.sh's Python.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
out="$target/bench"
mkdir -p "$out"
PYO3_PYTHON="$(scripts/python-for-bridge.sh)"
[[ -n "$PYO3_PYTHON" ]] || { echo "bench-python-bridge.sh: no Python 3.12+ with a shared libpython" >&2; exit 1; }
export PYO3_PYTHON

rm -rf "$target/criterion/python_bridge"
cargo bench -p bub-tests --bench python_bridge >&2
python3 scripts/bench_report.py lines "$target/criterion" | grep '"python_bridge/' > "$out/bridge-rust.jsonl"
venv="$target/python-bench-venv"
for i in 1 2 3; do
    "$venv/bin/python" tests/python/bench_bub.py > "$out/bridge-python$i.jsonl"
done
python3 scripts/bench_report.py table "$out/bridge-rust.jsonl" "$out"/bridge-python{1,2,3}.jsonl > "$out/python-bridge.md"

# Start-up.
home="$(mktemp -d)"
trap 'rm -rf "$home"' EXIT
bub="$target/release/bub"
median_ms() { # command… → median wall time of 10 runs, in ms
    local times=()
    for _ in $(seq 10); do
        local t0 t1
        t0=$(date +%s%N); "$@" > /dev/null 2>&1; t1=$(date +%s%N)
        times+=($(( (t1 - t0) / 1000 )))
    done
    printf '%s\n' "${times[@]}" | sort -n | awk '{ a[NR] = $1 } END { printf "%.1f", (a[5] + a[6]) / 2000 }'
}
mkdir -p "$home/plugins"
plain=$(BUB_HOME="$home" median_ms "$bub" hooks)
"$bub" --home "$home" plugins install "$target/release/libpython_bridge.so" > /dev/null
"$bub" --home "$home" plugins config python-bridge "venv=$(cd "$venv" && pwd)" > /dev/null
bridged=$(BUB_HOME="$home" median_ms "$bub" hooks)
python_bub=$(BUB_HOME="$home/py" median_ms "$venv/bin/bub" hooks)
{
    echo
    echo "| start-up (\`bub hooks\`, median of 10) | ms |"
    echo "|---|---:|"
    echo "| bub-rs, no bridge | $plain |"
    echo "| bub-rs with the bridge (interpreter + venv + 1 Python plugin) | $bridged |"
    echo "| Python Bub 0.6.0a3, same venv and plugin | $python_bub |"
} >> "$out/python-bridge.md"
cat "$out/python-bridge.md"
