#!/usr/bin/env python3
"""Lists the import circles between the modules of each crate: groups of
files that name each other through `crate::…` or `super::…` paths, so
that none can be understood (or moved to another crate) without the
others. A measurement for reviews, not a CI gate.

    python3 scripts/module-cycles.py [crates/…]     (default: every crates/*)
"""

import re
import sys
from pathlib import Path

PATH = re.compile(r"\b(crate|super)((?:::[a-z_][a-z0-9_]*)+)")


def modules(src: Path) -> dict[str, Path]:
    """Module path (`a::b`) → its file, for every .rs file under src."""
    out = {}
    for f in src.rglob("*.rs"):
        parts = list(f.relative_to(src).with_suffix("").parts)
        if parts[-1] in ("mod", "lib", "main"):
            parts = parts[:-1]
        out["::".join(parts)] = f
    return out


def strip_comments(text: str) -> str:
    return "\n".join(line.split("//", 1)[0] for line in text.splitlines())


def edges(mods: dict[str, Path]) -> dict[str, set[str]]:
    graph = {m: set() for m in mods}
    for m, f in mods.items():
        text = strip_comments(f.read_text())
        # #[cfg(test)] blocks inline in a file are the file's own tests: skip
        # from the first `mod tests {` on (a test names what it tests).
        text = text.split("#[cfg(test)]\nmod tests {")[0]
        here = m.split("::") if m else []
        for root, rest in PATH.findall(text):
            segs = [s for s in rest.split("::") if s]
            if root == "crate":
                base = []
            else:
                # `super` is the parent module, for a `mod.rs` as for any file.
                base = here[:-1]
                while segs and segs[0] == "super":
                    segs, base = segs[1:], base[:-1]
            target = base + segs
            while target and "::".join(target) not in mods:
                target = target[:-1]
            t = "::".join(target)
            if t in mods and t != m and t != "":
                graph[m].add(t)
    return graph


def sccs(graph: dict[str, set[str]]) -> list[list[str]]:
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return out


def main() -> int:
    roots = [Path(a) for a in sys.argv[1:]] or sorted(Path("crates").glob("*/"))
    total = 0
    for crate in roots:
        src = crate / "src"
        if not src.is_dir():
            continue
        circles = sccs(edges(modules(src)))
        total += len(circles)
        for c in circles:
            print(f"{crate.name}: {len(c)} modules: {', '.join(c)}")
    print(f"{total} import circle(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
