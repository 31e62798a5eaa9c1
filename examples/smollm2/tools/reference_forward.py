#!/usr/bin/env python3
"""Independent check of the C++ forward pass: SmolLM2 in numpy, the way Hugging Face computes it
(Q/K weights un-permuted back to the Hugging Face layout, rotate-half RoPE, fp32/fp64 math, no
KV quantization). Prints the next-token logits of the last position, to compare with
`smollm2 ... logits` output.  (pip install gguf numpy)

usage: reference_forward.py MODEL.gguf ID [ID ...]   -> prints top-5 (id, logit) and writes
       /tmp/smollm2_ref_logits.npy (all positions' logits)
"""
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def main():
    r = GGUFReader(sys.argv[1])
    ids = [int(x) for x in sys.argv[2:]]
    f = {k: v for k, v in r.fields.items()}
    val = lambda k: f[k].parts[f[k].data[0]][0]
    n_layer, d, n_head, n_kv = int(val("llama.block_count")), int(val("llama.embedding_length")), \
        int(val("llama.attention.head_count")), int(val("llama.attention.head_count_kv"))
    eps, base = float(val("llama.attention.layer_norm_rms_epsilon")), float(val("llama.rope.freq_base"))
    hd = d // n_head
    T = {t.name: t for t in r.tensors}
    W = lambda name: dequantize(T[name].data, T[name].tensor_type).astype(np.float64).reshape(
        [int(x) for x in reversed(T[name].shape)])

    def unpermute(w, heads):  # inverse of convert_hf_to_gguf's permute
        return w.reshape(heads, hd // 2, 2, -1).swapaxes(1, 2).reshape(w.shape)

    def rms(x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w

    n = len(ids)
    emb = W("token_embd.weight")
    x = emb[ids]
    inv = base ** (-np.arange(0, hd, 2) / hd)
    ang = np.arange(n)[:, None] * inv[None, :]
    cos, sin = np.concatenate([np.cos(ang)] * 2, -1), np.concatenate([np.sin(ang)] * 2, -1)

    def rope(v):  # v [n, heads, hd], Hugging Face rotate_half
        rot = np.concatenate([-v[..., hd // 2:], v[..., :hd // 2]], -1)
        return v * cos[:, None, :] + rot * sin[:, None, :]

    mask = np.triu(np.full((n, n), -np.inf), 1)
    for l in range(n_layer):
        b = "blk.%d." % l
        h = rms(x, W(b + "attn_norm.weight"))
        q = rope((h @ unpermute(W(b + "attn_q.weight"), n_head).T).reshape(n, n_head, hd))
        k = rope((h @ unpermute(W(b + "attn_k.weight"), n_kv).T).reshape(n, n_kv, hd))
        v = (h @ W(b + "attn_v.weight").T).reshape(n, n_kv, hd)
        g = n_head // n_kv
        out = np.zeros((n, n_head, hd))
        for hh in range(n_head):
            s = q[:, hh] @ k[:, hh // g].T / np.sqrt(hd) + mask
            p = np.exp(s - s.max(-1, keepdims=True))
            out[:, hh] = (p / p.sum(-1, keepdims=True)) @ v[:, hh // g]
        x = x + out.reshape(n, d) @ W(b + "attn_output.weight").T
        h = rms(x, W(b + "ffn_norm.weight"))
        gt, up = h @ W(b + "ffn_gate.weight").T, h @ W(b + "ffn_up.weight").T
        x = x + (gt / (1 + np.exp(-gt)) * up) @ W(b + "ffn_down.weight").T
    logits = rms(x, W("output_norm.weight")) @ emb.T
    np.save("/tmp/smollm2_ref_logits.npy", logits)
    top = np.argsort(-logits[-1])[:5]
    print(" ".join("%d:%.4f" % (i, logits[-1][i]) for i in top))


if __name__ == "__main__":
    main()
