#!/usr/bin/env python3
"""PyTorch SDPA (bf16, dense KV) on the chunked-prefill shapes of kvq's prefill benchmark: a chunk
of new queries over prefix + chunk keys, causal aligned to the bottom right (each query sees the
whole prefix and the chunk up to itself). CUDA events, L2 flushed before each timed call, median
of 10; the fastest of PyTorch's fused backends (cuDNN, flash, memory-efficient) that takes the shape. FLOPs counted as the issue defines them: 4 chunk prefix D Hq + 2 chunk^2 D Hq.

usage: python3 bench/sdpa_prefill.py [--csv OUT]
K/V are expanded to the 32 query heads before timing (SDPA's fused kernels take the bias with
equal head counts), so the time is the attention alone."""
import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.bias import causal_lower_right

from sdpa_timing import flush_buffer, median_us

ap = argparse.ArgumentParser()
ap.add_argument("--csv")
args = ap.parse_args()
dev = torch.device("cuda")
flush = flush_buffer(dev)
rows = []
hq, hk, d = 32, 8, 128
for chunk, prefix in [(c, p) for c in (2048, 8192) for p in (0, 30720, 122880)]:
    q = torch.randn(1, hq, chunk, d, device=dev, dtype=torch.bfloat16)
    k = torch.randn(1, hk, prefix + chunk, d, device=dev, dtype=torch.bfloat16).repeat_interleave(hq // hk, dim=1)
    v = torch.randn(1, hk, prefix + chunk, d, device=dev, dtype=torch.bfloat16).repeat_interleave(hq // hk, dim=1)
    bias = causal_lower_right(chunk, prefix + chunk)
    best = None
    for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION):
        def fn():
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        try:
            t = median_us(fn, flush, 10)
        except RuntimeError:
            continue  # this backend does not take the shape / bias
        if best is None or t < best[0]:
            best = (t, backend.name)
    t, name = best
    flops = 4.0 * chunk * prefix * d * hq + 2.0 * chunk * chunk * d * hq
    rows.append((chunk, prefix, t, flops / t / 1e6, name))
    print(f"sdpa bf16 chunk {chunk} prefix {prefix}: {t:.1f} us, {flops / t / 1e6:.1f} TFLOP/s ({name})")
    del q, k, v
    torch.cuda.empty_cache()
if args.csv:
    with open(args.csv, "w") as f:
        f.write("kernel,format,chunk,prefix,time_us,tflops,backend\n")
        for c, p, t, tf, name in rows:
            f.write(f"sdpa,bf16,{c},{p},{t:.2f},{tf:.1f},{name}\n")
