#!/usr/bin/env python3
"""PyTorch's best on the chunked-prefill shapes of kvq's prefill benchmark (bench/prefill_bench.cuh):
a chunk of C new queries over a prefix of P cached tokens plus the chunk, causal aligned to the
bottom right, bf16, head dim 128, 32 query / 8 KV heads, batch 1, dense K/V.

Times every backend x formulation x GQA handling of bench/sdpa_forms.py (flash, efficient, cuDNN,
math where it fits, FlexAttention; one call with the backend's bottom-right causal mask, one call
with an explicit mask, or the prefix part + the chunk's causal square merged by log-sum-exp; K/V at
8 heads or expanded to 32), each checked against an fp32 reference first (skips are logged with
their reason). CUDA events, L2 flushed before each timed call, 3 warm-ups, median of --reps.
FLOPs as kvq counts them (bench/prefill_bench.cuh): 4 chunk prefix D Hq + 2 chunk^2 D Hq.

usage: python3 bench/sdpa_prefill.py [--csv OUT] [--shapes 8192x122880,2048x30720] [--reps 10] [--only cudnn+split+gqa,...]
                                     [--budget-s S] [--commit C] [--no-flex] [--smoke]
--csv: one row per verified candidate, in bench/results/prefill.csv's columns (kernel "sdpa",
backend = the candidate's name, e.g. cudnn+split+gqa); bench/prefill_csv.py --sdpa puts the
fastest of each shape into prefill.csv. The CSV is written after every shape, so a run cut short
keeps what it measured. --budget-s: candidates not started by then are skipped (logged).
--smoke: a CPU run at tiny shapes that exercises the checks, the merge and the CSV (no timing
worth reading)."""
import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sdpa_forms as forms  # noqa: E402
from sdpa_timing import flush_buffer, stamp  # noqa: E402

COLUMNS = ("kernel,format,head_dim,page,q_heads,kv_heads,batch,chunk,prefix,time_us,tflops,ratio_vs_none,"
           "gpu,commit,date,backend,command").split(",")
HQ, HK, D = 32, 8, 128
# The two shapes first, then the rest of kvq's grid (prefill_bench.cuh: chunk 2048 / 8192 x
# prefix 0 / 30720 / 122880).
SHAPES = [(8192, 122880), (2048, 30720), (2048, 0), (2048, 122880), (8192, 0), (8192, 30720)]
SMALL = (256, 384)  # chunk, prefix of the check that runs before a candidate's first timing


def flops(chunk, prefix):
    return 4.0 * chunk * prefix * D * HQ + 2.0 * chunk * chunk * D * HQ


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--csv")
    ap.add_argument("--shapes", help="CxP,... (default: kvq's six)")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--budget-s", type=float, default=0.0)
    ap.add_argument("--commit", default="")
    ap.add_argument("--no-flex", action="store_true")
    ap.add_argument("--only", default="", help="backend+formulation+gqa,... : time only these candidates "
                    "(e.g. the fastest of an earlier full run, beside kvq in the same device call)")
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args()
    t_start = time.monotonic()
    dev = torch.device("cpu" if args.smoke else "cuda")
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")] if args.shapes else SHAPES
    small = SMALL
    if args.smoke:
        shapes = shapes if args.shapes else [(128, 256), (128, 0)]
        small = (64, 128)
    flush = flush_buffer(dev)
    gpu, commit, date, command = stamp(dev, args.commit)
    print(f"torch {torch.__version__}, {gpu}, commit {commit or '?'}, {date}")
    if dev.type == "cuda":
        print(f"cuDNN {torch.backends.cudnn.version()}")
    log = lambda s: print(s, flush=True)  # noqa: E731
    checked = {}  # (candidate, small shape) -> the small check's Skip reason, or None
    deadline = t_start + args.budget_s if args.budget_s else None
    rows = []
    for chunk, prefix in shapes:
        print(f"\nchunk {chunk} prefix {prefix}: {flops(chunk, prefix) / 1e12:.2f} TFLOP", flush=True)
        pb = forms.Problem(1, HQ, HK, D, chunk, prefix, dev, split_views=False)
        small_p = small[1] if prefix else 0

        def on_result(t, nm, err):
            tf = flops(chunk, prefix) / t / 1e6
            log(f"  {nm:28s} {t:10.1f} us {tf:7.1f} TFLOP/s  (error {err:.2g})")
            rows.append(["sdpa", "bf16", D, "", HQ, HK, 1, chunk, prefix, f"{t:.2f}", f"{tf:.1f}", "", gpu, commit,
                         date, nm, command])
        results, skipped = forms.time_all(
            pb, [c for c in forms.candidates(chunk, prefix, flex=not args.no_flex)
                 if not args.only or "+".join(c) in args.only.split(",")],
            lambda: forms.Problem(1, HQ, HK, D, small[0], small_p, dev, split_views=False, seed=1), (small[0], small_p),
            checked, flush, args.reps, deadline, log, on_result)
        del pb
        forms.finish_shape(results, skipped, log, lambda t: f"{flops(chunk, prefix) / t / 1e6:.1f} TFLOP/s", dev,
                           args.csv, COLUMNS, rows)
    print(f"\n{len(rows)} rows, {time.monotonic() - t_start:.0f} s")


if __name__ == "__main__":
    main()
