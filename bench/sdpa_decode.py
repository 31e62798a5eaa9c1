#!/usr/bin/env python3
"""PyTorch's best on the decode shapes of kvq's decode benchmark (bench/decode_bench.cuh), the
baseline the issue compares against: q_len new tokens per sequence over a context of `context`
keys (the new tokens' own included, causal among them, aligned to the bottom right), bf16, head
dim 128, 32 query / 8 KV heads, dense contiguous K/V (SDPA takes no paged cache).

Times every backend x formulation x GQA handling of bench/sdpa_forms.py: q_len 1 needs no mask
(flash, cuDNN, efficient, math, FlexAttention); q_len 4 runs the backends' bottom-right causal
mask, an explicit mask, or the prefix + the 4 x 4 causal square merged by log-sum-exp; K/V at
8 heads or expanded to 32 where that fits. Each is checked against an fp32 reference first
(skips are logged with their reason). CUDA events, L2 flushed before each timed call, 3 warm-ups,
median of --reps.

usage: python3 bench/sdpa_decode.py [--csv OUT] [--shapes QxBxCTX,...] [--reps 20] [--budget-s S]
                                    [--commit C] [--no-flex] [--smoke]
--csv: one row per verified candidate (kernel,format,batch,context,q_len,time_us,bytes,gbps, then
backend, gpu, commit, date, command); bench/decode_csv.py and bench/plot.py take each shape's
fastest. Bytes counted: K and V read once (2 x batch x context x 8 x 128 x 2 B) + q + out, whatever
the candidate reads (an expanded K/V reads 4x that). Written after every shape."""
import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sdpa_forms as forms  # noqa: E402
from sdpa_timing import flush_buffer, stamp  # noqa: E402

COLUMNS = "kernel,format,batch,context,q_len,time_us,bytes,gbps,backend,gpu,commit,date,command".split(",")
HQ, HK, D = 32, 8, 128
SHAPES = [(q, b, c) for q in (1, 4) for b in (1, 8, 32, 64) for c in (4096, 32768, 131072)]
SMALL = (2, 512)  # batch, context of the check that runs before a candidate's first timing


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--csv")
    ap.add_argument("--shapes", help="QxBxCTX,... (q_len x batch x context; default: kvq's grid)")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--budget-s", type=float, default=0.0)
    ap.add_argument("--commit", default="")
    ap.add_argument("--no-flex", action="store_true")
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args()
    t_start = time.monotonic()
    dev = torch.device("cpu" if args.smoke else "cuda")
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")] if args.shapes else SHAPES
    if args.smoke and not args.shapes:
        shapes = [(1, 2, 1024), (4, 2, 1024)]
    flush = flush_buffer(dev)
    gpu, commit, date, command = stamp(dev, args.commit)
    print(f"torch {torch.__version__}, {gpu}, commit {commit or '?'}, {date}")
    log = lambda s: print(s, flush=True)  # noqa: E731
    checked = {}
    deadline = t_start + args.budget_s if args.budget_s else None
    rows = []
    for q_len, batch, ctx in shapes:
        nbytes = 2 * batch * ctx * HK * D * 2 + 2 * batch * q_len * HQ * D * 2
        print(f"\nq_len {q_len} batch {batch} context {ctx}: {nbytes / 1e6:.1f} MB", flush=True)
        pb = forms.Problem(batch, HQ, HK, D, q_len, ctx - q_len, dev, split_views=True)

        def on_result(t, nm, err):
            log(f"  {nm:28s} {t:10.1f} us {nbytes / t / 1e3:7.0f} GB/s  (error {err:.2g})")
            rows.append(["sdpa", "bf16", batch, ctx, q_len, f"{t:.2f}", nbytes, f"{nbytes / t / 1e3:.1f}", nm, gpu, commit,
                         date, command])
        results, skipped = forms.time_all(
            pb, forms.candidates(q_len, ctx - q_len, flex=not args.no_flex),
            lambda: forms.Problem(SMALL[0], HQ, HK, D, q_len, SMALL[1] - q_len, dev, split_views=True, seed=1), q_len,
            checked, flush, args.reps, deadline, log, on_result)
        del pb
        forms.finish_shape(results, skipped, log, lambda t: f"{nbytes / t / 1e3:.0f} GB/s", dev, args.csv, COLUMNS, rows)
    print(f"\n{len(rows)} rows, {time.monotonic() - t_start:.0f} s")


if __name__ == "__main__":
    main()
