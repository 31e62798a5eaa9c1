#!/usr/bin/env python3
"""SmolLM2-135M-Instruct in Hugging Face transformers with its KV cache in kvq (kvq_torch).

The model is transformers' LlamaForCausalLM, weights read from the GGUF file examples/smollm2
uses (gguf_reader.py; no `gguf` package needed), tokenizer built from the GGUF vocabulary with the
`tokenizers` library. A kvq attention function is registered through transformers'
AttentionInterface: for each layer it takes the chunk's q / k / v (after RoPE), rounds them to bf16
as the C++ engine does, and runs kvq_torch.Cache.attend (kvq decode for runs of <= 16 tokens,
chunked prefill above, then the append). The model runs in fp32 like examples/smollm2's GPU backend
(fp32 GEMMs, Q/K/V and the attention output in bf16), so the numbers are comparable with
`smollm2 --device gpu`:

    python3 run.py perplexity --formats none,int8,int4,int2,k4v2   # 4 windows of 4096, Persuasion
    python3 run.py generate --formats none,int2

Formats: none, int8, int4, int2, k4v2 (R = --residual, no sinks, min/max key groups, no rotation)
and int2_rec, int4_rec, k4v2_rec: kvq's recommended formats (kvq::recommended_*(): R 128, 4 sinks,
min/max key groups, rotation), the C++ engine's `--rotate on --sinks 4`. The
rotation is applied as examples/smollm2 applies it (model_gpu.cu): q, k and v of every head are
rotated in fp32 after RoPE with the seed kvq::layer_rotation_seed(layer), then rounded to bf16; the
attention output (bf16) is unrotated in fp32.

`--attention decode` (default, as the C++ engine's default) cuts each chunk into the runs over which
token-by-token decoding and kvq's chunk contract agree (examples/smollm2/kv_cache.cpp,
attention_calls; tests/test_decode_runs.py checks on the CPU that the runs equal token-by-token
decoding bit for bit); `--attention reference` is one call per chunk. Perplexity is compared with
the C++ engine's GPU logs (bench/results/accuracy_gpu_logs, or --cxx-log-dir) when they exist.
"""
import argparse
import math
import os
import re
import sys
import time
from pathlib import Path

import numpy as np
import torch

here = Path(__file__).resolve().parent
sys.path.insert(0, str(here))
from gguf_reader import GGUF  # noqa: E402

import kvq_torch  # noqa: E402

ROOT = here.parents[3]
CACHE_DIR = Path(os.environ.get("SMOLLM2_CACHE", Path.home() / ".cache" / "kvq-smollm2"))
FORMATS = {"none": ("none", "none"), "int8": ("int8", "int8"), "int4": ("int4", "int4"), "int2": ("int2", "int2"),
           "k4v2": ("int4", "int2")}
# kvq::recommended_*() (kvq_torch.CacheFormat.recommended_*): rotation, 4 sinks, min/max key groups;
# the C++ engine's `--rotate on --sinks 4`.
RECOMMENDED = {"int2_rec": kvq_torch.CacheFormat.recommended_int2, "int4_rec": kvq_torch.CacheFormat.recommended_int4,
               "k4v2_rec": kvq_torch.CacheFormat.recommended_k4v2}
PROMPTS = ["What is the capital of France, and what is it famous for?",
           "Write a short story about a robot who learns to paint.",
           "Explain to a ten-year-old why the sky is blue."]  # examples/smollm2/eval_generate.cpp


# ---- model and tokenizer from the GGUF file -------------------------------------------------------

def load_tokenizer(g):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    tokens = g.meta["tokenizer.ggml.tokens"]
    merges = [tuple(m.split(" ", 1)) for m in g.meta["tokenizer.ggml.merges"]]
    tk = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    tk.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tk.decoder = decoders.ByteLevel()
    types = g.meta.get("tokenizer.ggml.token_type")
    if types is not None:
        tk.add_special_tokens([AddedToken(tokens[i], special=True) for i in range(len(tokens)) if int(types[i]) == 3])
    return tk


def load_model(g, device):
    from transformers import LlamaConfig, LlamaForCausalLM
    m = g.meta
    heads, kv = int(m["llama.attention.head_count"]), int(m["llama.attention.head_count_kv"])
    d = int(m["llama.embedding_length"])
    hd = d // heads
    cfg = LlamaConfig(vocab_size=len(m["tokenizer.ggml.tokens"]), hidden_size=d,
                      intermediate_size=int(m["llama.feed_forward_length"]), num_hidden_layers=int(m["llama.block_count"]),
                      num_attention_heads=heads, num_key_value_heads=kv, head_dim=hd,
                      rms_norm_eps=float(m["llama.attention.layer_norm_rms_epsilon"]),
                      rope_theta=float(m["llama.rope.freq_base"]), max_position_embeddings=int(m["llama.context_length"]),
                      tie_word_embeddings="output.weight" not in g.tensors, torch_dtype=torch.float32)
    cfg._attn_implementation = "kvq"
    model = LlamaForCausalLM(cfg)

    def unpermute(w, n):  # inverse of convert_hf_to_gguf's permute of q / k rows
        return w.reshape(n, hd // 2, 2, -1).swapaxes(1, 2).reshape(w.shape)

    sd = {"model.embed_tokens.weight": g.tensor("token_embd.weight"), "model.norm.weight": g.tensor("output_norm.weight")}
    if "output.weight" in g.tensors:
        sd["lm_head.weight"] = g.tensor("output.weight")
    names = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm", "attn_q": "self_attn.q_proj",
             "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
             "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
    for i in range(cfg.num_hidden_layers):
        for a, b in names.items():
            w = g.tensor("blk.%d.%s.weight" % (i, a))
            if a == "attn_q":
                w = unpermute(w, heads)
            elif a == "attn_k":
                w = unpermute(w, kv)
            sd["model.layers.%d.%s.weight" % (i, b)] = w
    sd = {k: torch.from_numpy(np.ascontiguousarray(v, dtype=np.float32)) for k, v in sd.items()}
    if cfg.tie_word_embeddings:
        sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
    missing, unexpected = model.load_state_dict(sd, strict=False)
    assert not unexpected and all("rotary" in k for k in missing), (missing, unexpected)
    return model.to(device).eval()


# ---- kvq as transformers' attention -----------------------------------------------------------------

class Runner:
    """The kvq cache behind the model's attention: the steps of the current forward call."""

    def __init__(self, cache, seqs, path):
        self.cache, self.seqs, self.path = cache, seqs, path
        self.steps = []  # [(offset, count, Step)] of the current chunk

    def plan_chunk(self, count):
        """Host side of a chunk of `count` tokens for every sequence (same lengths): its runs."""
        c = self.cache
        L, C0 = c.len[self.seqs[0]], c.cold_len[self.seqs[0]]
        R, P = c.residual, c.page
        runs = []
        if self.path == "reference":
            runs = [(0, count)]
        else:
            def boundary(p):
                return min(p, kvq_torch.cold_after(p + 1, C0, R, P))
            a, end = L, L + count
            while a < end:
                b, e = boundary(a), a + 1
                while e < end and boundary(e) == b and min(a, kvq_torch.cold_after(e + 1, C0, R, P)) == b:
                    e += 1
                runs.append((a - L, e - L))
                a = e
        self.steps = []
        for a, e in runs:
            step = c.begin(self.seqs, [e - a] * len(self.seqs))
            c.end(step)
            self.steps.append((a, e - a, step))

    def attend(self, layer, q, k, v):
        """q [B][Hq][T][D], k / v [B][Hkv][T][D] (fp32, RoPE applied) -> [B][T][Hq][D] fp32."""
        B, Hq, T, D = q.shape
        rotate = self.cache.format.rotate
        seed = self.cache.rotation_seeds[layer]  # kvq::layer_rotation_seed(layer)
        q, k, v = (t.transpose(1, 2).contiguous() for t in (q, k, v))  # [B][T][H][D] fp32
        if rotate:  # in fp32, before the rounding to bf16 (examples/smollm2: rope_split_kernel)
            for t in (q, k, v):
                kvq_torch.rotate_heads(t, seed)
        q, k, v = (t.to(torch.bfloat16) for t in (q, k, v))
        outs = []
        for a, n, step in self.steps:
            f = lambda t: t[:, a:a + n].reshape(B * n, t.shape[2], D).contiguous()
            o = self.cache.attend(layer, f(q), f(k), f(v), step, rotated=True)
            outs.append(o.view(B, n, Hq, D))
        out = torch.cat(outs, dim=1).float()
        if rotate:  # the bf16 output unrotated in fp32 (examples/smollm2: attention_out_kernel)
            kvq_torch.rotate_heads(out, seed, inverse=True)
        return out


RUNNER = None


def kvq_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    return RUNNER.attend(module.layer_idx, query, key, value), None


def register():
    from transformers import AttentionInterface
    AttentionInterface.register("kvq", kvq_attention)
    try:  # no mask: kvq's attention is causal by contract
        from transformers import AttentionMaskInterface
        AttentionMaskInterface.register("kvq", lambda *a, **k: None)
    except ImportError:
        pass


def forward(model, runner, ids):
    """ids [B][T] (every sequence at the same length) -> logits [B][T][V] fp32."""
    L = runner.cache.len[runner.seqs[0]]
    runner.plan_chunk(ids.shape[1])
    pos = torch.arange(L, L + ids.shape[1], device=ids.device)[None].expand(ids.shape[0], -1)
    with torch.no_grad():
        return model(input_ids=ids, position_ids=pos, use_cache=False).logits.float()


def cache_format(fmt, residual):
    if fmt in RECOMMENDED:
        return RECOMMENDED[fmt]()
    if fmt not in FORMATS:
        sys.exit("unknown format %r: one of %s" % (fmt, ", ".join(list(FORMATS) + list(RECOMMENDED))))
    k, v = FORMATS[fmt]
    return kvq_torch.CacheFormat(k, v, 64, residual)


def make_cache(model, fmt, batch, max_len, device, residual):
    c = model.config
    return kvq_torch.Cache(layers=c.num_hidden_layers, kv_heads=c.num_key_value_heads, head_dim=c.head_dim,
                           num_q_heads=c.num_attention_heads, format=cache_format(fmt, residual),
                           max_seqs=batch, max_seq_len=max_len, device=device, max_step_tokens=batch * 256,
                           softmax_scale=1.0 / math.sqrt(c.head_dim))


# ---- evaluations -----------------------------------------------------------------------------------

def cxx_perplexity(log_dir, fmt):
    p = Path(log_dir) / ("perplexity_%s.log" % fmt)
    if not p.is_file():
        return None
    m = re.search(r"\(decode attention\): ([0-9.]+) over", p.read_text())
    return float(m.group(1)) if m else None


def perplexity(model, tok, args, device):
    text = Path(args.text).read_text()
    ids = tok.encode(text, add_special_tokens=False).ids
    W, N, chunk = args.window, args.windows, args.chunk
    if len(ids) < W * N:
        sys.exit("the text has %d tokens, fewer than %d" % (len(ids), W * N))
    results = {}
    for fmt in args.formats.split(","):
        t0 = time.time()
        nll, count = 0.0, 0
        for w0 in range(0, N, args.batch):
            nb = min(args.batch, N - w0)
            cache = make_cache(model, fmt, nb, W, device, args.residual)
            global RUNNER
            RUNNER = Runner(cache, [cache.new_sequence() for _ in range(nb)], args.attention)
            win = torch.tensor([ids[(w0 + s) * W:(w0 + s + 1) * W] for s in range(nb)], device=device)
            for p in range(0, W, chunk):
                c = min(chunk, W - p)
                logits = forward(model, RUNNER, win[:, p:p + c]).double()
                lp = torch.log_softmax(logits, dim=-1)
                m = min(c, W - 1 - p)  # positions with a next token in the window
                tgt = win[:, p + 1:p + 1 + m]
                nll -= lp[:, :m].gather(-1, tgt[..., None]).sum().item()
                count += nb * m
            cache.check_flags()
        ppl = math.exp(nll / count)
        fmt_r = cache_format(fmt, args.residual).residual
        ref = cxx_perplexity(args.cxx_log_dir, fmt) if fmt_r == 128 and args.attention == "decode" else None
        diff = "" if ref is None else "; C++ engine (GPU log) %.4f, difference %+.3f %%%s" % (
            ref, (ppl / ref - 1) * 100, "" if abs(ppl / ref - 1) <= 0.001 else "  ** beyond 0.1 % **")
        print("perplexity %s R=%d P=64 (%s attention): %.4f over %d tokens (%d windows of %d), %.1f s%s" % (
            fmt, fmt_r, args.attention, ppl, count, N, W, time.time() - t0, diff), flush=True)
        if args.csv:  # format,variant,perplexity,tokens (variant: plain, or rec = kvq::recommended_*)
            base, variant = (fmt[:-4], "rec") if fmt.endswith("_rec") else (fmt, "plain")
            new_file = not Path(args.csv).exists()
            with open(args.csv, "a") as f:
                if new_file:
                    f.write("format,variant,perplexity,tokens\n")
                f.write("%s,%s,%.4f,%d\n" % (base, variant, ppl, count))
        results[fmt] = ppl
    return results


def cxx_generation(log_dir, fmt, i):
    p = Path(log_dir) / ("generate_%s.log" % fmt)
    if not p.is_file():
        return None
    blocks = re.findall(r"generate %s prompt %d .*?\n  none: (.*?)\n  %s: (.*?)\n" % (fmt, i, fmt), p.read_text(), re.S)
    return blocks[0][1] if blocks else None


def generate(model, tok, args, device):
    system = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    eos = tok.token_to_id("<|im_end|>")
    for fmt in args.formats.split(","):
        for i, prompt in enumerate(PROMPTS):
            ids = tok.encode(system + "<|im_start|>user\n" + prompt + "<|im_end|>\n<|im_start|>assistant\n",
                             add_special_tokens=False).ids
            cache = make_cache(model, fmt, 1, len(ids) + args.max_new + 1, device, args.residual)
            global RUNNER
            RUNNER = Runner(cache, [cache.new_sequence()], args.attention)
            out = []
            x = torch.tensor([ids], device=device)
            for p in range(0, len(ids), args.chunk):  # the prompt in chunks, then one token a step
                logits = forward(model, RUNNER, x[:, p:p + args.chunk])
            while len(out) < args.max_new:
                nxt = int(logits[0, -1].argmax())
                out.append(nxt)
                if nxt == eos or len(out) == args.max_new:
                    break
                logits = forward(model, RUNNER, torch.tensor([[nxt]], device=device))
            text = tok.decode(out, skip_special_tokens=False).replace("\n", " ")
            ref = cxx_generation(args.cxx_log_dir, fmt, i)
            agree = ""
            if ref is not None:
                ref_ids = tok.encode(ref, add_special_tokens=False).ids
                n = next((j for j, (a, b) in enumerate(zip(out, ref_ids)) if a != b), min(len(out), len(ref_ids)))
                agree = "; agrees with the C++ engine (GPU log) for %d of %d tokens" % (n, len(ref_ids))
            print("generate %s prompt %d (%d tokens): %s%s" % (fmt, i, len(ids), text, agree), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["perplexity", "generate"])
    ap.add_argument("--model", default=str(CACHE_DIR / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--text", default=str(CACHE_DIR / "austen" / "persuasion.txt"))
    ap.add_argument("--formats", default="none,int8,int4,int2,k4v2")
    ap.add_argument("--window", type=int, default=4096)
    ap.add_argument("--windows", type=int, default=4)
    ap.add_argument("--batch", type=int, default=2, help="windows side by side (the C++ default)")
    ap.add_argument("--chunk", type=int, default=256)
    ap.add_argument("--residual", type=int, default=128)
    ap.add_argument("--attention", choices=["decode", "reference"], default="decode")
    ap.add_argument("--max-new", type=int, default=64)
    ap.add_argument("--cxx-log-dir", default=str(ROOT / "bench" / "results" / "accuracy_gpu_logs"))
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--csv", default="", help="perplexity: append format,variant,perplexity,tokens rows here")
    args = ap.parse_args()
    if not Path(args.model).is_file():
        print("hf_smollm2: no model at %s (examples/smollm2/fetch_model.sh fetches it); skipped" % args.model)
        return 0
    register()
    g = GGUF(args.model)
    tok = load_tokenizer(g)
    model = load_model(g, args.device)
    if args.what == "perplexity":
        if not Path(args.text).is_file():
            print("hf_smollm2: no text at %s (examples/smollm2/fetch_text.sh persuasion); skipped" % args.text)
            return 0
        perplexity(model, tok, args, args.device)
    else:
        generate(model, tok, args, args.device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
