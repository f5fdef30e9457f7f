#!/usr/bin/env bash
# What N installed plugins cost a process: start-up time
# and peak RSS of `bub hooks`, and threads and peak RSS of `bub run`, with N
# copies of the benchmark plugin (tests/plugins/tp-bench, every hook async),
# against Python Bub 0.6.0a3 with N entry-point plugins of the same hooks.
#
#   scripts/many-plugins.sh [N] [ROUNDS]     (default 100 plugins, 10 rounds)
#
# PLUGIN_LIB=path/to/libtp_bench.so measures that build of the plugin instead
# (e.g. one built with the template's release profile: lto, one codegen unit).
#
# Each figure is the median over ROUNDS runs. Threads are counted with
# strace (every clone that makes a thread). The Python side runs in Python
# Bub's venv from scripts/bub-venv.sh (made when missing). Honours
# CARGO_TARGET_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-100}"
rounds="${2:-10}"
target="${CARGO_TARGET_DIR:-target}"
export PYO3_PYTHON="${PYO3_PYTHON:-$(scripts/python-for-bridge.sh)}"
# Built one by one: a build of several packages unifies their features, and
# the host's tokio features would grow every plugin.
for p in bub-host tp-bench echo-model; do cargo build --release -q -p "$p" >&2; done
bub="$target/release/bub"
plugin_lib="${PLUGIN_LIB:-$target/release/libtp_bench.so}"
echo "plugin library: $plugin_lib ($(stat -c %s "$plugin_lib") bytes)"
work="$(mktemp -d)"
trap '[[ -n "${KEEP:-}" ]] || rm -rf "$work"' EXIT

# --- bub-rs: N copies of tp-bench (async) and the echo model -------------
home="$work/rs-home"
"$bub" plugins install --home "$home" "$target/release/libecho_model.so" >/dev/null
# The same home without the N plugins, for the cost per plugin.
cp -a "$home" "$work/rs-base"
for i in $(seq -f '%03g' 0 $((n - 1))); do
    "$bub" plugins install --home "$home" --name "p$i" "$plugin_lib" >/dev/null
    python3 - "$home/plugins/p$i/plugin.json" "$i" <<'EOF'
import json, sys
path, idx = sys.argv[1], int(sys.argv[2])
manifest = json.load(open(path))
manifest["config"] = {"idx": idx, "async": True}
json.dump(manifest, open(path, "w"), indent=2)
EOF
done

median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

# ms and peak KB of one command, as "ms kb"
measure() {
    local out="$work/time"
    local start end
    start=$(date +%s%N)
    /usr/bin/time -f '%M' -o "$out" "$@" >/dev/null 2>"$work/stderr" || { cat "$work/stderr" >&2; return 1; }
    end=$(date +%s%N)
    echo "$(( (end - start) / 1000 )) $(tail -1 "$out")"
}

# threads a command starts (clones with CLONE_THREAD)
threads() {
    if ! command -v strace >/dev/null; then echo "(strace is not installed)"; return; fi
    strace -f -qq -e trace=clone,clone3 -o "$work/strace" "$@" >/dev/null 2>&1 || true
    grep -c 'CLONE_THREAD' "$work/strace" || true
}

report() {
    local label="$1"; shift
    local times=() kbs=()
    for _ in $(seq "$rounds"); do
        read -r us kb < <(measure "$@")
        times+=("$us"); kbs+=("$kb")
    done
    local t k
    t=$(printf '%s\n' "${times[@]}" | median)
    k=$(printf '%s\n' "${kbs[@]}" | median)
    awk -v label="$label" -v us="$t" -v kb="$k" 'BEGIN {printf "%-40s %9.1f ms  %7.1f MB peak RSS\n", label, us / 1000, kb / 1024}'
}

echo "== bub-rs, the echo model alone (median of $rounds)"
report "bub hooks" "$bub" hooks --home "$work/rs-base"
report "bub run" "$bub" run --home "$work/rs-base" hello
echo "== bub-rs, $n plugins (median of $rounds)"
report "bub hooks" "$bub" hooks --home "$home"
report "bub run" "$bub" run --home "$home" hello
echo "bub run threads started: $(threads "$bub" run --home "$home" hello)"

# --- Python Bub: N entry points of the same hooks -------------------------
venv="${BUB_BENCH_VENV:-/tmp/bub06}"
[[ -x "$venv/bin/bub" ]] || scripts/bub-venv.sh "$venv" >&2
py="$work/py"
mkdir -p "$py/bub_many-0.0.dist-info"
cat > "$py/bub_many.py" <<'EOF'
from bub import hookimpl


class Bench:
    def __init__(self, idx):
        self.idx = idx

    @hookimpl
    async def resolve_session(self, message):
        return None

    @hookimpl
    async def load_state(self, message, session_id):
        return {"plugin": self.idx, "loaded": True}

    @hookimpl
    async def system_prompt(self, prompt, state):
        return f"<plugin_{self.idx}>be helpful</plugin_{self.idx}>"

    @hookimpl
    async def before_tool_call(self, call, state):
        return None


class Echo:
    @hookimpl
    async def run_model(self, prompt, session_id, state):
        return prompt if isinstance(prompt, str) else str(prompt)
EOF
{
    printf 'Metadata-Version: 2.1\nName: bub-many\nVersion: 0.0\n'
} > "$py/bub_many-0.0.dist-info/METADATA"
{
    echo "[bub]"
    echo "echo = bub_many:echo"
    for i in $(seq -f '%03g' 0 $((n - 1))); do echo "p$i = bub_many:p$i"; done
} > "$py/bub_many-0.0.dist-info/entry_points.txt"
{
    echo "echo = Echo()"
    for i in $(seq 0 $((n - 1))); do printf 'p%03d = Bench(%d)\n' "$i" "$i"; done
} >> "$py/bub_many.py"
export BUB_HOME="$work/py-home"
echo "== Python Bub 0.6.0a3, no plugins (median of $rounds)"
report "bub hooks" "$venv/bin/bub" hooks
export PYTHONPATH="$py"
echo "== Python Bub 0.6.0a3, $n plugins (median of $rounds)"
report "bub hooks" "$venv/bin/bub" hooks
report "bub run" "$venv/bin/bub" run hello
echo "bub run threads started: $(threads "$venv/bin/bub" run hello)"
