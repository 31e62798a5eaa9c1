"""kvq's rotation (kvq/quant/rotation.hpp) through torch.ops.kvq.rotate_heads: the CPU op against
an independent fp32 re-implementation (bit for bit), rotate then unrotate, the per-layer seed,
refusals, the Cache's rotated formats; the CUDA op (kvq::rotate_heads) against the CPU op, bit for
bit (skipped without CUDA)."""
import dataclasses
import math

import pytest
import torch

from helpers import make_cache, step_tensors


def signs(seed, D):
    from kvq_torch._configs import mix64
    s = seed & ((1 << 64) - 1)
    return torch.tensor([-1.0 if mix64(s + (i + 1) * 0x9e3779b97f4a7c15) >> 63 else 1.0 for i in range(D)])


def reference(x, seed, inverse):
    """rotate<D> / unrotate<D> of kvq/quant/rotation.hpp in fp32 torch ops, same order: each
    element's operations are single IEEE additions / multiplications, so the bits must agree."""
    D = x.shape[-1]
    f = x.float().reshape(-1, D).clone()
    sg = signs(seed, D)
    scale = torch.tensor({64: 0.125, 128: 0.0883883461356163024902, 256: 0.0625}[D], dtype=torch.float32)
    if not inverse:
        f = f * sg
    n = 1
    while n < D:
        g = f.view(-1, D // (2 * n), 2, n)
        a, b = g[:, :, 0].clone(), g[:, :, 1].clone()
        g[:, :, 0], g[:, :, 1] = a + b, a - b
        n *= 2
    f = f * scale
    if inverse:
        f = f * sg
    return f.to(x.dtype).view(x.shape)


def data(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g)
    x[..., 5] *= 40  # an outlier channel, which the rotation spreads
    return x.to(dtype)


def test_layer_rotation_seed(kvq):
    from kvq_torch._configs import layer_rotation_seed
    for layer in (0, 1, 7, 29, 1000):
        assert layer_rotation_seed(layer) == kvq.ops.layer_rotation_seed(layer) == kvq.layer_rotation_seed(layer)
    assert len({layer_rotation_seed(i) for i in range(64)}) == 64


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("inverse", [False, True])
def test_cpu_op_matches_host_rotation_bitwise(kvq, dtype, D, inverse):
    seed = kvq.layer_rotation_seed(3)
    x = data((37, 3, D), dtype, D)
    want = reference(x, seed, inverse)
    got = kvq.rotated(x, seed, inverse)
    assert got.dtype == dtype and got.shape == x.shape
    assert torch.equal(got.view(torch.int16 if dtype != torch.float32 else torch.int32),
                       want.view(torch.int16 if dtype != torch.float32 else torch.int32))
    y = x.clone()
    assert kvq.rotate_heads(y, seed, inverse) is y and torch.equal(y, got)  # in place


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2 ** -7), (torch.float16, 2 ** -10)])
def test_rotate_then_unrotate_is_identity(kvq, dtype, tol):
    seed = kvq.layer_rotation_seed(11)
    x = data((64, 2, 64), dtype, 1)
    r = kvq.rotated(x, seed)
    back = kvq.rotated(r, seed, inverse=True)
    # Two roundings to the dtype (after each pass): within a few ulps of each vector's scale.
    err = (back.float() - x.float()).abs().amax(-1) / x.float().abs().amax(-1)
    assert float(err.max()) <= 4 * tol
    assert not torch.equal(r, x)
    # Orthonormal: q . k unchanged (fp32), and the outlier channel is spread.
    q, k = data((8, 64), torch.float32, 2), data((8, 64), torch.float32, 3)
    assert torch.allclose((kvq.rotated(q, seed) * kvq.rotated(k, seed)).sum(-1), (q * k).sum(-1), rtol=1e-5, atol=1e-3)
    assert float(kvq.rotated(q, seed).abs().amax()) < 0.5 * float(q.abs().amax())


def test_rotation_refusals(kvq):
    seed = kvq.layer_rotation_seed(0)
    for x, status in ((torch.zeros(4, 96), "kConfigMismatch"), (torch.zeros(4, 64, dtype=torch.int32), "kInvalidShape"),
                      (torch.zeros(64, 4).t(), "kInvalidShape")):
        with pytest.raises(kvq.KvqError) as e:
            kvq.rotate_heads(x, seed)
        assert e.value.status == status and e.value.argument == "x"
    kvq.rotate_heads(torch.zeros(0, 64), seed)  # nothing to do


def test_recommended_formats_carry_the_rotation(kvq):
    F = kvq.CacheFormat
    for f, k, v in ((F.recommended_int2(), "int2", "int2"), (F.recommended_int4(), "int4", "int4"),
                    (F.recommended_k4v2(), "int4", "int2")):
        assert (f.k, f.v, f.page, f.residual, f.sinks, f.key_clip, f.rotate) == (k, v, 64, 128, 4, "minmax", True)
    assert not F().rotate


def _formats(kvq):
    return {tuple(c.split("|")[3:]) for c in kvq.compiled_configs() if c.startswith("bf16|64|64|")}


def test_cache_rotation_inside_attend_equals_the_models_own(kvq):
    """Cache.attend with format.rotate rotates q / k / v in the model dtype and unrotates the output:
    the same as a model rotating them itself (rotated=True) and unrotating the output; and with an
    unquantized cache the rotated attention is the plain one up to bf16 rounding."""
    have = _formats(kvq)
    if ("int2", "int2") not in have or ("none", "none") not in have:
        pytest.skip("needs bf16|64|64|int2|int2 and none|none")
    rec = kvq.CacheFormat.recommended_int2()
    a, b = make_cache(kvq, "cpu", rec, layers=2), make_cache(kvq, "cpu", rec, layers=2)
    plain = make_cache(kvq, "cpu", kvq.CacheFormat("none", "none", 64, 128))
    none_rot = make_cache(kvq, "cpu", kvq.CacheFormat("none", "none", 64, 128, rotate=True))
    gen = torch.Generator().manual_seed(5)
    caches = (a, b, plain, none_rot)
    sa = [c.new_sequence() for c in caches][0]
    for num_new in ([150], [1], [70], [3]):
        q, k, v = step_tensors(a, num_new, gen)
        seed = a.rotation_seeds[1]
        steps = [c.begin([sa], num_new) for c in caches]
        oa = a.attend(1, q, k, v, steps[0])
        ob = b.attend(1, *(kvq.rotated(t, seed) for t in (q, k, v)), steps[1], rotated=True)
        kvq.rotate_heads(ob, seed, inverse=True)
        assert torch.equal(oa, ob)
        op = plain.attend(0, q, k, v, steps[2])
        on = none_rot.attend(0, q, k, v, steps[3])
        assert float((op.float() - on.float()).abs().max()) <= 0.05 * float(op.float().abs().max()) + 1e-2
        for c, st in zip(caches, steps):
            c.end(st)
    ka, _ = a.dequantize(1, sa)  # unrotated back to the model's domain
    kr, _ = a.dequantize(1, sa, unrotate=False)
    assert torch.equal(kvq.rotated(kr, a.rotation_seeds[1], inverse=True), ka)


def test_rotate_heads_cuda_matches_cpu_bitwise(kvq, cuda):
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for D in (64, 128, 256):
            for inverse in (False, True):
                seed = kvq.layer_rotation_seed(D + inverse)
                x = data((1001, D), dtype, D)  # not a multiple of the kernel's 8 warps
                c = kvq.rotated(x, seed, inverse)
                g = kvq.rotated(x.to(cuda), seed, inverse)
                torch.cuda.synchronize()
                assert torch.equal(g.cpu().view(torch.uint8), c.view(torch.uint8)), (dtype, D, inverse)


def test_recommended_int2_cuda_matches_cpu(kvq, cuda):
    """kvq::recommended_int2 (rotation in attend, 4 sinks) with MSE key groups, on CUDA and on the CPU:
    the same cold pool, sink rows and hot rows bit for bit, and close outputs (the handle passes
    sinks and key_clip through to the kernels)."""
    if ("int2", "int2") not in _formats(kvq):
        pytest.skip("needs bf16|64|64|int2|int2")
    rec = dataclasses.replace(kvq.CacheFormat.recommended_int2(), key_clip="mse")
    g, c = make_cache(kvq, cuda, rec, layers=2), make_cache(kvq, "cpu", rec, layers=2)
    gen = torch.Generator().manual_seed(9)
    s = g.new_sequence()
    assert s == c.new_sequence()
    for num_new in ([200], [1], [90], [16], [130]):
        q, k, v = step_tensors(c, num_new, gen)
        sg, sc = g.begin([s], num_new), c.begin([s], num_new)
        og = g.attend(1, q.cuda(), k.cuda(), v.cuda(), sg)
        oc = c.attend(1, q, k, v, sc)
        torch.cuda.synchronize()
        assert g.check_flags() in (0, 1, 2)
        assert float((og.cpu().float() - oc.float()).abs().max()) <= 0.02 * float(oc.float().abs().max()) + 1e-2
        g.end(sg)
        c.end(sc)
        used = g.num_pages - g.pages_free()
        assert torch.equal(g.cold[:, :used].cpu(), c.cold[:, :used]), "cold pool differs after %s" % num_new
        assert torch.equal(g.sink_k.cpu(), c.sink_k) and torch.equal(g.sink_v.cpu(), c.sink_v)
        kg, vg = g.dequantize(1, s)
        kc, vc = c.dequantize(1, s)
        assert torch.equal(kg.cpu(), kc) and torch.equal(vg.cpu(), vc)
