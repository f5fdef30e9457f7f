#!/usr/bin/env python3
"""Checks that each crate of the workspace depends only on the layers
below it, so the crate stack stays a stack:

    bub-abi-macros ← bub-abi ← bub-kit ← bub-runtime ← bub-agent ← bub-framework ← bub-gateway ← bub-builtin ← bub-host
    bub-sse (a leaf: server-sent events framing)

A plugin (plugins/*, tests/plugins/*) builds against the ABI, plus
bub-kit and bub-sse; its tests may use bub-runtime's in-process harness. The tests
crate (tests/) may use anything. An upward or sideways edge fails with the
crate, the dependency, and the rule it breaks.

    python3 scripts/layers.py            (reads `cargo metadata --no-deps`)
"""

import json
import subprocess
import sys
from pathlib import Path

# The core stack, lowest first: a crate may depend on the ones before it.
STACK = ["bub-abi-macros", "bub-abi", "bub-kit", "bub-runtime", "bub-agent", "bub-framework", "bub-gateway", "bub-builtin", "bub-host"]
# Leaves any layer above the ABI may use.
LEAVES = {"bub-sse"}
# What a plugin may depend on (normal, build) and, in its own tests (dev).
PLUGIN = {"bub-abi", "bub-abi-macros", "bub-kit", "bub-sse"}
PLUGIN_DEV = PLUGIN | {"bub-runtime"}


def allowed(package: dict, root: Path) -> tuple[set[str], set[str], str]:
    """(allowed normal deps, allowed dev deps, the rule's name)."""
    name = package["name"]
    folder = Path(package["manifest_path"]).parent.relative_to(root)
    if name in STACK:
        below = set(STACK[: STACK.index(name)])
        if STACK.index(name) >= 3:  # above the ABI and the kit
            below |= LEAVES
        return below, below, f"{name} may use only the layers below it: {sorted(below) or 'none'}"
    if name in LEAVES:
        return set(), set(), f"{name} is a leaf: it uses no crate of the workspace"
    if folder.parts[:1] == ("plugins",) or folder.parts[:2] == ("tests", "plugins"):
        return PLUGIN, PLUGIN_DEV, "a plugin builds against the ABI (bub-abi, bub-kit, bub-sse); its tests may add bub-runtime"
    if folder.parts[:1] == ("tests",):
        return None, None, "tests may use anything"
    return set(), set(), f"{name} is in no layer: add it to scripts/layers.py"


def main() -> int:
    meta = json.loads(subprocess.check_output(["cargo", "metadata", "--no-deps", "--format-version", "1"]))
    root = Path(meta["workspace_root"])
    members = {p["name"] for p in meta["packages"]}
    problems = []
    for package in meta["packages"]:
        normal, dev, rule = allowed(package, root)
        if normal is None:
            continue
        for dep in package["dependencies"]:
            if dep["name"] not in members:
                continue
            ok = dev if dep.get("kind") == "dev" else normal
            if dep["name"] not in ok:
                kind = dep.get("kind") or "normal"
                problems.append(f"{package['name']} depends on {dep['name']} ({kind}): {rule}")
    for p in problems:
        print(f"layers: {p}", file=sys.stderr)
    if not problems:
        print(f"layers: {len(meta['packages'])} crates, every dependency points down the stack")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
