"""Every way bench/sdpa_prefill.py and bench/sdpa_decode.py compute, with PyTorch, the attention kvq
computes: a chunk of C new queries over P cached keys plus the chunk itself, causal aligned to the
bottom right (query i of the chunk sees keys 0 .. P + i), bf16, dense K/V (B, Hk, P + C, D).

A candidate is named backend+formulation+gqa:
  backend      flash, efficient, cudnn, math: PyTorch's SDPA backends; flex: FlexAttention
               (torch.compile'd).
  formulation  lower_right  one call with the backend's own bottom-right causal mask: flash's
                            is_causal (bottom-right when C < P + C), efficient's custom mask type 2,
                            flex's block mask; cuDNN's is_causal is tried too and kept only where it
                            checks out (PyTorch's is_causal means top-left).
               mask         one call of F.scaled_dot_product_attention under sdpa_kernel(backend)
                            with an explicit additive bf16 mask (1, 1, C, P + C) of 0 / -inf.
               split        two calls, the prefix part without a mask and the chunk's causal square,
                            each returning its log-sum-exp, merged exactly:
                            out = out_c + (out_p - out_c) * sigmoid(lse_p - lse_c) (fp32, one
                            torch.compile'd kernel where compile works). The LSE comes from
                            aten::_scaled_dot_product_{flash,efficient,cudnn}_attention; "math" has
                            no LSE output, so math+split is eager fp32 matmul + logsumexp.
               nomask       C == 1 (decode q_len 1): the query sees every key, no mask needed.
  gqa          gqa: K/V keep their Hk heads (enable_gqa=True, or the kernel's own GQA);
               expand: K/V repeated to the Hq query heads before timing (the copy is not timed).

Every candidate is checked before it is timed: against an fp32 reference at a small shape (all
rows), then at the timed shape (sampled query rows and batches). One that raises, is unsupported
or does not match (relative L2 error over TOL) is skipped, and the reason logged.
"""
import csv
import math

import torch
import torch.nn.functional as F

TOL = 2e-2  # relative L2 error against the fp32 reference; bf16 outputs land at ~3e-3

BACKENDS = ("flash", "efficient", "cudnn", "math", "flex")


class Skip(Exception):
    """A candidate that cannot run here; the message says why."""


def _aten(name, **kw):
    """aten::name with those keyword arguments its schema has (the set changed across versions)."""
    op = getattr(torch.ops.aten, name, None)
    if op is None:
        raise Skip(f"this PyTorch has no aten::{name}")
    names = {a.name for a in op.default._schema.arguments}
    return op(**{k: v for k, v in kw.items() if k in names})


def candidates(chunk, prefix, flex=True, math_backend=True):
    """(backend, formulation, gqa) in timing order: the likely fastest first, so a time budget cuts
    the slow ones (explicit masks, math, flex compiles)."""
    if chunk == 1:
        forms = [(b, "nomask") for b in ("flash", "cudnn", "efficient")]
        slow = [("math", "nomask")]
    else:
        forms = [("cudnn", "split"), ("flash", "lower_right"), ("flash", "split"), ("cudnn", "lower_right"),
                 ("efficient", "lower_right"), ("efficient", "split")]
        slow = [("cudnn", "mask"), ("efficient", "mask"), ("flash", "mask"), ("math", "mask"), ("math", "split")]
    out = [(b, f, g) for g in ("gqa", "expand") for b, f in forms]
    if not math_backend:
        slow = [s for s in slow if s[0] != "math"]
    out += [(b, f, g) for b, f in slow for g in ("gqa", "expand")]
    if flex:
        out.append(("flex", "nomask" if chunk == 1 else "lower_right", "gqa"))
    return out


def name(cand):
    return "+".join(cand)


def free_bytes(dev):
    if dev.type == "cuda":
        return torch.cuda.mem_get_info(dev)[0]
    return 8 << 30


def attend_fp32(q, k, v, offset, scale):
    """Reference / math: softmax(q k^T * scale) v in fp32, query row r of q seeing keys 0 .. offset[r]
    (offset: LongTensor (C,) or None for every key). K/V may have fewer heads (GQA, query head h
    reading KV head h // (Hq / Hk)). Returns (out fp32 (B, Hq, C, D), lse (B, Hq, C))."""
    b, hq, c, d = q.shape
    hk, s = k.shape[1], k.shape[2]
    g = hq // hk
    scores = torch.matmul(q.float().reshape(b, hk, g * c, d), k.float().transpose(-1, -2)).mul_(scale)
    scores = scores.view(b, hk, g, c, s)
    if offset is not None:
        keep = torch.arange(s, device=q.device)[None, :] <= offset[:, None]  # (C, S)
        scores.masked_fill_(~keep, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    p = torch.exp_(scores.sub_(lse[..., None]))
    out = torch.matmul(p.view(b, hk, g * c, s), v.float()).view(b, hk, g, c, d)
    return out.reshape(b, hq, c, d), lse.reshape(b, hq, c)


def merge(out_p, lse_p, out_c, lse_c):
    """Exact merge of two softmax-attention parts over disjoint key sets."""
    w = torch.sigmoid(lse_p - lse_c).unsqueeze(-1)
    return torch.lerp(out_c.float(), out_p.float(), w).to(out_p.dtype)


_compiled = {}


def compiled(key, fn, log):
    """torch.compile(fn), or fn itself (logged once) where compile fails."""
    if key not in _compiled:
        try:
            _compiled[key] = torch.compile(fn)
        except Exception as e:  # noqa: BLE001 -- any compile failure falls back to eager
            log(f"  torch.compile({key}) failed ({type(e).__name__}: {str(e)[:120]}); eager")
            _compiled[key] = fn
    return _compiled[key]


class Problem:
    """Inputs of one shape. split_views: the split's prefix part reads a view of the full K/V (decode,
    where a copy would not fit) instead of its own contiguous tensor (prefill: the engine's cache
    holds the prefix, the chunk's K/V arrive separately, as kvq's prefill takes them)."""

    def __init__(self, batch, hq, hk, d, chunk, prefix, dev, split_views, seed=0):
        gen = torch.Generator(device=dev).manual_seed(seed)
        self.b, self.hq, self.hk, self.d, self.c, self.p = batch, hq, hk, d, chunk, prefix
        self.s = prefix + chunk
        self.dev = dev
        self.scale = 1.0 / math.sqrt(d)
        rnd = lambda *shape: torch.randn(*shape, device=dev, dtype=torch.bfloat16, generator=gen)  # noqa: E731
        self.q = rnd(batch, hq, chunk, d)
        if split_views or prefix == 0:
            self.k, self.v = rnd(batch, hk, self.s, d), rnd(batch, hk, self.s, d)
            self.parts = {"gqa": (self.k[:, :, :prefix], self.v[:, :, :prefix], self.k[:, :, prefix:].contiguous(),
                                  self.v[:, :, prefix:].contiguous())}
        else:
            kp, vp, kc, vc = rnd(batch, hk, prefix, d), rnd(batch, hk, prefix, d), rnd(batch, hk, chunk, d), rnd(batch, hk, chunk, d)
            self.k, self.v = torch.cat([kp, kc], 2), torch.cat([vp, vc], 2)
            self.parts = {"gqa": (kp, vp, kc, vc)}
        self.split_views = split_views
        self.full = {"gqa": (self.k, self.v)}
        self._mask = None
        self._ref = {}

    def kv_bytes(self, heads):
        return 2 * self.b * heads * self.s * self.d * 2

    def _expand(self, xs):
        need = self.kv_bytes(self.hq)
        if need > 0.6 * free_bytes(self.dev):
            raise Skip(f"K/V expanded to {self.hq} heads need {need / 2**30:.1f} GiB more "
                       f"({free_bytes(self.dev) / 2**30:.1f} GiB free)")
        return tuple(x.repeat_interleave(self.hq // self.hk, dim=1) for x in xs)

    def kv(self, gqa):
        """Full K/V (B, Hk or Hq, P + C, D)."""
        if gqa not in self.full:
            self.full[gqa] = self._expand(self.full["gqa"])
        return self.full[gqa]

    def split_kv(self, gqa):
        """The split's prefix K/V and chunk K/V."""
        if gqa not in self.parts:
            if self.split_views:
                k, v = self.kv(gqa)
                self.parts[gqa] = (k[:, :, :self.p], v[:, :, :self.p], k[:, :, self.p:].contiguous(), v[:, :, self.p:].contiguous())
            else:
                self.parts[gqa] = self._expand(self.parts["gqa"])
        return self.parts[gqa]

    def mask(self):
        if self._mask is None:
            need = self.c * self.s * 2
            if need > 0.25 * free_bytes(self.dev):
                raise Skip(f"explicit mask needs {need / 2**30:.1f} GiB")
            keep = torch.arange(self.s, device=self.dev)[None, :] <= (torch.arange(self.c, device=self.dev) + self.p)[:, None]
            m = torch.zeros(self.c, self.s, device=self.dev, dtype=torch.bfloat16)
            self._mask = m.masked_fill_(~keep, float("-inf"))[None, None]
        return self._mask

    def math_fits(self, heads):
        need = 3 * self.b * self.hq * self.c * self.s * 4 + 2 * self.b * heads * self.s * self.d * 4
        if need > 0.6 * free_bytes(self.dev):
            raise Skip(f"math needs ~{need / 2**30:.0f} GiB of scores and fp32 K/V "
                       f"({free_bytes(self.dev) / 2**30:.0f} GiB free)")

    def sample(self, full):
        """Query rows and batches checked at this shape: all of them at a small shape, else the
        first, middle and last 64 rows of the first and last sequence."""
        if full:
            return list(range(self.c)), list(range(self.b))
        rows = sorted({*range(min(64, self.c)), *range(self.c // 2, min(self.c, self.c // 2 + 64)), *range(max(0, self.c - 64), self.c)})
        return rows, sorted({0, self.b - 1})

    def error(self, out, full):
        rows, batches = self.sample(full)
        key = (tuple(rows), tuple(batches))
        if key not in self._ref:
            r = torch.tensor(rows, device=self.dev)
            bi = torch.tensor(batches, device=self.dev)
            q = self.q.index_select(0, bi).index_select(2, r)
            ref, _ = attend_fp32(q, self.k.index_select(0, bi), self.v.index_select(0, bi), r + self.p, self.scale)
            self._ref = {key: ref}
        ref = self._ref[key]
        got = out.index_select(0, torch.tensor(batches, device=self.dev)).index_select(2, torch.tensor(rows, device=self.dev)).float()
        if not torch.isfinite(got).all():
            return float("inf")
        return ((got - ref).norm() / ref.norm()).item()


def _part(backend, q, k, v, causal, scale, want_lse):
    """One attention call without a mask (causal: is_causal on a square); (out (B,H,C,D), lse (B,H,C))."""
    b, h, c, _ = q.shape
    if backend == "flash":
        if q.is_cuda:
            o, lse = _aten("_scaled_dot_product_flash_attention", query=q, key=k, value=v, dropout_p=0.0,
                           is_causal=causal, return_debug_mask=False, scale=scale)[:2]
        else:
            o, lse = _aten("_scaled_dot_product_flash_attention_for_cpu", query=q, key=k, value=v, dropout_p=0.0,
                           is_causal=causal, scale=scale)[:2]
    elif backend == "efficient":
        if not q.is_cuda:
            raise Skip("CUDA only")
        o, lse = _aten("_scaled_dot_product_efficient_attention", query=q, key=k, value=v, attn_bias=None,
                       compute_log_sumexp=want_lse, dropout_p=0.0, is_causal=causal, scale=scale)[:2]
    elif backend == "cudnn":
        if not q.is_cuda:
            raise Skip("CUDA only")
        o, lse = _aten("_scaled_dot_product_cudnn_attention", query=q, key=k, value=v, attn_bias=None,
                       compute_log_sumexp=want_lse, dropout_p=0.0, is_causal=causal, return_debug_mask=False,
                       scale=scale)[:2]
    else:
        raise AssertionError(backend)
    return o, (lse.reshape(b, h, -1)[..., :c] if want_lse else None)


_SDPA = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION", "cudnn": "CUDNN_ATTENTION", "math": "MATH"}


def build(cand, pb, log):
    """The timed callable of a candidate on problem pb (raises Skip)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend, form, gqa = cand
    q, sc = pb.q, pb.scale
    heads = pb.hk if gqa == "gqa" else pb.hq
    if backend in ("efficient", "cudnn") and not q.is_cuda:
        raise Skip("CUDA only")
    if form == "split":
        if pb.p == 0:
            raise Skip("prefix 0: the split is the causal call alone (lower_right)")
        kp, vp, kc, vc = pb.split_kv(gqa)
        if backend == "math":
            pb.math_fits(heads)

            def fn():
                op, lp = attend_fp32(q, kp, vp, None, sc)
                oc, lc = attend_fp32(q, kc, vc, torch.arange(pb.c, device=pb.dev), sc)
                return merge(op.to(q.dtype), lp, oc.to(q.dtype), lc)
            return fn
        mrg = compiled("merge", merge, log)

        def fn():
            op, lp = _part(backend, q, kp, vp, False, sc, True)
            oc, lc = _part(backend, q, kc, vc, True, sc, True)
            return mrg(op, lp, oc, lc)
        return fn
    k, v = pb.kv(gqa)
    if backend == "flex":
        if gqa != "gqa":
            raise Skip("flex runs GQA natively")
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        fx = compiled("flex", flex_attention, log)
        bm = None
        if form == "lower_right":
            off = torch.tensor(pb.p, device=pb.dev)
            bm = create_block_mask(lambda b, h, qi, ki: ki <= qi + off, None, None, pb.c, pb.s, device=pb.dev)
        return lambda: fx(q, k, v, block_mask=bm, scale=sc, enable_gqa=heads != pb.hq)
    if form in ("mask", "nomask") and (form == "mask" or backend == "math"):
        mask = pb.mask() if form == "mask" else None
        if backend == "math":
            pb.math_fits(heads)
        kw = {"enable_gqa": True} if heads != pb.hq else {}
        be = getattr(SDPBackend, _SDPA[backend])

        def fn():
            with sdpa_kernel(be):
                return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=sc, **kw)
        return fn
    causal = form == "lower_right"
    if backend == "efficient" and causal:
        def fn():
            return _aten("_efficient_attention_forward", query=q.transpose(1, 2), key=k.transpose(1, 2),
                         value=v.transpose(1, 2), bias=None, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=pb.c,
                         max_seqlen_k=pb.s, dropout_p=0.0, custom_mask_type=2, compute_log_sumexp=False,
                         scale=sc)[0].transpose(1, 2)
        return fn
    return lambda: _part(backend, q, k, v, causal, sc, False)[0]


def verify(cand, pb, log, full):
    """Builds the candidate on pb and checks one call's output; returns the callable (raises Skip)."""
    try:
        fn = build(cand, pb, log)
        out = fn()
    except Skip:
        raise
    except Exception as e:  # noqa: BLE001 -- a backend that does not take the inputs raises anything
        msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise Skip(f"{type(e).__name__}: {msg[:160]}") from None
    err = pb.error(out, full)
    if not err <= TOL:
        raise Skip(f"does not match the fp32 reference (relative error {err:.3g} at "
                   f"{'the small check shape' if full else 'the timed shape'})")
    return fn, err


def time_all(pb, cands, small, small_key, checked, flush, reps, deadline, log, on_result):
    """Checks and times each candidate on pb: the small-shape check first (once per candidate and
    small_key in `checked`, a dict kept across shapes; small() builds its Problem), then the timed
    shape's check, then the median time (sdpa_timing.median_us), passed to on_result(time_us, name,
    error) at once. deadline: time.monotonic() past which candidates are skipped (None: none).
    Returns ([(time_us, name, error)], [(name, reason)])."""
    import time

    from sdpa_timing import median_us

    done, skipped = [], []
    for cand in cands:
        nm = name(cand)
        if deadline is not None and time.monotonic() > deadline:
            skipped.append((nm, "time budget (--budget-s) spent"))
            continue
        key = (cand, small_key)
        if key not in checked:
            spb = small()
            try:
                _, err = verify(cand, spb, log, full=True)
                checked[key] = None
                log(f"  check {nm}: relative error {err:.2g} (batch {spb.b} chunk {spb.c} prefix {spb.p}, all rows)")
            except Skip as e:
                checked[key] = str(e)
            del spb
        if checked[key] is not None:
            skipped.append((nm, checked[key]))
            continue
        try:
            fn, err = verify(cand, pb, log, full=False)
            t = median_us(fn, flush, reps)
            done.append((t, nm, err))
            on_result(t, nm, err)
        except Skip as e:
            skipped.append((nm, str(e)))
        except Exception as e:  # noqa: BLE001 -- e.g. out of memory while timing
            skipped.append((nm, f"{type(e).__name__}: {str(e).strip()[:160]}"))
        finally:
            if pb.dev.type == "cuda":
                torch.cuda.empty_cache()
    return done, skipped


def finish_shape(results, skipped, log, best_text, dev, csv_path, columns, rows):
    """After one shape: log the skipped candidates and the fastest (best_text(time_us) describes
    its rate), free the shape's memory, and rewrite the CSV with every row so far (a run cut short
    keeps what it measured)."""
    for nm, why in skipped:
        log(f"  skipped {nm}: {why}")
    if results:
        t, nm, _ = min(results)
        log(f"  best: {nm}, {t:.1f} us, {best_text(t)}")
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    if csv_path:
        with open(csv_path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(columns)
            w.writerows(rows)
