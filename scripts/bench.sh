#!/usr/bin/env bash
# Runs the dispatch and loading benchmarks and prints one JSON object per line
# with the fields and case names of bench/python/hook_bench.py (case,
# plugins, iterations, ns_per_call), so both implementations can be compared
# case by case.
#
#   scripts/bench.sh                 Rust only  -> target/bench/rust.jsonl
#   scripts/bench.sh --with-python   Rust, then the Python reference back to
#                                    back on the same machine, and a table
#   scripts/bench.sh --only SUBSTR   a subset (criterion filter)
#
# The Python side runs in a venv bench/python/setup.sh makes (Python Bub
# 0.6.0a3, pinned; BUB_BENCH_VENV, default /tmp/bub06).
# Honours CARGO_TARGET_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
out="$target/bench"
mkdir -p "$out"
with_python=0
filter=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --with-python) with_python=1 ;;
        --only) filter=("$2"); shift ;;
        *) echo "usage: $0 [--with-python] [--only SUBSTR]" >&2; exit 2 ;;
    esac
    shift
done

echo "bench.sh: building and running the Rust benchmarks (release; plugins are real cdylibs)" >&2
rm -rf "$target/criterion"
cargo bench -p bub-tests --bench hooks -- "${filter[@]}" >&2
python3 scripts/bench_report.py lines "$target/criterion" | tee "$out/rust.jsonl"

if [[ $with_python == 1 ]]; then
    venv="${BUB_BENCH_VENV:-/tmp/bub06}"
    bench/python/setup.sh "$venv" >&2
    for i in 1 2 3; do
        echo "bench.sh: Python reference, run $i of 3" >&2
        "$venv/bin/python" bench/python/hook_bench.py ${filter:+--only "${filter[0]}"} > "$out/python$i.jsonl"
    done
    python3 scripts/bench_report.py table "$out/rust.jsonl" "$out"/python{1,2,3}.jsonl | tee "$out/compare.md"
fi
