#!/usr/bin/env python3
"""Turns criterion's estimates into bench/python/hook_bench.py's JSON lines, and compares.

    bench_report.py lines CRITERION_DIR            -> one JSON object per line
    bench_report.py table RUST.jsonl PY.jsonl...   -> markdown: Rust vs Python (median of runs)
    bench_report.py rounds ROUND_DIR...            -> markdown: Python, bub-rs and the floor,
                                                      each a min–max over the rounds

Fields and case names are hook_bench.py's: case, plugins, iterations,
ns_per_call (criterion's median estimate; iterations = timed iterations).
"""
import json
import pathlib
import statistics
import sys


def lines(root: str) -> int:
    for bench in sorted(pathlib.Path(root).glob("**/new/benchmark.json")):
        meta = json.loads(bench.read_text())
        est = json.loads((bench.parent / "estimates.json").read_text())
        sample = json.loads((bench.parent / "sample.json").read_text())
        case = meta["group_id"]
        plugins = int(meta["value_str"]) if meta.get("value_str") else 0
        if case.endswith("/0") and not meta.get("value_str"):
            case, plugins = case[:-2], 0
        print(json.dumps({"case": case, "plugins": plugins, "iterations": int(sum(sample["iters"])),
                          "ns_per_call": round(est["median"]["point_estimate"], 1)}))
    return 0


def load(paths):
    runs = {}
    for p in paths:
        for line in open(p):
            if line.startswith("{"):
                d = json.loads(line)
                runs.setdefault((d["case"], d["plugins"]), []).append(d["ns_per_call"])
    return {k: statistics.median(v) for k, v in runs.items()}


def table(rust_path: str, py_paths) -> int:
    rust, py = load([rust_path]), load(py_paths)
    print("| case | N | Rust µs | Python µs | Python / Rust |")
    print("|---|---:|---:|---:|---:|")
    for (case, n), r in sorted(rust.items()):
        p = py.get((case, n))
        ratio = f"{p / r:,.0f}×" if p else "–"
        ps = f"{p / 1000:,.3f}" if p else "–"
        print(f"| `{case}` | {n} | {r / 1000:,.3f} | {ps} | {ratio} |")
    return 0


def rounds(dirs) -> int:
    """One row per case both sides ran: each round's Python (median of its
    runs), bub-rs and floor (the lean floor where there is one), ratios
    paired within a round, shown as min–max over the rounds."""
    per = []
    for d in dirs:
        d = pathlib.Path(d)
        floor_lines = load([d / "floor.jsonl"]) if (d / "floor.jsonl").exists() else {}
        floor = {}
        for (case, n), v in floor_lines.items():
            if case.startswith("floor/lean/"):
                floor[(case[len("floor/lean/"):], n)] = v
            elif case.startswith("floor/"):
                floor.setdefault((case[len("floor/"):], n), v)
        per.append((load([d / "rust.jsonl"]), load(sorted(d.glob("python*.jsonl"))), floor))

    def span(values, fmt):
        lo, hi = min(values), max(values)
        return fmt(lo) if fmt(lo) == fmt(hi) else f"{fmt(lo)}–{fmt(hi)}"

    us = lambda v: f"{v / 1000:,.2f}"  # noqa: E731
    times = lambda v: f"{v:,.0f}×" if v >= 10 else f"{v:,.1f}×"  # noqa: E731
    print("| case | N | Python Bub µs | bub-rs µs | Python ÷ bub-rs | floor µs | bub-rs ÷ floor |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    keys = sorted(set.intersection(*(set(r) & set(p) for r, p, _ in per)))
    for key in keys:
        py = [p[key] for _, p, _ in per]
        rs = [r[key] for r, _, _ in per]
        fl = [f[key] for _, _, f in per if key in f]
        row = [f"`{key[0]}`", str(key[1]), span(py, us), span(rs, us), span([p / r for p, r in zip(py, rs)], times)]
        if len(fl) == len(per):
            row += [span(fl, us), span([r / f for r, f in zip(rs, fl)], times)]
        else:
            row += ["–", "–"]
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "rounds":
        sys.exit(rounds(sys.argv[2:]))
    if len(sys.argv) >= 3 and sys.argv[1] == "lines":
        sys.exit(lines(sys.argv[2]))
    if len(sys.argv) >= 4 and sys.argv[1] == "table":
        sys.exit(table(sys.argv[2], sys.argv[3:]))
    print(__doc__, file=sys.stderr)
    sys.exit(2)
