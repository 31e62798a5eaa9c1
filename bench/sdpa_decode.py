#!/usr/bin/env python3
"""PyTorch SDPA (bf16, dense KV) on the decode shapes of kvq's decode benchmark: the baseline the
issue compares against. CUDA events, L2 flushed before each timed call, median of 20.

usage: python3 bench/sdpa_decode.py [--csv OUT]
Bytes counted: K and V read once (2 x batch x context x 8 x 128 x 2 B) + q + out."""
import argparse

import torch
import torch.nn.functional as F

from sdpa_timing import flush_buffer, median_us

ap = argparse.ArgumentParser()
ap.add_argument("--csv")
args = ap.parse_args()
dev = torch.device("cuda")
flush = flush_buffer(dev)
rows = []
for q_len, batch, ctx in [(q, b, c) for q in (1, 4) for b in (1, 8, 32, 64) for c in (4096, 32768, 131072)]:
        hq, hk, d = 32, 8, 128
        q = torch.randn(batch, hq, q_len, d, device=dev, dtype=torch.bfloat16)
        k = torch.randn(batch, hk, ctx, d, device=dev, dtype=torch.bfloat16)
        v = torch.randn(batch, hk, ctx, d, device=dev, dtype=torch.bfloat16)
        fn = lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        t = median_us(fn, flush, 20)
        nbytes = 2 * batch * ctx * hk * d * 2 + 2 * batch * q_len * hq * d * 2
        rows.append((batch, ctx, q_len, t, nbytes, nbytes / t / 1e3))
        print(f"sdpa bf16 batch {batch} context {ctx} q_len {q_len}: {t:.1f} us, {nbytes / 1e6:.1f} MB, "
              f"{nbytes / t / 1e3:.0f} GB/s")
        del q, k, v
        torch.cuda.empty_cache()
if args.csv:
    with open(args.csv, "w") as f:
        f.write("kernel,format,batch,context,q_len,time_us,bytes,gbps\n")
        for b, c, ql, t, n, g in rows:
            f.write(f"sdpa,bf16,{b},{c},{ql},{t:.2f},{n},{g:.1f}\n")
