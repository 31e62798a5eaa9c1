#!/usr/bin/env python3
"""Turns a Google Benchmark JSON of kvq_bench_prefill into bench/results/prefill.csv (the issue's
columns) and a markdown table, with PyTorch SDPA's (bench/sdpa_prefill.py CSV) beside them.

usage: bench/prefill_csv.py RUN.json [RUN2.json ...] --csv OUT.csv [--sdpa SDPA.csv] --commit C --gpu NAME
Medians only; "prefill/" entries (the library's default kernel) go to the CSV, "prefill_alt/"
(the mma.sync kernel where the default is wgmma, else the other CTA height) and "prefill_wother/"
(the wgmma kernel with the K/V tile it does not default to; "prefill_w64/" in older binaries),
"prefill_ws/" (the warp-specialized kernel), "prefill_ws64/" (it with 64-token tiles where the
default tile is 128) and "prefill_wgmma/" (the wgmma kernel where the default is the
warp-specialized one) entries only to the table. tflops: the issue's count
4 chunk prefix D Hq + 2 chunk^2 D Hq over the time; ratio_vs_none: time(none) / time(format)."""
import argparse
import csv
import json

ap = argparse.ArgumentParser()
ap.add_argument("json", nargs="+")
ap.add_argument("--csv", required=True)
ap.add_argument("--sdpa")
ap.add_argument("--commit", default="")
ap.add_argument("--gpu", default="")
ap.add_argument("--default-kind", default="prefill",
                help="the entries of the library's default kernel: 'prefill' (the binary's default), or e.g. "
                     "'prefill_ws' for a run whose binary defaulted to another kernel than the final code")
args = ap.parse_args()
run = {"benchmarks": []}
for path in args.json:  # several runs: a later file's entry of the same name replaces an earlier one
    part = json.load(open(path))
    run["context"] = part["context"]
    run["benchmarks"] += part["benchmarks"]
# Medians of repetitions; an entry run without repetitions (no aggregates) counts with its one
# measurement (the mean of its iterations).
medians = {b["run_name"] for b in run["benchmarks"] if b.get("aggregate_name") == "median"}
picked = {}
for b in run["benchmarks"]:
    if not b["run_name"].startswith("prefill"):
        continue
    if b.get("aggregate_name") == "median" or (b["run_name"] not in medians and b.get("run_type") == "iteration"):
        picked[b["run_name"]] = b
rows = []
for b in picked.values():
    kind, fmt, chunk, prefix = b["run_name"].removesuffix("/manual_time").split("/")
    if args.default_kind != "prefill":  # the binary's default kernel was the two-warpgroup wgmma one
        kind = "prefill" if kind == args.default_kind else "prefill_wgmma" if kind == "prefill" else kind
    rows.append(dict(kind=kind, format=fmt, chunk=int(chunk.split(":")[1]), prefix=int(prefix.split(":")[1]),
                     time_us=b["real_time"], tflops=b["flops"] / b["real_time"] * 1e-6, rows=int(b["rows_per_cta"]),
                     kern=(("ws/" if b.get("kernel") == 2 else "wgmma/") + str(int(b["tile_tokens"]))) if b.get("wgmma")
                     else "mma.sync"))
none = {(r["chunk"], r["prefix"]): r["time_us"] for r in rows if r["format"] == "none" and r["kind"] == "prefill"}
sdpa = {}
if args.sdpa:
    for r in csv.DictReader(open(args.sdpa)):
        sdpa[(int(r["chunk"]), int(r["prefix"]))] = (float(r["time_us"]), float(r["tflops"]))
date = run["context"]["date"][:10]
with open(args.csv, "w", newline="") as f:
    w = csv.writer(f)
    w.writerow("kernel,format,head_dim,page,q_heads,kv_heads,batch,chunk,prefix,time_us,tflops,ratio_vs_none,gpu,commit,date"
               .split(","))
    for r in rows:
        if r["kind"] != "prefill":
            continue
        key = (r["chunk"], r["prefix"])
        w.writerow(["prefill", r["format"], 128, 64, 32, 8, 1, r["chunk"], r["prefix"], f"{r['time_us']:.2f}",
                    f"{r['tflops']:.1f}", f"{none[key] / r['time_us']:.3f}" if key in none else "", args.gpu,
                    args.commit, date])
order = ["none", "int8", "int4", "int2", "k4v2"]
others = ["prefill_wother", "prefill_w64", "prefill_wgmma", "prefill_ws", "prefill_ws64", "prefill_alt"]
present = [k for k in others if any(r["kind"] == k for r in rows)]
by = {(r["kind"], r["format"], r["chunk"], r["prefix"]): r for r in rows}
print("| format | chunk | prefix | kernel | time (us) | TFLOP/s | vs none | " + " | ".join(k.removeprefix("prefill_") + ": TFLOP/s" for k in present) + " | SDPA bf16 (us, TFLOP/s) |")
print("|" + " --- |" * (8 + len(present)))
for r in sorted((r for r in rows if r["kind"] == "prefill"), key=lambda r: (order.index(r["format"]), r["chunk"], r["prefix"])):
    key = (r["chunk"], r["prefix"])
    s = f"{sdpa[key][0]:.0f}, {sdpa[key][1]:.0f}" if key in sdpa else ""
    ratio = f"{none[key] / r['time_us']:.2f}x" if key in none else ""
    cells = []
    for k in present:
        x = by.get((k, r["format"], r["chunk"], r["prefix"]))
        cells.append(f"{x['tflops']:.0f} ({x['kern']}{', %d rows' % x['rows'] if k == 'prefill_alt' else ''})" if x else "")
    print(f"| {r['format']} | {r['chunk']} | {r['prefix']} | {r['kern']} | {r['time_us']:.0f} | {r['tflops']:.0f} | {ratio} | "
          + " | ".join(cells) + f" | {s} |")
print(f"\ndate {run['context']['date']}")
