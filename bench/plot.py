#!/usr/bin/env python3
"""Draws the plots of docs/PERFORMANCE.md from the CSVs in bench/results/ (needs matplotlib).

usage: python3 bench/plot.py [--results bench/results] [--out docs/img]

Writes, for each decode grid (decode.csv with sdpa_decode.csv on the H200, decode_h100.csv with
sdpa_decode_h100.csv on the H100):
  decode_time_<gpu>.png       time against context per format at q_len 1, one panel per batch,
                              PyTorch SDPA on dense bf16 from the same run beside them
  decode_bandwidth_<gpu>.png  GB/s as % of the copy kernel measured in the same run, batch 8 and 1,
                              q_len 1 (SDPA's rate over the same copy bandwidth)
and from prefill.csv (kvq's rows and the sdpa rows bench/prefill_csv.py puts beside them):
  prefill_tflops.png          TFLOP/s per format and shape beside the fastest PyTorch SDPA row of
                              prefill.csv of the same GPU (kernel "sdpa"; its backend+formulation
                              named on its bar: bench/sdpa_prefill.py)
SDPA's decode series is the fastest candidate of each shape in the sdpa_decode CSV.
Each title names the GPU, commit and date of the CSV rows it draws. Run it after replacing a CSV.
"""
import argparse
import csv
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

FORMATS = ["none", "int8", "int4", "k4v2", "int2"]
LABEL = {"none": "none (bf16)", "int8": "INT8", "int4": "INT4", "k4v2": "INT4 K / INT2 V", "int2": "INT2"}
COLOR = {"none": "#444444", "int8": "#1f77b4", "int4": "#2ca02c", "k4v2": "#9467bd", "int2": "#d62728",
         "sdpa": "#ff7f0e"}


def read(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def stamp(rows):
    gpus = sorted({r["gpu"] for r in rows})
    commits = sorted({r["commit"] for r in rows})
    dates = sorted({r["date"] for r in rows})
    return f"{', '.join(gpus)}, commit {', '.join(commits)}, {', '.join(dates)}"


def save(fig, path):
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Software": None})
    plt.close(fig)
    print("wrote", path)


def fastest(rows, key):
    """The row of least time_us for each key(row)."""
    best = {}
    for r in rows:
        k = key(r)
        if k not in best or float(r["time_us"]) < float(best[k]["time_us"]):
            best[k] = r
    return list(best.values())


def decode_plots(results, out, tag, decode_csv, sdpa_csv, dequant_csv):
    rows = read(os.path.join(results, decode_csv))
    sdpa = fastest(read(os.path.join(results, sdpa_csv)), lambda r: (r["batch"], r["context"], r["q_len"]))
    copy_bw = {float(r["copy_gbps"]) for r in read(os.path.join(results, dequant_csv))}
    assert len(copy_bw) == 1, "one copy bandwidth per run"
    copy_bw = copy_bw.pop()
    title = stamp(rows)
    batches = sorted({int(r["batch"]) for r in rows})

    fig, axes = plt.subplots(1, len(batches), figsize=(4.2 * len(batches), 4.0), squeeze=False)
    for ax, batch in zip(axes[0], batches):
        for fmt in FORMATS:
            pts = sorted((int(r["context"]), float(r["time_us"])) for r in rows
                         if r["format"] == fmt and int(r["batch"]) == batch and r["q_len"] == "1")
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color=COLOR[fmt], label=LABEL[fmt])
        pts = sorted((int(r["context"]), float(r["time_us"])) for r in sdpa
                     if int(r["batch"]) == batch and r["q_len"] == "1")
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "s--", color=COLOR["sdpa"], label="PyTorch SDPA, dense bf16")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("context (tokens)")
        ax.set_ylabel("time (us)")
        ax.set_title(f"batch {batch}, q_len 1")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"Decode attention, 32 query / 8 KV heads, head dim 128, page 64 ({title})", fontsize=10)
    save(fig, os.path.join(out, f"decode_time_{tag}.png"))

    fig, axes = plt.subplots(1, 2, figsize=(9.0, 4.0), squeeze=False)
    for ax, batch in zip(axes[0], (8, 1)):
        for fmt in FORMATS:
            pts = sorted((int(r["context"]), float(r["pct_bw"])) for r in rows
                         if r["format"] == fmt and int(r["batch"]) == batch and r["q_len"] == "1")
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color=COLOR[fmt], label=LABEL[fmt])
        pts = sorted((int(r["context"]), 100.0 * float(r["gbps"]) / copy_bw) for r in sdpa
                     if int(r["batch"]) == batch and r["q_len"] == "1")
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "s--", color=COLOR["sdpa"], label="PyTorch SDPA, dense bf16")
        ax.axhline(100.0, color="black", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("context (tokens)")
        ax.set_ylabel(f"% of copy kernel ({copy_bw:,.0f} GB/s)")
        ax.set_title(f"batch {batch}, q_len 1")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"Decode bytes moved per second ({title})", fontsize=10)
    save(fig, os.path.join(out, f"decode_bandwidth_{tag}.png"))


def prefill_plot(results, out):
    rows = [r for r in read(os.path.join(results, "prefill.csv")) if r["kernel"] == "prefill"]
    gpus = {r["gpu"] for r in rows}
    sdpa = fastest([r for r in read(os.path.join(results, "prefill.csv")) if r["kernel"] == "sdpa" and r["gpu"] in gpus],
                   lambda r: (r["chunk"], r["prefix"]))
    shapes = sorted({(int(r["chunk"]), int(r["prefix"])) for r in rows})
    series = FORMATS + ["sdpa"]
    width = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(10.0, 4.2))
    for i, name in enumerate(series):
        vals = []
        for chunk, prefix in shapes:
            src = sdpa if name == "sdpa" else [r for r in rows if r["format"] == name]
            hit = [float(r["tflops"]) for r in src if int(r["chunk"]) == chunk and int(r["prefix"]) == prefix]
            vals.append(hit[0] if hit else 0.0)
        xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(shapes))]
        label = "PyTorch SDPA, dense bf16, fastest row (backend on the bar)" if name == "sdpa" else LABEL[name]
        ax.bar(xs, vals, width, color=COLOR[name], label=label)
    for j, (chunk, prefix) in enumerate(shapes):
        backend = [r["backend"] for r in sdpa if int(r["chunk"]) == chunk and int(r["prefix"]) == prefix]
        if backend:
            ax.annotate(backend[0], (j + 0.4, 5), fontsize=6, ha="right", rotation=90)
    ax.set_xticks(range(len(shapes)))
    ax.set_xticklabels([f"chunk {c}\nprefix {p}" for c, p in shapes], fontsize=8)
    ax.set_ylabel("TFLOP/s")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8, ncol=3)
    ax.set_title(f"Chunked prefill, batch 1, 32 query / 8 KV heads, head dim 128, page 64 ({stamp(rows)})", fontsize=10)
    save(fig, os.path.join(out, "prefill_tflops.png"))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", default=os.path.join(here, "results"))
    ap.add_argument("--out", default=os.path.join(here, "..", "docs", "img"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    decode_plots(args.results, args.out, "h200", "decode.csv", "sdpa_decode.csv", "dequantize.csv")
    decode_plots(args.results, args.out, "h100", "decode_h100.csv", "sdpa_decode_h100.csv", "dequantize_h100.csv")
    prefill_plot(args.results, args.out)


if __name__ == "__main__":
    main()
