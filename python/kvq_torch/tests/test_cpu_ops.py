"""The ops' CPU kernels (kvq's host reference) through the package: what a CPU-only build checks
(and the GPU tests take as their reference). Needs torch and the built package."""
import pytest
import torch

from helpers import attention_operands, check_attention, exact_and_naive, make_cache, step_tensors


def formats(kvq):
    out = []
    for key in kvq.compiled_configs():
        dtype, d, p, k, v = key.split("|")
        if int(d) == 64:
            out.append(kvq.CacheFormat(k, v, page=int(p), residual=int(p)))
    return out


def run_schedule(kvq, cache, schedule, seed=0, check=None):
    """Steps of `schedule` (per step, new tokens per sequence). Token t of sequence b has the same
    q / k / v whatever the schedule (drawn per sequence up front)."""
    gen = torch.Generator().manual_seed(seed)
    seqs = [cache.new_sequence() for _ in schedule[0]]
    totals = [sum(step[b] for step in schedule) for b in range(len(seqs))]
    data = [step_tensors(cache, [n], gen) for n in totals]
    done = [0] * len(seqs)
    dev = cache.device
    for num_new in schedule:
        parts = [[d[i][done[b]:done[b] + n] for i in range(3)] for b, (d, n) in enumerate(zip(data, num_new))]
        q, k, v = (torch.cat([p[i] for p in parts]) for i in range(3))
        step = cache.begin(seqs, num_new)
        out = cache.attend(0, q.to(dev), k.to(dev), v.to(dev), step)
        if check:
            check(cache, step, q, k, v, out)
        cache.end(step)
        done = [a + n for a, n in zip(done, num_new)]
    return seqs


def test_compiled_list_is_the_built_one(kvq):
    keys = kvq.compiled_configs()
    assert keys and all(len(k.split("|")) == 5 for k in keys)


def test_chunking_gives_identical_cache(kvq):
    """Any split of a prompt into chunks gives the same bytes (DESIGN.md section 4)."""
    for fmt in formats(kvq):
        a = make_cache(kvq, "cpu", fmt, max_seqs=1)
        b = make_cache(kvq, "cpu", fmt, max_seqs=1)
        run_schedule(kvq, a, [[300], [1], [3]])
        run_schedule(kvq, b, [[17], [100], [5], [178], [1], [1], [2]])
        assert torch.equal(a.cold[:, : a.num_pages - a.pages_free()], b.cold[:, : b.num_pages - b.pages_free()]), fmt
        # the hot rows (a ring row of a token already cold is stale, whatever it holds)
        (ka, va), (kb, vb) = a.dequantize(0, 0), b.dequantize(0, 0)
        assert torch.equal(ka, kb) and torch.equal(va, vb), fmt


def test_attention_meets_the_fp64_criterion(kvq):
    def check(cache, step, q, k, v, out):
        ops = attention_operands(cache, 0, step, k, v)
        exact, naive = exact_and_naive(q, ops, step.num_new, step.host_len, cache.softmax_scale, cache.dtype)
        check_attention(out, exact, naive, cache.dtype, str(cache.format))

    for fmt in formats(kvq):
        cache = make_cache(kvq, "cpu", fmt)
        run_schedule(kvq, cache, [[70, 130], [1, 3], [40, 2], [16, 1]], check=check)


def test_refusals_leave_the_cache_untouched(kvq):
    fmt = formats(kvq)[0]
    cache = make_cache(kvq, "cpu", fmt)
    run_schedule(kvq, cache, [[150, 90]])
    before = [t.clone() for t in (cache.cold, cache.hot_k, cache.hot_v)]
    gen = torch.Generator().manual_seed(1)
    q, k, v = step_tensors(cache, [1, 1], gen)
    step = cache.begin([0, 1], [1, 1])
    bad = [
        dict(k=k.float()),                       # dtype
        dict(k=k[:, :1]),                        # shape
        dict(q=q.transpose(0, 1).contiguous().transpose(0, 1)),  # not contiguous
    ]
    for change in bad:
        args = dict(q=q, k=k, v=v)
        args.update(change)
        with pytest.raises(kvq.KvqError) as e:
            cache.attend(0, args["q"], args["k"], args["v"], step)
        assert e.value.status == "kInvalidShape" and e.value.argument in ("q", "new_k")
    # a page id outside the pool: refused by kvq's reference before any write
    step.block_table[0, 0] = cache.num_pages + 5
    with pytest.raises(kvq.KvqError) as e:
        cache.attend(0, q, k, v, step)
    assert e.value.status == "kInvalidPageId"
    for t, b in zip((cache.cold, cache.hot_k, cache.hot_v), before):
        assert torch.equal(t, b)


def test_config_not_compiled_names_what_is(kvq):
    with pytest.raises(kvq.KvqError) as e:
        kvq.Cache(layers=1, kv_heads=1, head_dim=256, num_q_heads=1, format=kvq.CacheFormat("int2", "int2", 16, 16),
                  max_seqs=1, max_seq_len=64, device="cpu")
    assert e.value.status == "kNotInstantiated" and kvq.compiled_configs()[0] in str(e.value)


def test_rollback_and_advance(kvq):
    i32 = dict(dtype=torch.int32)
    length, cold = torch.tensor([100, 200, 50], **i32), torch.tensor([0, 64, 0], **i32)
    flags = torch.zeros(1, **i32)
    kvq.ops.rollback(length, cold, torch.tensor([90, 10, -1], **i32), flags)
    assert length.tolist() == [90, 200, 50] and flags.item() == 4
    kvq.ops.advance(length, cold, torch.tensor([0, 1, 101, 101], **i32), 64, 64)
    assert length.tolist() == [91, 300, 50]
    assert cold.tolist() == [kvq.cold_after(91, 0, 64, 64), kvq.cold_after(300, 64, 64, 64), 0]


def test_capacity_matches_the_readme(kvq):
    c = kvq.capacity("bf16|128|64|int2|int2", 32, 8, 128)
    assert c["bytes_per_token"] == 24576 and c["record_bytes"] == 6144


def test_opcheck_schemas(kvq):
    """torch.library.opcheck: schemas (what each op mutates), fake kernels, and the dispatcher."""
    fmt = formats(kvq)[0]
    cache = make_cache(kvq, "cpu", fmt)
    run_schedule(kvq, cache, [[80, 10]])
    gen = torch.Generator().manual_seed(2)
    q, k, v = step_tensors(cache, [2, 1], gen)
    step = cache.begin([0, 1], [2, 1])
    args = (cache.config, step.plan, cache.cold[0], cache.hot_k[0], cache.hot_v[0], None, None, 0, step.block_table,
            step.hot_slot, step.seq_len, step.seq_cold, step.cu_q, q, k, v, cache.softmax_scale, 0.0, cache.workspace,
            torch.empty_like(q), cache.flags)
    torch.library.opcheck(torch.ops.kvq.decode.default, args, test_utils=("test_schema", "test_faketensor"))
    args = (cache.config, cache.cold[0].clone(), cache.hot_k[0].clone(), cache.hot_v[0].clone(), None, None, 0,
            step.block_table, step.hot_slot, step.seq_len, step.seq_cold, step.cu_q, k, v, 16, cache.flags)
    torch.library.opcheck(torch.ops.kvq.append.default, args, test_utils=("test_schema", "test_faketensor"))


def test_torch_compile_fullgraph_cpu(kvq):
    """A model step calling the ops compiles with fullgraph=True and gives the eager result."""
    fmt = formats(kvq)[-1]
    eager = make_cache(kvq, "cpu", fmt, max_seqs=2)
    comp = make_cache(kvq, "cpu", fmt, max_seqs=2)
    for c in (eager, comp):
        run_schedule(kvq, c, [[100, 60]])
    gen = torch.Generator().manual_seed(3)
    proj = torch.randn(64, 64, generator=gen).to(torch.bfloat16)

    def layer(cache, x, k, v, step):
        q = (x @ proj).view(x.shape[0], cache.num_q_heads, cache.head_dim)
        return cache.attend(0, q, k, v, step).sum(dim=1)

    x = torch.randn(2, 6 * 64, generator=gen).to(torch.bfloat16)
    x = x.view(2, 6, 64).reshape(12, 64)[:2].contiguous()
    _, k, v = step_tensors(eager, [1, 1], gen)
    x = torch.randn(2, 64, generator=gen).to(torch.bfloat16)
    proj6 = torch.randn(64, 6 * 64, generator=gen).to(torch.bfloat16)

    def layer(cache, x, k, v, step):  # noqa: F811
        q = (x @ proj6).view(x.shape[0], cache.num_q_heads, cache.head_dim)
        return cache.attend(0, q, k, v, step).float().sum(dim=1)

    ref = layer(eager, x, k, v, eager.begin([0, 1], [1, 1]))
    compiled = torch.compile(layer, fullgraph=True)
    got = compiled(comp, x, k, v, comp.begin([0, 1], [1, 1]))
    assert torch.equal(ref, got)
    assert torch.equal(eager.hot_k, comp.hot_k)
