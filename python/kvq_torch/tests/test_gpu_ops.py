"""The ops' CUDA kernels against the host reference through the package (skipped without CUDA):
bit-exact append, decode / prefill within the FA3 criterion of kvq's GPU tests, at shapes the C++
tests do not use; torch.compile of a model step (fullgraph); CUDA-graph capture and replay of a
decode step with changing lengths; refusals that leave the cache untouched."""
import pytest
import torch

from helpers import attention_operands, check_attention, exact_and_naive, make_cache, step_tensors


def compiled_formats(kvq, head_dim):
    out = []
    for key in kvq.compiled_configs():
        dtype, d, p, k, v = key.split("|")
        if int(d) == head_dim and dtype == "bf16":
            out.append((k, v, int(p)))
    return out


def mirror(kvq, cuda, fmt, **kw):
    return make_cache(kvq, cuda, fmt, **kw), make_cache(kvq, "cpu", fmt, **kw)


def run_both(kvq, gpu, cpu, schedule, seed, check_attention_too=True):
    gen = torch.Generator().manual_seed(seed)
    seqs = [gpu.new_sequence() for _ in schedule[0]]
    assert seqs == [cpu.new_sequence() for _ in schedule[0]]
    for num_new in schedule:
        q, k, v = step_tensors(cpu, num_new, gen)
        sg, sc = gpu.begin(seqs, num_new), cpu.begin(seqs, num_new)
        out_g = gpu.attend(0, q.cuda(), k.cuda(), v.cuda(), sg)
        out_c = cpu.attend(0, q, k, v, sc)
        torch.cuda.synchronize()
        assert gpu.check_flags() in (0, 1, 2)
        if check_attention_too:
            ops = attention_operands(cpu, 0, sc, k, v)
            exact, naive = exact_and_naive(q, ops, num_new, sc.host_len, cpu.softmax_scale, cpu.dtype)
            check_attention(out_g, exact, naive, cpu.dtype, "%s %s" % (gpu.format, num_new))
            check_attention(out_c, exact, naive, cpu.dtype, "cpu %s" % num_new)
        gpu.end(sg)
        cpu.end(sc)
        used = gpu.num_pages - gpu.pages_free()
        assert torch.equal(gpu.cold[:, :used].cpu(), cpu.cold[:, :used]), "cold pool differs after %s" % num_new
        for s in seqs:  # hot rows as the cache holds them
            kg, vg = gpu.dequantize(0, s)
            kc, vc = cpu.dequantize(0, s)
            assert torch.equal(kg.cpu(), kc) and torch.equal(vg.cpu(), vc)


@pytest.mark.parametrize("head_dim,q_heads,kv_heads", [(64, 15, 3), (128, 10, 2)])
def test_append_decode_prefill_against_the_reference(kvq, cuda, head_dim, q_heads, kv_heads):
    """GQA groups of 5 (C++ tests: 1, 4, 8), R = 2 pages, odd chunk lengths, 3 sequences."""
    fmts = compiled_formats(kvq, head_dim)
    if not fmts:
        pytest.skip("no bf16 head-dim-%d configuration compiled" % head_dim)
    for k, v, page in fmts:
        fmt = kvq.CacheFormat(k, v, page=page, residual=2 * page)
        gpu, cpu = mirror(kvq, cuda, fmt, kv_heads=kv_heads, head_dim=head_dim, q_heads=q_heads, max_seqs=3,
                          max_seq_len=1024)
        run_both(kvq, gpu, cpu, [[97, 211, 5], [1, 16, 3], [150, 1, 33], [2, 2, 2]], seed=head_dim)
        # The HF example's steps (run.py, chunks of 256): a one-token decode step that turns a page
        # cold (its attention quantizes the page on the fly: the transition kernel), 64-token runs
        # each turning one page cold, decode steps of several lengths (each its own plan).
        gpu, cpu = mirror(kvq, cuda, fmt, kv_heads=kv_heads, head_dim=head_dim, q_heads=q_heads, max_seqs=3,
                          max_seq_len=1024)
        run_both(kvq, gpu, cpu, [[191, 255, 190], [1, 1, 1], [64, 64, 64], [1, 2, 16], [63, 1, 7]], seed=head_dim + 1)


def test_sinks_and_mse_key_clip(kvq, cuda):
    fmts = [f for f in compiled_formats(kvq, 64) if f[0] != "none"]
    if not fmts:
        pytest.skip("no quantized head-dim-64 configuration compiled")
    k, v, page = fmts[-1]
    fmt = kvq.CacheFormat(k, v, page=page, residual=page, sinks=4, key_clip="mse")
    gpu, cpu = mirror(kvq, cuda, fmt, max_seqs=2)
    run_both(kvq, gpu, cpu, [[200, 70], [1, 1], [64, 3]], seed=7)


def test_refusals_leave_the_cache_untouched(kvq, cuda):
    k, v, page = compiled_formats(kvq, 64)[0]
    gpu = make_cache(kvq, cuda, kvq.CacheFormat(k, v, page=page, residual=page))
    s = [gpu.new_sequence(), gpu.new_sequence()]
    gen = torch.Generator().manual_seed(5)
    q, kk, vv = step_tensors(gpu, [100, 100], gen)
    st = gpu.begin(s, [100, 100])
    gpu.attend(0, q.cuda(), kk.cuda(), vv.cuda(), st)
    gpu.end(st)
    torch.cuda.synchronize()
    before = [t.clone() for t in (gpu.cold, gpu.hot_k, gpu.hot_v)]
    q, kk, vv = (t.cuda() for t in step_tensors(gpu, [1, 1], gen))
    st = gpu.begin(s, [1, 1])
    cases = [(q.float(), kk, vv, "q"), (q, kk.cpu(), vv, "new_k"), (q, kk[:, :1], vv, "new_k"),
             (q[:, :5], kk, vv, "q"), (q.transpose(0, 1).contiguous().transpose(0, 1), kk, vv, "q")]
    for qq, k2, v2, arg in cases:
        with pytest.raises(kvq.KvqError) as e:
            gpu.attend(0, qq, k2, v2, st)
        assert e.value.argument == arg, e.value
    torch.cuda.synchronize()
    for t, b in zip((gpu.cold, gpu.hot_k, gpu.hot_v), before):
        assert torch.equal(t, b)


def test_cuda_graph_decode_step_with_changing_lengths(kvq, cuda):
    """Capture append + decode once; replay with new lengths, slots' contents and inputs."""
    fmts = compiled_formats(kvq, 64)
    k, v, page = fmts[-1]
    fmt = kvq.CacheFormat(k, v, page=page, residual=page)
    gpu, cpu = mirror(kvq, cuda, fmt, max_seqs=2)
    gen = torch.Generator().manual_seed(9)
    seqs = [gpu.new_sequence() for _ in range(2)]
    [cpu.new_sequence() for _ in range(2)]
    for cache in (gpu, cpu):  # prompts
        g = torch.Generator().manual_seed(1)
        q, kk, vv = step_tensors(cache, [130, 70], g)
        st = cache.begin(seqs, [130, 70])
        cache.attend(0, q.to(cache.device), kk.to(cache.device), vv.to(cache.device), st)
        cache.end(st)
    static_q = torch.zeros(2, gpu.num_q_heads, 64, dtype=torch.bfloat16, device=cuda)
    static_k = torch.zeros(2, gpu.kv_heads, 64, dtype=torch.bfloat16, device=cuda)
    static_v = torch.zeros_like(static_k)
    static_out = torch.zeros_like(static_q)
    step = gpu.begin(seqs, [1, 1])
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up outside the capture, on the step's own lengths
        gpu.attend(0, static_q, static_k, static_v, step, out=static_out)
    torch.cuda.current_stream().wait_stream(s)
    # The warm-up appended zeros at the step's positions; the replays below overwrite them.
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        gpu.attend(0, static_q, static_k, static_v, step, out=static_out)
    for i in range(70):  # crosses page boundaries: pages turn cold inside replays
        q, kk, vv = step_tensors(cpu, [1, 1], gen)
        gpu.begin(seqs, [1, 1], into=step)
        static_q.copy_(q)
        static_k.copy_(kk)
        static_v.copy_(vv)
        graph.replay()
        sc = cpu.begin(seqs, [1, 1])
        ref = cpu.attend(0, q, kk, vv, sc)
        ops = attention_operands(cpu, 0, sc, kk, vv)
        exact, naive = exact_and_naive(q, ops, [1, 1], sc.host_len, cpu.softmax_scale, cpu.dtype)
        torch.cuda.synchronize()
        check_attention(static_out, exact, naive, cpu.dtype, "replay %d" % i)
        gpu.end(step)
        cpu.end(sc)
    assert gpu.check_flags() in (0, 1, 2)
    used = gpu.num_pages - gpu.pages_free()
    assert torch.equal(gpu.cold[:, :used].cpu(), cpu.cold[:, :used])


def test_torch_compile_fullgraph_cuda(kvq, cuda):
    k, v, page = compiled_formats(kvq, 64)[-1]
    fmt = kvq.CacheFormat(k, v, page=page, residual=page)
    eager, comp = (make_cache(kvq, cuda, fmt, max_seqs=2, layers=2) for _ in range(2))
    gen = torch.Generator().manual_seed(4)
    w = (torch.randn(64, 6 * 64 + 2 * 2 * 64, generator=gen) * 0.1).to(torch.bfloat16).cuda()

    def model_step(cache, x, step):  # two "layers" of projection + kvq attention
        for layer in range(2):
            qkv = x @ w
            q = qkv[:, :384].reshape(-1, 6, 64).contiguous()
            k = qkv[:, 384:512].reshape(-1, 2, 64).contiguous()
            vv = qkv[:, 512:].reshape(-1, 2, 64).contiguous()
            x = cache.attend(layer, q, k, vv, step)[:, 0, :]
        return x

    compiled = torch.compile(model_step, fullgraph=True)
    for c in (eager, comp):
        assert [c.new_sequence(), c.new_sequence()] == [0, 1]
    for n in ([40, 70], [1, 1], [1, 1], [3, 2]):
        x = torch.randn(sum(n), 64, generator=gen).to(torch.bfloat16).cuda()
        se, sc = eager.begin([0, 1], n), comp.begin([0, 1], n)
        a = model_step(eager, x, se)
        b = compiled(comp, x, sc)
        torch.cuda.synchronize()
        assert torch.equal(a, b)
        eager.end(se)
        comp.end(sc)
