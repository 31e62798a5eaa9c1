#!/usr/bin/env python3
"""A/B of two (or more) benchmark binaries on the same cells, alternated.

  python3 bench/ab.py --filter 'decode/int8/' --rounds 2 --out DIR base=./bench_base new=./bench_new

Each round runs every binary once in the order given (so drift between rounds shows in the two
medians of one binary), each run `--benchmark_repetitions=R` with aggregates only; the median's
manual time of every cell is kept. Prints one line a cell: each binary's round medians, and the
change of the last binary's best round against the first's best round. Raw JSON goes to DIR.
"""
import argparse
import json
import os
import subprocess
import sys


def run(binary, flt, reps, min_time, out_json):
    cmd = [binary, f"--benchmark_filter={flt}", f"--benchmark_repetitions={reps}",
           "--benchmark_report_aggregates_only=true", f"--benchmark_min_time={min_time}",
           f"--benchmark_out={out_json}", "--benchmark_out_format=json"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(out_json) as f:
        data = json.load(f)
    scale = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}
    times = {}
    for b in data["benchmarks"]:
        if b.get("aggregate_name") == "median":
            name = b["run_name"]
            times[name] = b["real_time"] * scale[b["time_unit"]]
    return times


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--filter", required=True)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--min-time", default="0.05")
    ap.add_argument("--out", default=".")
    ap.add_argument("binaries", nargs="+", help="name=path")
    args = ap.parse_args()
    bins = [b.split("=", 1) for b in args.binaries]
    os.makedirs(args.out, exist_ok=True)
    res = {name: [] for name, _ in bins}
    for r in range(args.rounds):
        for name, path in bins:
            res[name].append(run(path, args.filter, args.reps, args.min_time, os.path.join(args.out, f"ab_{name}_{r}.json")))
    first, last = bins[0][0], bins[-1][0]
    for cell in sorted(res[first][0]):
        parts = []
        for name, _ in bins:
            parts.append(name + " " + " ".join(f"{rr.get(cell, float('nan')):.1f}" for rr in res[name]))
        a = min(rr[cell] for rr in res[first])
        b = min(rr.get(cell, float("inf")) for rr in res[last])
        print(f"{cell:<48} " + " | ".join(parts) + f" {100.0 * (b / a - 1.0):+.1f}%")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
