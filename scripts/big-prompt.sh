#!/usr/bin/env bash
# What a big hook answer costs a turn: peak RSS of a release `bub run` whose `build_prompt` answers MB
# megabytes (the scripted test plugin's `repeat`), through the builtin agent
# and a model that answers "done" (scripts/scripted_provider.py, its own
# process). Prints the peak of two runs, each on a fresh home, and the
# size of what one turn stored.
#
#   scripts/big-prompt.sh [MB] [HOOK]     (default 60 MB of build_prompt; honours CARGO_TARGET_DIR)
#
# HOOK=run_model measures a plugin model's answer instead (the agent is
# then not involved).
set -euo pipefail
cd "$(dirname "$0")/.."
mb="${1:-60}"
hook="${2:-build_prompt}"
target="${CARGO_TARGET_DIR:-target}"
export PYO3_PYTHON="${PYO3_PYTHON:-$(scripts/python-for-bridge.sh)}"
# One by one: a build of several packages unifies their features.
for p in bub-host tp-scripted; do cargo build --release -q -p "$p" >&2; done
target="$(cd "$target" && pwd)"
bub="$target/release/bub"
work="$(mktemp -d)"
python3 scripts/scripted_provider.py 1 >"$work/port" &
server=$!
trap 'kill $server 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 50); do [ -s "$work/port" ] && break; sleep 0.1; done
home="$work/home"
mkdir -p "$home" "$work/ws"
"$bub" plugins install --home "$home" --name big "$target/release/libtp_scripted.so" >/dev/null
"$bub" plugins config --home "$home" big "hooks={\"$hook\": {\"repeat\": [\"x\", $((mb * 1000000))]}}" >/dev/null
printf '{"model": "openai:bench", "api_key": "k", "api_base": "http://127.0.0.1:%s/v1"}\n' "$(cat "$work/port")" >"$home/config.json"
for round in 1 2; do
    # A fresh home each round: the session's tape starts empty (a second
    # turn would carry the first one's prompt as context).
    rm -rf "$work/round" && cp -a "$home" "$work/round"
    (cd "$work/ws" && /usr/bin/time -f '%M' -o "$work/rss" "$bub" --home "$work/round" run "hi" >"$work/out" 2>"$work/err") ||
        { cat "$work/err" >&2; exit 1; }
    echo "round $round: $hook answering $mb MB: peak RSS $(( $(tail -1 "$work/rss") / 1024 )) MB; output $(stat -c %s "$work/out") bytes"
done
echo "tapes: $(du -sm "$work/round" | cut -f1) MB under BUB_HOME after one turn"
