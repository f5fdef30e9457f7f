#!/usr/bin/env bash
# The main job, for a newcomer on a fresh machine: build the example plugins,
# install them into a fresh BUB_HOME under target/, and show what the host
# discovered, loaded and registered.
#
#   scripts/demo.sh
#
# (Until `bub plugins install` exists, plugins are installed by hand: a folder
# per plugin with the library and a plugin.json manifest; see README.md.)
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "Building the bub host and the example plugins (release)"
cargo build --release -p bub-host -p echo-model -p session-router

home="$PWD/target/demo-home"
say "Installing them into a fresh BUB_HOME: $home"
rm -rf "$home"
mkdir -p "$home/plugins"

install_plugin() { # name package config-json
    local name=$1 package=$2 config=${3:-'{}'}
    local lib="lib${package//-/_}.so"
    mkdir -p "$home/plugins/$name"
    cp "target/release/$lib" "$home/plugins/$name/"
    local sum
    sum=$(sha256sum "$home/plugins/$name/$lib" | cut -d' ' -f1)
    cat > "$home/plugins/$name/plugin.json" <<JSON
{
  "name": "$name",
  "library": "$lib",
  "sha256": "$sum",
  "installed_at": "$(date -u +%Y-%m-%dT%H:%M:%SZ)",
  "config": $config
}
JSON
    echo "  installed $name -> $home/plugins/$name/$lib"
}
install_plugin echo-model echo-model '{"prefix": "echo: "}'
install_plugin session-router session-router '{"aliases": {"telegram:raw": "tenant:canonical"}}'

bub() { target/release/bub --home "$home" "$@"; }

say "bub plugins list   (registration order: builtin first, then installed plugins)"
bub plugins list

say "bub hooks   (Bub's report: pluggy's stored order, the reverse of call order)"
bub hooks

say "bub hooks --call-order   (the order hooks run in, with markers and sync/async)"
bub hooks --call-order

say "Done. Try: target/release/bub --home $home plugins list --json"
