#!/usr/bin/env python3
"""Turns a Google Benchmark JSON of kvq_bench_append into a markdown table and a CSV.

usage: bench/summarize.py RUN.json [--csv OUT.csv --commit C --gpu NAME]
Medians only; GB/s counts the bytes the case must move (bench/append_bench.cuh), % is of the
copy-kernel bandwidth measured in the same process."""
import argparse
import csv
import json

ap = argparse.ArgumentParser()
ap.add_argument("json")
ap.add_argument("--csv")
ap.add_argument("--commit", default="")
ap.add_argument("--gpu", default="")
args = ap.parse_args()
run = json.load(open(args.json))
rows = []
for b in run["benchmarks"]:
    if b.get("aggregate_name") != "median":
        continue
    name = b["run_name"].removesuffix("/manual_time")
    _, fmt, case, *rest = name.split("/")
    rows.append(dict(kernel="append", format=fmt, case=case + ("/" + rest[0] if rest else ""),
                     time_us=b["real_time"], bytes=b["bytes"], gbps=b["GBps"],
                     pct_bw=100.0 * b["GBps"] / b["copy_GBps"], copy_gbps=b["copy_GBps"]))
print("| format | case | time (us) | bytes moved | GB/s | % of copy bw |")
print("| --- | --- | --- | --- | --- | --- |")
for r in rows:
    print(f"| {r['format']} | {r['case']} | {r['time_us']:.1f} | {r['bytes']/1e6:.2f} MB | {r['gbps']:.0f} | {r['pct_bw']:.1f} % |")
print(f"\ncopy-kernel bandwidth in this run: {rows[0]['copy_gbps']:.0f} GB/s (read + write); date {run['context']['date']}")
if args.csv:
    with open(args.csv, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["kernel", "format", "case", "time_us", "bytes", "gbps", "pct_bw", "gpu", "commit", "date"])
        for r in rows:
            w.writerow([r["kernel"], r["format"], r["case"], f"{r['time_us']:.2f}", int(r["bytes"]), f"{r['gbps']:.1f}",
                        f"{r['pct_bw']:.2f}", args.gpu, args.commit, run["context"]["date"][:10]])
