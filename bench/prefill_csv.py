#!/usr/bin/env python3
"""Turns a Google Benchmark JSON of kvq_bench_prefill into bench/results/prefill.csv (the issue's
columns) and a markdown table, with PyTorch's fastest verified SDPA formulation of each shape
(bench/sdpa_prefill.py CSV) beside them.

usage: bench/prefill_csv.py RUN.json [RUN2.json ...] --csv OUT.csv [--sdpa SDPA.csv] --commit C --gpu NAME
       bench/prefill_csv.py --kvq-csv bench/results/prefill.csv --sdpa SDPA.csv --csv OUT.csv
Medians only; "prefill/" entries (the library's default kernel) go to the CSV, "prefill_alt/"
(the mma.sync kernel where the default is wgmma, else the other CTA height) and "prefill_wother/"
(the wgmma kernel with the K/V tile it does not default to; "prefill_w64/" in older binaries),
"prefill_ws/" (the warp-specialized kernel), "prefill_ws64/" (it with 64-token tiles where the
default tile is 128) and "prefill_wgmma/" (the wgmma kernel where the default is the
warp-specialized one) entries only to the table. tflops: the issue's count
4 chunk prefix D Hq + 2 chunk^2 D Hq over the time; ratio_vs_none: time(none) / time(row), for an
sdpa row only where kvq's "none" row is of the same GPU.
--kvq-csv: kvq's rows (kernel "prefill") from an existing prefill.csv instead of a JSON, as they are
(to replace the sdpa rows alone). backend: "kvq" for kvq's rows, the candidate's name for sdpa rows
(backend+formulation+gqa, bench/sdpa_forms.py); command: what produced the row (--command for kvq's
rows, the sdpa CSV's own for its rows). Older sdpa CSVs without gpu / commit / date / command
columns take --gpu / --commit / the run's date."""
import argparse
import csv
import json

ap = argparse.ArgumentParser()
ap.add_argument("json", nargs="*")
ap.add_argument("--kvq-csv")
ap.add_argument("--csv", required=True)
ap.add_argument("--sdpa")
ap.add_argument("--commit", default="")
ap.add_argument("--gpu", default="")
ap.add_argument("--command", default="build/bench/kvq_bench_prefill (docs/PERFORMANCE.md, Chunked prefill)")
ap.add_argument("--default-kind", default="prefill",
                help="the entries of the library's default kernel: 'prefill' (the binary's default), or e.g. "
                     "'prefill_ws' for a run whose binary defaulted to another kernel than the final code")
args = ap.parse_args()
if bool(args.json) == bool(args.kvq_csv):
    ap.error("give RUN.json files or --kvq-csv, not both")
COLUMNS = ("kernel,format,head_dim,page,q_heads,kv_heads,batch,chunk,prefix,time_us,tflops,ratio_vs_none,gpu,commit,"
           "date,backend,command").split(",")
run = {"benchmarks": [], "context": {"date": ""}}
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
out = []  # prefill.csv's rows as dicts
if args.kvq_csv:
    for r in csv.DictReader(open(args.kvq_csv)):
        if r["kernel"] == "prefill":
            out.append({c: r.get(c, "") for c in COLUMNS})
            out[-1]["backend"] = out[-1]["backend"] or "kvq"
            rows.append(dict(kind="prefill", format=r["format"], chunk=int(r["chunk"]), prefix=int(r["prefix"]),
                             time_us=float(r["time_us"]), tflops=float(r["tflops"]), rows=0, kern=""))
date = run["context"]["date"][:10]
for r in rows:
    if r["kind"] == "prefill" and not args.kvq_csv:
        out.append(dict(zip(COLUMNS, ["prefill", r["format"], 128, 64, 32, 8, 1, r["chunk"], r["prefix"], f"{r['time_us']:.2f}",
                                      f"{r['tflops']:.1f}", "", args.gpu, args.commit, date, "kvq", args.command])))
none = {(int(r["chunk"]), int(r["prefix"])): (float(r["time_us"]), r["gpu"]) for r in out if r["format"] == "none"}
for r in out:
    key = (int(r["chunk"]), int(r["prefix"]))
    if key in none and not r["ratio_vs_none"]:
        r["ratio_vs_none"] = f"{none[key][0] / float(r['time_us']):.3f}"
sdpa = {}  # (chunk, prefix) -> the fastest sdpa row
if args.sdpa:
    for r in csv.DictReader(open(args.sdpa)):
        key = (int(r["chunk"]), int(r["prefix"]))
        if key not in sdpa or float(r["time_us"]) < float(sdpa[key]["time_us"]):
            sdpa[key] = r
for key, r in sorted(sdpa.items()):
    gpu = r.get("gpu") or args.gpu
    ratio = f"{none[key][0] / float(r['time_us']):.3f}" if key in none and none[key][1] == gpu else ""
    out.append(dict(zip(COLUMNS, ["sdpa", "bf16", 128, "", 32, 8, 1, key[0], key[1], f"{float(r['time_us']):.2f}",
                                  f"{float(r['tflops']):.1f}", ratio, gpu, r.get("commit") or args.commit,
                                  r.get("date") or date, r.get("backend", ""), r.get("command", "")])))
with open(args.csv, "w", newline="") as f:
    w = csv.DictWriter(f, COLUMNS)
    w.writeheader()
    w.writerows(out)
none = {k: t for k, (t, _) in none.items()}
order = ["none", "int8", "int4", "int2", "k4v2"]
others = ["prefill_wother", "prefill_w64", "prefill_wgmma", "prefill_ws", "prefill_ws64", "prefill_alt"]
present = [k for k in others if any(r["kind"] == k for r in rows)]
by = {(r["kind"], r["format"], r["chunk"], r["prefix"]): r for r in rows}
print("| format | chunk | prefix | kernel | time (us) | TFLOP/s | vs none | " + " | ".join(k.removeprefix("prefill_") + ": TFLOP/s" for k in present) + " | fastest SDPA bf16 (us, TFLOP/s, backend) |")
print("|" + " --- |" * (8 + len(present)))
for r in sorted((r for r in rows if r["kind"] == "prefill"), key=lambda r: (order.index(r["format"]), r["chunk"], r["prefix"])):
    key = (r["chunk"], r["prefix"])
    s = f"{float(sdpa[key]['time_us']):.0f}, {float(sdpa[key]['tflops']):.0f}, {sdpa[key].get('backend', '')}" if key in sdpa else ""
    ratio = f"{none[key] / r['time_us']:.2f}x" if key in none else ""
    cells = []
    for k in present:
        x = by.get((k, r["format"], r["chunk"], r["prefix"]))
        cells.append(f"{x['tflops']:.0f} ({x['kern']}{', %d rows' % x['rows'] if k == 'prefill_alt' else ''})" if x else "")
    print(f"| {r['format']} | {r['chunk']} | {r['prefix']} | {r['kern']} | {r['time_us']:.0f} | {r['tflops']:.0f} | {ratio} | "
          + " | ".join(cells) + f" | {s} |")
print(f"\ndate {run['context']['date'] or '(kvq rows from ' + args.kvq_csv + ')'}")
