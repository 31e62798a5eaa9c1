"""The Hugging Face example's cache feeding (examples/hf_smollm2/run.py, Runner) against token-by-token
decoding, on the host reference (CPU): a chunk is cut into runs by the C++ engine's rule
(examples/smollm2 attention_calls: query p sees tokens below min(p, cold_after(p + 1)) quantized),
and each run is one Cache.attend (attention with the cold length before the step, then the append).
On the host reference every query's output depends only on the operands it sees, so if the runs give
each query the cold boundary decoding gives it, the outputs, the cold pool and the rings equal those
of a cache fed one token a step, bit for bit. Shape of SmolLM2-135M (9 query / 3 KV heads of 64,
page 64, R 128), INT2 plain and with rotation + 4 sinks; chunks of 256 (run.py's default: a decode
step of one token ends every chunk, turning a page cold) and odd ones. Needs torch and the built
package (skipped otherwise) and an INT2 configuration at head dim 64, page 64."""
import importlib.util
import sys
from pathlib import Path

import pytest
import torch

RUN_PY = Path(__file__).resolve().parents[1] / "examples" / "hf_smollm2" / "run.py"
KV_HEADS, Q_HEADS, D, P, R = 3, 9, 64, 64, 128


def load_runner():
    spec = importlib.util.spec_from_file_location("hf_smollm2_run", RUN_PY)
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("hf_smollm2_run", mod)
    spec.loader.exec_module(mod)  # imports numpy, torch, kvq_torch; transformers only when a model loads
    return mod.Runner


def layer_inputs(layers, batch, tokens, seed):
    """Per layer q [B][Hq][T][D], k / v [B][Hkv][T][D] fp32 (post-RoPE, as the model hands them to the
    attention function), keys with outlier channels."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(layers):
        q = torch.randn(batch, Q_HEADS, tokens, D, generator=gen)
        k = torch.randn(batch, KV_HEADS, tokens, D, generator=gen) * 1.5
        k[..., 3::16] *= 8
        k[..., 5] += 4
        v = torch.randn(batch, KV_HEADS, tokens, D, generator=gen)
        out.append((q, k, v))
    return out


def feed(kvq, Runner, fmt, inputs, chunks):
    """Feeds every layer's tokens in `chunks` through a Runner over a fresh cache; returns the cache
    and per layer the attention outputs [B][T][Hq][D]."""
    layers, batch, tokens = len(inputs), inputs[0][0].shape[0], inputs[0][0].shape[2]
    cache = kvq.Cache(layers=layers, kv_heads=KV_HEADS, head_dim=D, num_q_heads=Q_HEADS, format=fmt, max_seqs=batch,
                      max_seq_len=tokens, device="cpu", max_step_tokens=batch * 256)
    runner = Runner(cache, [cache.new_sequence() for _ in range(batch)], "decode")
    outs = [[] for _ in range(layers)]
    p = 0
    for c in chunks:
        runner.plan_chunk(c)  # as run.py's forward(): the chunk's runs, begun and ended up front
        for layer, (q, k, v) in enumerate(inputs):
            outs[layer].append(runner.attend(layer, q[:, :, p:p + c], k[:, :, p:p + c], v[:, :, p:p + c]))
        p += c
    assert p == tokens and cache.check_flags() == 0
    return cache, [torch.cat(o, dim=1) for o in outs]


def formats(kvq):
    if "bf16|64|64|int2|int2" not in kvq.compiled_configs():
        pytest.skip("bf16|64|64|int2|int2 is not compiled (KVQ_TORCH_CONFIG_FILTER)")
    return [kvq.CacheFormat("int2", "int2", P, R), kvq.CacheFormat.recommended_int2()]


@pytest.mark.parametrize("chunks", [[256, 256, 256], [191, 1, 64, 200, 17, 16, 3, 76, 200]])
def test_runs_equal_token_by_token_decoding(kvq, chunks):
    Runner = load_runner()
    tokens = sum(chunks)
    inputs = layer_inputs(2, 2, tokens, seed=len(chunks))
    for fmt in formats(kvq):
        runs_cache, runs_out = feed(kvq, Runner, fmt, inputs, chunks)
        tok_cache, tok_out = feed(kvq, Runner, fmt, inputs, [1] * tokens)
        for layer, (a, b) in enumerate(zip(runs_out, tok_out)):
            if not torch.equal(a, b):
                bad = (a != b).any(-1).any(-1).nonzero()
                pytest.fail("%s, chunks %s, layer %d: the runs' attention output differs from token-by-token decoding "
                            "at (sequence, position) %s (largest difference %g)"
                            % (fmt, chunks, layer, bad[:8].tolist(), (a - b).abs().max().item()))
        assert runs_cache.len == tok_cache.len and runs_cache.cold_len == tok_cache.cold_len
        for name in ("cold", "hot_k", "hot_v", "sink_k", "sink_v"):
            x, y = getattr(runs_cache, name), getattr(tok_cache, name)
            assert (x is None) == (y is None)
            assert x is None or torch.equal(x, y), "%s: %s differs" % (fmt, name)


def test_runs_follow_the_cxx_engine_rule(kvq):
    """The runs of a chunk: where a page turns cold and which queries see it, for run.py's default
    (chunks of 256 tokens): after the first R + P - 1 tokens, runs of P tokens, each turning one page
    cold, and a one-token decode step at the end of every chunk."""
    Runner = load_runner()
    cache = kvq.Cache(layers=1, kv_heads=KV_HEADS, head_dim=D, num_q_heads=Q_HEADS, format=formats(kvq)[0], max_seqs=1,
                      max_seq_len=768, device="cpu")
    runner = Runner(cache, [cache.new_sequence()], "decode")
    got = []
    for _ in range(3):
        runner.plan_chunk(256)
        got.append([(a, n, st.host_cold[0], st.decode) for a, n, st in runner.steps])
    assert got[0] == [(0, 191, 0, False), (191, 64, 0, False), (255, 1, 64, True)]
    assert got[1] == [(0, 63, 128, False), (63, 64, 128, False), (127, 64, 192, False), (191, 64, 256, False),
                      (255, 1, 320, True)]
    assert cache.cold_len[0] == 640 and cache.len[0] == 768
