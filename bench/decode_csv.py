#!/usr/bin/env python3
"""Turns a Google Benchmark JSON of kvq_bench_decode into bench/results/decode.csv (the issue's
columns) and a markdown table, with PyTorch's fastest verified SDPA candidate of each shape
(bench/sdpa_decode.py CSV: one row per candidate) beside them.

usage: bench/decode_csv.py RUN.json --csv OUT.csv [--sdpa SDPA.csv] [--dequantize-csv OUT2.csv] --commit C --gpu NAME
Medians only. bytes: what the kernel must read (bench/decode_bench.cuh); pct_bw: % of the copy
kernel's bandwidth measured in the same process (reads + writes); speedup_vs_none: time(none) /
time(format). Runs that also measured the read-only bandwidth (bench_util.cuh read_bandwidth_gbps,
counter read_GBps: the faster of a read-only stream and a chunked read) get a "% of read bw" column
in the markdown table (the CSV's columns are fixed). --dequantize-csv writes the run's dequantize/
cells (kvq::dequantize to bf16: bytes = records read + rows written) with the copy kernel's
bandwidth of the run (copy_gbps)."""
import argparse
import csv
import json

ap = argparse.ArgumentParser()
ap.add_argument("json")
ap.add_argument("--csv", required=True)
ap.add_argument("--sdpa")
ap.add_argument("--dequantize-csv")
ap.add_argument("--commit", default="")
ap.add_argument("--gpu", default="")
args = ap.parse_args()
run = json.load(open(args.json))
rows, copy_bw, read_bw = [], [], []
for b in run["benchmarks"]:
    if b.get("aggregate_name") != "median" or not b["run_name"].startswith("decode/"):
        continue
    _, fmt, batch, ctx, qlen = b["run_name"].removesuffix("/manual_time").split("/")
    rows.append(dict(format=fmt, batch=int(batch.split(":")[1]), context=int(ctx.split(":")[1]),
                     q_len=int(qlen.split(":")[1]), time_us=b["real_time"], bytes=b["bytes"], gbps=b["GBps"],
                     pct_bw=100.0 * b["GBps"] / b["copy_GBps"],
                     pct_read=100.0 * b["GBps"] / b["read_GBps"] if "read_GBps" in b else None))
    copy_bw.append(b["copy_GBps"])
    if "read_GBps" in b:
        read_bw.append(b["read_GBps"])
none = {(r["batch"], r["context"], r["q_len"]): r["time_us"] for r in rows if r["format"] == "none"}
sdpa = {}
if args.sdpa:
    for r in csv.DictReader(open(args.sdpa)):
        key = (int(r["batch"]), int(r["context"]), int(r["q_len"]))  # the fastest verified candidate
        sdpa[key] = min(sdpa.get(key, float("inf")), float(r["time_us"]))
date = run["context"]["date"][:10]
with open(args.csv, "w", newline="") as f:
    w = csv.writer(f)
    w.writerow("kernel,format,head_dim,page,q_heads,kv_heads,batch,context,q_len,time_us,bytes,gbps,pct_bw,"
               "speedup_vs_none,gpu,commit,date".split(","))
    for r in rows:
        key = (r["batch"], r["context"], r["q_len"])
        w.writerow(["decode", r["format"], 128, 64, 32, 8, r["batch"], r["context"], r["q_len"], f"{r['time_us']:.2f}",
                    int(r["bytes"]), f"{r['gbps']:.1f}", f"{r['pct_bw']:.2f}",
                    f"{none[key] / r['time_us']:.3f}" if key in none else "", args.gpu, args.commit, date])
if args.dequantize_csv:
    with open(args.dequantize_csv, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow("kernel,format,head_dim,page,kv_heads,batch,context,time_us,bytes,gbps,pct_bw,copy_gbps,gpu,commit,date"
                   .split(","))
        for b in run["benchmarks"]:
            if b.get("aggregate_name") != "median" or not b["run_name"].startswith("dequantize/"):
                continue
            _, fmt, batch, ctx = b["run_name"].removesuffix("/manual_time").split("/")
            w.writerow(["dequantize", fmt, 128, 64, 8, int(batch.split(":")[1]), int(ctx.split(":")[1]),
                        f"{b['real_time']:.2f}", int(b["bytes"]), f"{b['GBps']:.1f}",
                        f"{100.0 * b['GBps'] / b['copy_GBps']:.2f}", f"{b['copy_GBps']:.1f}", args.gpu, args.commit, date])
has_read = bool(read_bw)
print("| format | q_len | batch | context | time (us) | bytes | GB/s | % of copy bw |" + (" % of read bw |" if has_read else "")
      + " speedup vs none | SDPA bf16 (us) |")
print("| --- " * (11 if has_read else 10) + "|")
for r in sorted(rows, key=lambda r: (r["q_len"], ["none", "int8", "int4", "int2", "k4v2"].index(r["format"]),
                                     r["batch"], r["context"])):
    key = (r["batch"], r["context"], r["q_len"])
    s = f"{sdpa[key]:.0f}" if key in sdpa else ""
    sp = f"{none[key] / r['time_us']:.2f}x" if key in none else ""
    print(f"| {r['format']} | {r['q_len']} | {r['batch']} | {r['context']} | {r['time_us']:.0f} | "
          f"{r['bytes'] / 1e6:.1f} MB | {r['gbps']:.0f} | {r['pct_bw']:.1f} % |"
          + (f" {r['pct_read']:.1f} % |" if has_read else "") + f" {sp} | {s} |")
if copy_bw:
    print(f"\ncopy-kernel bandwidth in this run: {min(copy_bw):.0f}-{max(copy_bw):.0f} GB/s; date {run['context']['date']}")
if read_bw:
    print(f"read-only bandwidth in this run: {min(read_bw):.0f}-{max(read_bw):.0f} GB/s")
