#!/usr/bin/env bash
# The main job, for a newcomer on a fresh machine: build the example plugins,
# install them into a fresh BUB_HOME under the target folder, and show what the host
# discovered, loaded and registered.
#
#   scripts/demo.sh          (honours CARGO_TARGET_DIR)
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
mkdir -p "$target"
target="$(cd "$target" && pwd)"

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "Building the bub host and the example plugins (release)"
cargo build --release -p bub-host -p echo-model -p session-router -p tool-policy -p audit-log -p openai-chat -p http-channel

home="$target/demo-home"
# BUB_HOME (rather than --home) so that plugins see the demo home too.
bub() { BUB_HOME="$home" "$target"/release/bub "$@"; }

say "Installing them with \`bub plugins install\` into a fresh BUB_HOME: $home"
rm -rf "$home"
bub plugins install "$target"/release/libecho_model.so   # a built library
bub plugins install plugins/session-router           # a crate folder: built, checked, installed
bub plugins install "$target"/release/libtool_policy.so
bub plugins install "$target"/release/libaudit_log.so
bub plugins install "$target"/release/libopenai_chat.so
# openai-chat would be the model of the turn below (the latest plugin with a
# model hook decides) and needs a network and OPENAI_API_KEY: keep it off.
# Enable it with `bub plugins enable openai-chat`.
bub plugins disable openai-chat


say "bub plugins list   (registration order: builtin first, then installed plugins)"
bub plugins list

say "bub hooks   (Bub's report: pluggy's stored order, the reverse of call order)"
bub hooks

say "bub hooks --call-order   (the order hooks run in, with markers and sync/async)"
bub hooks --call-order

say "bub plugins info session-router"
bub plugins info session-router

say "bub run \"hello from bub-rs\"   (one turn: session-router resolves, echo-model answers, audit-log records)"
bub run "hello from bub-rs"

say "The builtin agent: disable echo-model and the builtin answers turns itself"
# Without BUB_MODEL (or "model" in $BUB_HOME/config.json) the agent uses the
# offline `echo` model, so this runs without a network; the agent loop, the
# tape and the LLM/tool hooks run exactly as with a real model.
bub plugins disable echo-model
bub plugins config tool-policy \
  'rules=[{"tool":"bash","argument":"command","contains":"rm ","deny":"no deleting in the demo"}]' >/dev/null
bub run "hello, agent"

say "Command mode: ,<tool> or ,<shell line> runs a tool without a model, through the tool hooks"
bub run ",bash echo command mode runs tools offline"
bub run ",fs.read README.md limit=3"
if bub run ",bash rm -rf some-folder" 2>"$target/demo-denied.txt"; then
  echo "expected the policy to deny this" >&2; exit 1
fi
echo "denied: $(grep -o 'blocked by policy: [^"]*' "$target/demo-denied.txt" | head -1)"

say "What audit-log recorded (\$BUB_HOME/audit.jsonl)"
cat "$home/audit.jsonl"

say "bub gateway with the http-channel plugin: one message over HTTP (curl), then SIGTERM"
# Port 0: a free port; the channel writes the address it got into its data folder.
bub plugins install "$target"/release/libhttp_channel.so
bub plugins config http-channel bind=127.0.0.1:0 >/dev/null
rm -f "$home/data/http-channel/address"
# Started directly, not through the `bub` function: `$!` must be the gateway
# itself (through a function it is a subshell, and killing that leaves the
# gateway running).
BUB_HOME="$home" "$target"/release/bub gateway >"$target/demo-gateway.log" 2>&1 &
gateway=$!
trap 'kill $gateway 2>/dev/null || true' EXIT
for _ in $(seq 100); do [ -s "$home/data/http-channel/address" ] && break; sleep 0.1; done
address="$(cat "$home/data/http-channel/address")"
echo "listening on http://$address"
# Every request carries the token the channel generated at its first start
# (owner-only, in its data folder): other users of the machine cannot post.
token="$(cat "$home/data/http-channel/token")"
if command -v curl >/dev/null; then
  curl -sS "http://$address/v1/messages" -H 'content-type: application/json' -H "Authorization: Bearer $token" \
    -d '{"content": "hello over HTTP", "session_id": "demo-http"}'
  echo
  echo "without the token: HTTP $(curl -s -o /dev/null -w '%{http_code}' "http://$address/v1/messages" \
    -H 'content-type: application/json' -d '{"content": "hi"}')"
else
  echo "(curl is not installed: skipping the request)"
fi
kill -TERM "$gateway"; wait "$gateway" || true
trap - EXIT
if kill -0 "$gateway" 2>/dev/null; then
  echo "the gateway (pid $gateway) is still running after it was stopped" >&2; exit 1
fi
echo "the gateway stopped cleanly; its log: $target/demo-gateway.log"

say "Done. Try: BUB_HOME=$home $target/release/bub chat   (Ctrl-D quits; ,help lists the commands)"
echo "A real model: BUB_MODEL=openai:gpt-4o-mini OPENAI_API_KEY=sk-... (any OpenAI-compatible server:"
echo "BUB_MODEL=ollama:llama3.2 BUB_OLLAMA_API_BASE=http://localhost:11434/v1; Anthropic: BUB_MODEL=anthropic:claude-sonnet-4-5"
echo "ANTHROPIC_API_KEY=...). Settings: docs/agent.md."
