#!/usr/bin/env python3
"""Turns criterion's estimates into bench/python/hook_bench.py's JSON lines, and compares.

    bench_report.py lines CRITERION_DIR            -> one JSON object per line
    bench_report.py table RUST.jsonl PY.jsonl...   -> markdown: Rust vs Python (median of runs)

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


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "lines":
        sys.exit(lines(sys.argv[2]))
    if len(sys.argv) >= 4 and sys.argv[1] == "table":
        sys.exit(table(sys.argv[2], sys.argv[3:]))
    print(__doc__, file=sys.stderr)
    sys.exit(2)
