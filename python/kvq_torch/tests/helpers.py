"""Shared by the torch tests: random schedules through a Cache, the attention error criterion of
kvq's GPU tests (tests/gpu/decode_check.cuh: FlashAttention-3's, against fp64 over the K/V the
attention sees, at most 2x a naive model-dtype attention's error plus a rounding allowance)."""
import math

import torch


def make_cache(kvq, device, fmt, *, layers=1, kv_heads=2, head_dim=64, q_heads=6, max_seqs=4, max_seq_len=1024, **kw):
    return kvq.Cache(layers=layers, kv_heads=kv_heads, head_dim=head_dim, num_q_heads=q_heads, format=fmt,
                     max_seqs=max_seqs, max_seq_len=max_seq_len, device=device, **kw)


def step_tensors(cache, num_new, gen, scale=1.0):
    rows = sum(num_new)
    shape_q = (rows, cache.num_q_heads, cache.head_dim)
    shape_kv = (rows, cache.kv_heads, cache.head_dim)
    f = lambda s: (torch.randn(s, generator=gen) * scale).to(cache.dtype)
    q, k, v = f(shape_q), f(shape_kv), f(shape_kv)
    # outlier channels, as real keys have
    k[..., 3] *= 8
    return q, k, v


def attention_operands(cache, layer, step, k_new, v_new):
    """Per sequence: K and V [len + q][kv_heads][D] as the attention of `step` sees them (the prefix
    as the cache holds it after the step's append, the new tokens unquantized). Call after the
    step's attend() and before end()."""
    out = []
    row = 0
    for s, n, l0 in zip(step.seqs, step.num_new, step.host_len):
        saved = cache.len[s]
        cache.len[s] = l0 + n
        cold_saved = cache.cold_len[s]
        from kvq_torch import cold_after
        cache.cold_len[s] = cold_after(l0 + n, step.host_cold[step.seqs.index(s)], cache.residual, cache.page)
        kd, vd = cache.dequantize(layer, s)
        cache.len[s], cache.cold_len[s] = saved, cold_saved
        k = torch.cat([kd[:l0].cpu(), k_new[row:row + n].cpu()])
        v = torch.cat([vd[:l0].cpu(), v_new[row:row + n].cpu()])
        out.append((k, v))
        row += n
    return out


def exact_and_naive(q, operands, num_new, host_len, scale, dtype):
    """fp64 attention and a naive model-dtype one (logits and P rounded to the dtype), [rows][Hq][D]."""
    exact, naive = [], []
    row = 0
    for (k, v), n, l0 in zip(operands, num_new, host_len):
        qs = q[row:row + n].cpu()
        hq, hk = qs.shape[1], k.shape[1]
        g = hq // hk
        kk = k.repeat_interleave(g, dim=1)
        vv = v.repeat_interleave(g, dim=1)
        pos = torch.arange(n)[:, None] + l0
        mask = torch.arange(l0 + n)[None, :] <= pos
        for prec in (torch.float64, dtype):
            logits = torch.einsum("qhd,khd->hqk", qs.to(prec), kk.to(prec)).to(torch.float64 if prec == torch.float64 else torch.float32) * scale
            logits = logits.masked_fill(~mask[None], -math.inf)
            p = torch.softmax(logits, dim=-1)
            o = torch.einsum("hqk,khd->qhd", p.to(prec), vv.to(prec))
            (exact if prec == torch.float64 else naive).append(o.to(torch.float64))
        row += n
    return torch.cat(exact), torch.cat(naive).to(dtype).to(torch.float64)


def check_attention(got, exact, naive, dtype, what=""):
    got = got.cpu().to(torch.float64)
    e_got = (got - exact).abs().max().item()
    e_naive = (naive - exact).abs().max().item()
    ref = exact.to(torch.float32)
    atol = 2 * ((((ref + 0.3).to(dtype).float() - 0.3).to(dtype).float()) - ref).abs().max().item()
    assert e_got <= 2 * e_naive + atol, "%s: max error vs fp64 %g, naive %g, allowance %g" % (what, e_got, e_naive, atol)
    return e_got, e_naive
