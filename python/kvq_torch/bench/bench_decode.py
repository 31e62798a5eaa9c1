#!/usr/bin/env python3
"""Decode attention through kvq_torch (torch.ops.kvq.decode) against PyTorch SDPA on dense bf16
K/V and FlashInfer's paged decode of bf16 pages (when flashinfer is importable; its output is
checked against fp32 attention first), on the decode grid of
bench/decode_bench.cuh: bf16, head dim 128, 32 query / 8 KV heads, page 64, R 128, one new token.

The cell is the C++ benchmark's (bench/decode_bench.cuh, DecodeCase::run): BATCHxTOKENS means
`batch` sequences of `tokens` = context tokens after the step, i.e. a prefix of tokens - 1 in the
cache and one new token; the plan is kvq::plan_decode's for exactly that shape (batch, q_len 1,
total_q = batch, max_tokens = context) and the decode runs with the cold length after the step's
append (as the C++ benchmark does: no page turns cold inside the timed call). Both plans (the
package's and the one the C++ benchmark's DecodeShape gives) are printed: split and kernel.
Timing as the C++ benchmark times it: CUDA events around one call after an L2 flush, median of
--iters. Two kvq numbers: `eager` (the op called from Python, dispatcher and checks included:
what an engine pays) and `graph` (the same call replayed from a CUDA graph: the kernels alone).
The package's overhead is eager over the C++ benchmark's kvq::decode time: --cxx-csv gives a CSV
of kvq_bench_decode (bench/results/decode_h100.csv layout) to compare with, same GPU model only.

    python3 bench_decode.py --grid 8x131072 --formats int2,none --csv out.csv
"""
import argparse
import csv
import math
import sys
from pathlib import Path

import torch

import kvq_torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
from sdpa_timing import median_us  # noqa: E402  (the repository's CUDA-event timing, shared with the SDPA peers)

FMT = {"none": ("none", "none"), "int8": ("int8", "int8"), "int4": ("int4", "int4"), "int2": ("int2", "int2"),
       "k4v2": ("int4", "int2")}


def fill(cache, seqs, tokens, gen_chunk=16384):
    """Random K/V for `tokens` tokens of every sequence, appended in chunks (no attention)."""
    done = 0
    while done < tokens:
        n = min(gen_chunk, tokens - done)
        step = cache.begin(seqs, [n] * len(seqs))
        k = torch.randn(n * len(seqs), cache.kv_heads, cache.head_dim, device="cuda", dtype=torch.bfloat16)
        cache.append(0, k, k * 0.5, step)
        cache.end(step)
        done += n


def cxx_time(path, fmt, batch, tokens, gpu):
    if not path:
        return None
    with open(path) as f:
        for r in csv.DictReader(f):
            if (r["kernel"], r["format"], r["head_dim"], r["page"], r["q_heads"], r["kv_heads"], r["batch"], r["context"],
                    r["q_len"]) == ("decode", fmt, "128", "64", "32", "8", str(batch), str(tokens), "1") and r["gpu"] == gpu:
                return float(r["time_us"])
    return None


def flashinfer_decode(batch, tokens, page=64):
    """FlashInfer's paged decode (BatchDecodeWithPagedKVCacheWrapper, NHD layout) over dense bf16
    pages of `page` tokens holding `tokens` tokens per sequence (32 query / 8 KV heads, D 128).
    Returns (run, q, dense K of sequence 0 [8][tokens][128], dense V likewise)."""
    import flashinfer
    pages = (tokens + page - 1) // page
    kv = torch.randn(batch * pages, 2, page, 8, 128, device="cuda", dtype=torch.bfloat16)
    indptr = torch.arange(batch + 1, device="cuda", dtype=torch.int32) * pages
    indices = torch.arange(batch * pages, device="cuda", dtype=torch.int32)
    last = torch.full((batch,), tokens - (pages - 1) * page, device="cuda", dtype=torch.int32)
    ws = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD")
    w.plan(indptr, indices, last, 32, 8, 128, page, q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)
    q = torch.randn(batch, 32, 128, device="cuda", dtype=torch.bfloat16)
    seq0 = kv[:pages].reshape(pages, 2, page, 8, 128)
    k0 = seq0[:, 0].reshape(pages * page, 8, 128)[:tokens].transpose(0, 1)
    v0 = seq0[:, 1].reshape(pages * page, 8, 128)[:tokens].transpose(0, 1)
    return (lambda: w.run(q, kv)), q, k0, v0


def flashinfer_us(batch, tokens, flush, iters):
    """FlashInfer's time for the cell, after checking its output for sequence 0 against fp32
    attention over the same K/V (bf16 tolerance). None (with the reason printed) if it fails."""
    try:
        run, q, k0, v0 = flashinfer_decode(batch, tokens)
        out = run()
        ref = torch.nn.functional.scaled_dot_product_attention(
            q[:1].float().view(1, 32, 1, 128), k0.float()[None], v0.float()[None], enable_gqa=True).view(32, 128)
        err = (out[0].float() - ref).abs().max().item()
        if not err < 2e-2:
            print("  ** FlashInfer output differs from the fp32 reference by %.3g: not timed" % err)
            return None
        del ref, k0, v0
        return median_us(run, flush, iters, warmup=0)
    except Exception as e:  # an API or build problem of the installed FlashInfer: reported, not hidden
        print("  ** FlashInfer failed: %s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else ""))
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--grid", default="1x4096,8x4096,1x131072,8x131072", help="BATCHxTOKENS,...")
    ap.add_argument("--formats", default="int2,none")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--cxx-csv", default="", help="kvq_bench_decode results to compare with (same GPU model)")
    ap.add_argument("--csv", default="")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("bench_decode: no CUDA device; nothing measured")
        return 0
    gpu = torch.cuda.get_device_name()
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    try:
        import flashinfer  # noqa: F401
        have_fi = True
    except ImportError:
        have_fi = False
    rows = []
    print("gpu: %s; FlashInfer %s" % (gpu, "importable" if have_fi else "not installed (skipped)"))
    print("%-5s %6s %8s %12s %12s %12s %12s %12s %9s" % ("fmt", "batch", "tokens", "eager_us", "graph_us", "cxx_us",
                                                        "sdpa_us", "flashinfer_us", "overhead"))
    for cell in a.grid.split(","):
        batch, tokens = (int(x) for x in cell.split("x"))
        sdpa_us = fi_us = None
        for name in a.formats.split(","):
            k, v = FMT[name]
            key = "bf16|128|64|%s|%s" % (k, v)
            if key not in kvq_torch.compiled_configs():
                print("%s: not compiled, skipped" % key)
                continue
            R, P = 128, 64
            cache = kvq_torch.Cache(layers=1, kv_heads=8, head_dim=128, num_q_heads=32,
                                    format=kvq_torch.CacheFormat(k, v, page=P, residual=R), max_seqs=batch,
                                    max_seq_len=tokens, device="cuda", max_step_tokens=16384 * batch)
            seqs = [cache.new_sequence() for _ in range(batch)]
            fill(cache, seqs, tokens - 1)  # decode_bench.cuh: len = context - q_len
            step = cache.begin(seqs, [1] * batch)
            # The C++ benchmark's decode: cold length after the step's append (kvq::cold_after).
            cold_after_step = torch.tensor([kvq_torch.cold_after(l + 1, c, R, P) for l, c in
                                            zip(step.host_len, step.host_cold)], dtype=torch.int32, device="cuda")
            cxx_plan = kvq_torch.ops.plan_decode(key, batch, 32, 8, R, tokens, 1, batch, torch.device("cuda"))
            mine, theirs = kvq_torch.ops.decode_plan_info(step.plan), kvq_torch.ops.decode_plan_info(cxx_plan)
            show = ("batch", "max_tokens", "max_q_len", "total_q", "num_sms", "rows_per_cta", "split_tokens",
                    "max_splits", "tail_slots", "tail_span", "tail_ctas", "dependent_launches")
            print("  plan %s %dx%d: package %s" % (name, batch, tokens, {f: mine[f] for f in show}))
            print("  plan %s %dx%d: C++     %s%s" % (name, batch, tokens, {f: theirs[f] for f in show},
                  "" if all(mine[f] == theirs[f] for f in show) else "  ** plans differ"))
            q = torch.randn(batch, 32, 128, device="cuda", dtype=torch.bfloat16)
            nk = torch.randn(batch, 8, 128, device="cuda", dtype=torch.bfloat16)
            out = torch.empty_like(q)
            args = (cache.config, step.plan, cache.cold[0], cache.hot_k[0], cache.hot_v[0], None, None, 0,
                    step.block_table, step.hot_slot, step.seq_len, cold_after_step, step.cu_q, q, nk, nk,
                    1 / math.sqrt(128), 0.0, cache.workspace, out, cache.flags)
            op = torch.ops.kvq.decode
            for _ in range(3):
                op(*args)
            eager = median_us(lambda: op(*args), flush, a.iters, warmup=0)
            g = torch.cuda.CUDAGraph()
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                op(*args)
            torch.cuda.current_stream().wait_stream(s)
            with torch.cuda.graph(g):
                op(*args)
            graph = median_us(g.replay, flush, a.iters, warmup=0)
            try:
                cache.check_flags()
            except kvq_torch.KvqError as e:
                print("  ** %s" % e)
            del cache
            if sdpa_us is None:
                try:
                    qd = q.view(batch, 32, 1, 128)
                    kd = torch.randn(batch, 8, tokens, 128, device="cuda", dtype=torch.bfloat16)
                    f = lambda: torch.nn.functional.scaled_dot_product_attention(qd, kd, kd, enable_gqa=True)
                    f()
                    sdpa_us = median_us(f, flush, a.iters, warmup=0)
                    del kd
                except torch.OutOfMemoryError:
                    sdpa_us = float("nan")
            torch.cuda.empty_cache()
            if have_fi and fi_us is None:
                fi_us = flashinfer_us(batch, tokens, flush, a.iters) or float("nan")
                torch.cuda.empty_cache()
            cxx = cxx_time(a.cxx_csv, name, batch, tokens, gpu)
            over = (eager / cxx - 1) * 100 if cxx else float("nan")
            print("%-5s %6d %8d %12.1f %12.1f %12s %12.1f %12s %8.1f%%" % (
                name, batch, tokens, eager, graph, "%.1f" % cxx if cxx else "-", sdpa_us,
                "%.1f" % fi_us if fi_us is not None else "-", over))
            rows.append(dict(format=name, batch=batch, tokens=tokens, eager_us=round(eager, 2), graph_us=round(graph, 2),
                             cxx_us=cxx or "", sdpa_us=round(sdpa_us, 2),
                             flashinfer_us=round(fi_us, 2) if fi_us is not None else "", overhead_pct=round(over, 2),
                             split_tokens=mine["split_tokens"], max_splits=mine["max_splits"],
                             rows_per_cta=mine["rows_per_cta"], cxx_max_splits=theirs["max_splits"],
                             cxx_rows_per_cta=theirs["rows_per_cta"], gpu=gpu))
    if a.csv and rows:
        with open(a.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
