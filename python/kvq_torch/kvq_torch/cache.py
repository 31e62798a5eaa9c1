"""kvq_torch.Cache: a model's kvq cache as torch tensors, with a simple block manager.

The Cache owns, for every layer, the cold pool, the hot rings (and sink rows), and shares across
layers the block table (one row per hot slot), the page free list and each sequence's lengths, as
docs/INTEGRATION.md describes. A step is three calls:

    step = cache.begin(seqs, num_new)      host: reserves pages, uploads the batch's lengths,
                                           block-table rows, slots and cu_q; decode (every
                                           sequence <= 16 new tokens) or prefill
    out = cache.attend(layer, q, k, v, step)   per layer, device only: attention over the cache
                                           and the step's own tokens, then their append
    cache.end(step)                        host: the sequences' new lengths

attend() only calls torch.ops.kvq on the step's tensors, so a model calling it compiles with
torch.compile(fullgraph=True), and a decode step can be captured in a CUDA graph (begin() with
`into=` a step of the same batch size refreshes the captured tensors in place).
An engine with its own block manager passes `block_table=` (int32 [batch][max_pages_per_seq], the
pages it put where kvq.cold_pages_needed says) and uses the ops directly for anything else.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional, Sequence

import torch

from . import ops
from ._configs import MAX_SINKS, canonical_format, cold_after, cold_pages_needed, key_of, layer_rotation_seed

DECODE_MAX_Q_LEN = 16  # kvq::kDecodeMaxQLen


@dataclass(frozen=True)
class CacheFormat:
    """kvq::CacheFormat: K and V formats, page P, hot window R (a multiple of P), attention sinks,
    the key-group range rule ("minmax" or "mse") and the rotation of q / k / v (kvq/quant/rotation.hpp:
    a per-head Hadamard transform with random signs, seed kvq::layer_rotation_seed(layer)), which
    Cache.attend applies unless the model already did (see Cache.attend)."""
    k: str = "int2"
    v: str = "int2"
    page: int = 64
    residual: int = 128
    sinks: int = 0
    key_clip: str = "minmax"
    rotate: bool = False

    def __post_init__(self):
        object.__setattr__(self, "k", canonical_format(self.k))
        object.__setattr__(self, "v", canonical_format(self.v))
        if self.residual < 0 or self.residual % self.page:
            raise ops.KvqError("kvq: kConfigMismatch: residual: R = %d must be a multiple of the page %d"
                               % (self.residual, self.page), "kConfigMismatch", "residual")
        if not 0 <= self.sinks <= MAX_SINKS or self.sinks >= self.page:
            raise ops.KvqError("kvq: kConfigMismatch: sinks: 0..16 and below the page", "kConfigMismatch", "sinks")
        if self.sinks and self.k == "none" and self.v == "none":
            raise ops.KvqError("kvq: kConfigMismatch: sinks: a 'none' cache keeps no sinks", "kConfigMismatch", "sinks")
        if self.key_clip not in ops.KEY_CLIP:
            raise ops.KvqError("kvq: kConfigMismatch: key_clip: 'minmax' or 'mse'", "kConfigMismatch", "key_clip")

    # kvq::recommended_int2() / _int4() / _k4v2() (kvq/cache/planner.hpp): page 64, R 128, 4 sinks,
    # min/max key groups, rotation on.
    @staticmethod
    def recommended_int2() -> "CacheFormat":
        return CacheFormat("int2", "int2", 64, 128, 4, "minmax", True)

    @staticmethod
    def recommended_int4() -> "CacheFormat":
        return CacheFormat("int4", "int4", 64, 128, 4, "minmax", True)

    @staticmethod
    def recommended_k4v2() -> "CacheFormat":
        return CacheFormat("int4", "int2", 64, 128, 4, "minmax", True)


@dataclass
class Step:
    """One step's batch, as the ops read it (device tensors) plus its host description."""
    seqs: list
    num_new: list
    decode: bool
    hot_slot: torch.Tensor
    block_table: torch.Tensor
    seq_len: torch.Tensor
    seq_cold: torch.Tensor
    cu_q: torch.Tensor
    plan: torch.Tensor
    max_new: int
    host_len: list = field(default_factory=list)
    host_cold: list = field(default_factory=list)


_DTYPE_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16"}


class Cache:
    def __init__(self, *, layers: int, kv_heads: int, head_dim: int, num_q_heads: int, format: CacheFormat,
                 max_seqs: int, max_seq_len: int, dtype=torch.bfloat16, device="cuda", num_pages: Optional[int] = None,
                 budget_bytes: Optional[int] = None, max_batch: Optional[int] = None, max_step_tokens: Optional[int] = None,
                 softmax_scale: Optional[float] = None, softcap: float = 0.0):
        if dtype not in _DTYPE_NAMES:
            raise ops.KvqError("kvq: kConfigMismatch: dtype: bf16 or fp16", "kConfigMismatch", "dtype")
        self.format = format
        self.layers, self.kv_heads, self.head_dim, self.num_q_heads = layers, kv_heads, head_dim, num_q_heads
        self.dtype, self.device = dtype, torch.device(device)
        self.page, self.residual = format.page, format.residual
        self.config = key_of(_DTYPE_NAMES[dtype], head_dim, format.page, format.k, format.v)
        if self.config not in ops.compiled_configs():
            raise ops.KvqError("kvq: kNotInstantiated: config: '%s' was not compiled into kvq_torch; compiled: %s"
                               % (self.config, ", ".join(ops.compiled_configs())), "kNotInstantiated", "config")
        self.key_clip = ops.KEY_CLIP[format.key_clip]
        # kvq::layer_rotation_seed(layer) of every layer (int64 bit patterns), used when format.rotate.
        self.rotation_seeds = [layer_rotation_seed(i) for i in range(layers)]
        self.softmax_scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(head_dim)
        self.softcap = softcap
        self.max_seqs, self.max_seq_len = max_seqs, max_seq_len
        self.max_batch = max_batch or max_seqs
        self.max_step_tokens = max_step_tokens or max(self.max_batch * DECODE_MAX_Q_LEN, 2048)
        cap = ops.capacity(self.config, layers, kv_heads, format.residual, format.sinks)
        self.record_bytes = cap["record_bytes"]
        self.max_pages_per_seq = cold_after(max_seq_len, 0, format.residual, format.page) // format.page
        if num_pages is None:
            if budget_bytes is not None:  # what is left after the rings, in whole pages of every layer
                left = budget_bytes - max_seqs * cap["hot_bytes_per_sequence"]
                num_pages = max(0, left // cap["page_bytes"])
            else:
                num_pages = max_seqs * self.max_pages_per_seq
        self.num_pages = max(int(num_pages), 1)  # kvq refuses a null pool, even an unused one
        dev, window = self.device, format.residual + format.page
        self.cold = torch.zeros(layers, self.num_pages, kv_heads, self.record_bytes, dtype=torch.uint8, device=dev)
        self.hot_k = torch.zeros(layers, max_seqs, window, kv_heads, head_dim, dtype=dtype, device=dev)
        self.hot_v = torch.zeros_like(self.hot_k)
        if format.sinks:
            self.sink_k = torch.zeros(layers, max_seqs, format.sinks, kv_heads, head_dim, dtype=dtype, device=dev)
            self.sink_v = torch.zeros_like(self.sink_k)
        else:
            self.sink_k = self.sink_v = None
        self.flags = torch.zeros(1, dtype=torch.int32, device=dev)
        # Host block manager: one block-table row per hot slot (= sequence id).
        self.table = torch.full((max_seqs, max(self.max_pages_per_seq, 1)), -1, dtype=torch.int32)
        self.free_pages = list(range(self.num_pages - 1, -1, -1))
        self.free_slots = list(range(max_seqs - 1, -1, -1))
        self.len = [0] * max_seqs
        self.cold_len = [0] * max_seqs
        # Decode plans per (batch size, longest q_len) of a step, as kvq::plan_decode is meant to be
        # called: the split count and the kernel's query-row tiles follow the batch and q_len (a plan
        # for 16 new tokens runs a plain decode step with 4x the row tiles and a few times fewer
        # splits: ~3.5x slower at batch 1 x 128K, INT2). All are made here (host only; decode asks
        # the GPU's occupancy) so the workspace covers every one of them and never moves (a captured
        # CUDA graph keeps its address). The prefill plan is for the largest step.
        self._decode_plans = {}
        ws = 0
        for b in range(1, self.max_batch + 1):
            for n in range(1, DECODE_MAX_Q_LEN + 1):
                plan = ops.plan_decode(self.config, b, num_q_heads, kv_heads, format.residual, max_seq_len, n, b * n, dev)
                self._decode_plans[(b, n)] = plan
                ws = max(ws, ops.plan_workspace_bytes(plan))
        self.decode_plan = self._decode_plans[(self.max_batch, DECODE_MAX_Q_LEN)]  # the widest (any decode step)
        self.prefill_plan = ops.plan_prefill(self.config, self.max_batch, num_q_heads, kv_heads, format.residual,
                                             max_seq_len, self.max_step_tokens, self.max_step_tokens, dev)
        ws = max(ws, ops.plan_workspace_bytes(self.prefill_plan))
        raw = torch.empty(ws + 256, dtype=torch.uint8, device=dev)
        self.workspace = raw[(-raw.data_ptr()) % 256:][:ws]  # 256-byte aligned, as kvq asks

    # ---- sequences and pages (host) --------------------------------------------------------------

    def new_sequence(self) -> int:
        """A free hot slot, which is also the sequence's id and block-table row."""
        if not self.free_slots:
            raise ops.KvqError("kvq: kInvalidHotSlot: max_seqs: every hot slot is in use", "kInvalidHotSlot", "max_seqs")
        s = self.free_slots.pop()
        self.len[s] = self.cold_len[s] = 0
        return s

    def free_sequence(self, seq: int) -> None:
        """Its pages and its slot go back to the free lists."""
        row = self.table[seq]
        self.free_pages.extend(int(p) for p in row.tolist() if p >= 0)
        row.fill_(-1)
        self.len[seq] = self.cold_len[seq] = 0
        self.free_slots.append(seq)

    def pages_free(self) -> int:
        return len(self.free_pages)

    def _reserve(self, seq: int, n: int) -> None:
        need = cold_pages_needed(self.len[seq], self.cold_len[seq], n, self.residual, self.page)
        first = self.cold_len[seq] // self.page
        if first + need > self.max_pages_per_seq:
            raise ops.KvqError("kvq: kBlockTableOverflow: num_new: sequence %d would exceed max_seq_len %d"
                               % (seq, self.max_seq_len), "kBlockTableOverflow", "num_new")
        missing = [i for i in range(first, first + need) if int(self.table[seq, i]) < 0]
        if len(missing) > len(self.free_pages):
            raise ops.KvqError("kvq: kInvalidPageId: num_pages: the pool has %d free pages, %d needed"
                               % (len(self.free_pages), len(missing)), "kInvalidPageId", "num_pages")
        for i in missing:
            self.table[seq, i] = self.free_pages.pop()

    # ---- a step -----------------------------------------------------------------------------------

    def decode_plan_for(self, batch: int, max_q_len: int) -> torch.Tensor:
        """The decode plan of a step of `batch` sequences, each with at most `max_q_len` new tokens."""
        if not (1 <= batch <= self.max_batch and 1 <= max_q_len <= DECODE_MAX_Q_LEN):
            raise ops.KvqError("kvq: kInvalidShape: max_q_len: batch 1..%d and q_len 1..%d"
                               % (self.max_batch, DECODE_MAX_Q_LEN), "kInvalidShape", "max_q_len")
        return self._decode_plans[(batch, max_q_len)]

    def begin(self, seqs: Sequence[int], num_new: Sequence[int], block_table: Optional[torch.Tensor] = None,
              into: Optional[Step] = None, max_q_len: Optional[int] = None) -> Step:
        """The step's batch: sequence `seqs[b]` gets `num_new[b]` tokens. Reserves the pages the
        append turns cold (unless the engine passes its own `block_table`), uploads lengths, slots,
        block-table rows and cu_q. A decode step's plan is made for its batch size and its longest
        q_len, or `max_q_len` (<= 16) when given: a step to capture in a CUDA graph whose replays
        bring up to max_q_len new tokens a sequence (speculative decoding). `into`: a Step of the
        same batch size whose tensors are refreshed in place (CUDA-graph replay); its plan must
        cover the new step (no more new tokens a sequence than it was made for)."""
        seqs, num_new = [int(s) for s in seqs], [int(n) for n in num_new]
        if len(seqs) != len(num_new) or not seqs or len(seqs) > self.max_batch or len(set(seqs)) != len(seqs):
            raise ops.KvqError("kvq: kInvalidShape: seqs: 1..max_batch distinct sequences, one count each",
                               "kInvalidShape", "seqs")
        for s, n in zip(seqs, num_new):
            if not 0 <= s < self.max_seqs or s in self.free_slots:
                raise ops.KvqError("kvq: kInvalidHotSlot: seqs: %d is not a live sequence" % s, "kInvalidHotSlot", "seqs")
            if n < 0 or self.len[s] + n > self.max_seq_len:
                raise ops.KvqError("kvq: kInvalidLength: num_new: sequence %d would exceed max_seq_len" % s,
                                   "kInvalidLength", "num_new")
        if sum(num_new) > self.max_step_tokens:
            raise ops.KvqError("kvq: kInvalidShape: num_new: %d tokens exceed max_step_tokens %d"
                               % (sum(num_new), self.max_step_tokens), "kInvalidShape", "num_new")
        if block_table is None:
            for s, n in zip(seqs, num_new):
                self._reserve(s, n)
        decode = max(num_new) <= DECODE_MAX_Q_LEN
        if max_q_len is not None and not max(num_new) <= max_q_len <= DECODE_MAX_Q_LEN:
            raise ops.KvqError("kvq: kInvalidShape: max_q_len: %d must be >= the step's longest q_len %d and <= %d"
                               % (max_q_len, max(num_new), DECODE_MAX_Q_LEN), "kInvalidShape", "max_q_len")
        if into is not None and (into.decode != decode or (decode and max(num_new) > into.max_new)):
            raise ops.KvqError("kvq: kInvalidShape: into: the step's plan was made for %s steps of at most %d new tokens "
                               "a sequence, not %d (begin the captured step with max_q_len=)"
                               % ("decode" if into.decode else "prefill", into.max_new, max(num_new)),
                               "kInvalidShape", "into")
        cu = [0]
        for n in num_new:
            cu.append(cu[-1] + n)
        host_len = [self.len[s] for s in seqs]
        host_cold = [self.cold_len[s] for s in seqs]
        dev = self.device
        ints = torch.tensor([seqs, host_len, host_cold], dtype=torch.int32)
        table = block_table if block_table is not None else self.table[torch.tensor(seqs)]
        if into is not None:
            if len(into.seqs) != len(seqs):
                raise ops.KvqError("kvq: kInvalidShape: into: a step of another batch size", "kInvalidShape", "into")
            into.hot_slot.copy_(ints[0], non_blocking=True)
            into.seq_len.copy_(ints[1], non_blocking=True)
            into.seq_cold.copy_(ints[2], non_blocking=True)
            into.cu_q.copy_(torch.tensor(cu, dtype=torch.int32), non_blocking=True)
            into.block_table.copy_(table, non_blocking=True)
            into.seqs, into.num_new, into.host_len, into.host_cold = seqs, num_new, host_len, host_cold
            if not decode:  # the prefill plan covers any step up to max_step_tokens
                into.max_new = max(into.max_new, max(num_new))
            return into
        ints = ints.to(dev)
        q_bound = (max_q_len or max(max(num_new), 1)) if decode else max(num_new)
        return Step(seqs=seqs, num_new=num_new, decode=decode, hot_slot=ints[0].contiguous(),
                    block_table=table.to(dev, dtype=torch.int32).contiguous(), seq_len=ints[1].contiguous(),
                    seq_cold=ints[2].contiguous(), cu_q=torch.tensor(cu, dtype=torch.int32, device=dev),
                    plan=self.decode_plan_for(len(seqs), q_bound) if decode else self.prefill_plan,
                    max_new=q_bound, host_len=host_len, host_cold=host_cold)

    def _rotate(self, layer: int, xs, inverse: bool, eager: bool, copy: bool = True):
        seed = self.rotation_seeds[layer]
        op = ops.rotate_heads if eager else (lambda t, s, i: torch.ops.kvq.rotate_heads(t, s, i) or t)
        return [op(x.contiguous().clone() if copy else x, seed, inverse) for x in xs]

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, step: Step,
               out: Optional[torch.Tensor] = None, rotated: bool = False) -> torch.Tensor:
        """Attention of the step's queries over the cache and their own tokens, then the append of
        k / v. q: [rows][num_q_heads][D], k, v: [rows][kv_heads][D] in the model dtype (rows = the
        step's tokens, sequence by sequence; RoPE applied). Returns [rows][num_q_heads][D].

        With format.rotate, the cache holds rotated K / V (kvq/quant/rotation.hpp, seed
        self.rotation_seeds[layer] = kvq::layer_rotation_seed(layer)): by default attend rotates
        copies of q, k and v in the model dtype and unrotates the output in place before returning
        it. rotated=True: the model rotated q / k / v itself (kvq_torch.ops.rotate_heads with the
        layer's seed, e.g. in fp32 before rounding to the model dtype, as examples/smollm2 does) and
        gets the output in the rotated domain, to unrotate (inverse=True, same seed) itself."""
        if out is None:
            out = torch.empty_like(q)
        sink_k = self.sink_k[layer] if self.sink_k is not None else None
        sink_v = self.sink_v[layer] if self.sink_v is not None else None
        # Eager calls raise KvqError; under torch.compile the ops are called as they are (ValueError).
        eager = not torch.compiler.is_compiling()
        rotate = self.format.rotate and not rotated
        if rotate:
            q, k, v = self._rotate(layer, (q, k, v), False, eager)
        attention = torch.ops.kvq.decode if step.decode else torch.ops.kvq.prefill
        append = torch.ops.kvq.append
        if eager:
            attention = ops.decode if step.decode else ops.prefill
            append = ops.append
        attention(self.config, step.plan, self.cold[layer], self.hot_k[layer], self.hot_v[layer], sink_k, sink_v,
                  self.key_clip, step.block_table, step.hot_slot, step.seq_len, step.seq_cold, step.cu_q, q, k, v,
                  self.softmax_scale, self.softcap, self.workspace, out, self.flags)
        append(self.config, self.cold[layer], self.hot_k[layer], self.hot_v[layer], sink_k, sink_v,
               self.key_clip, step.block_table, step.hot_slot, step.seq_len, step.seq_cold, step.cu_q, k, v, step.max_new,
               self.flags)
        if rotate:
            self._rotate(layer, (out,), True, eager, copy=False)
        return out

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor, step: Step, rotated: bool = False) -> None:
        """The append alone (an engine that runs its own attention, or prefix recomputation); k / v
        rotated here with format.rotate unless rotated=True (see attend)."""
        if self.format.rotate and not rotated:
            k, v = self._rotate(layer, (k, v), False, True)
        sink_k = self.sink_k[layer] if self.sink_k is not None else None
        sink_v = self.sink_v[layer] if self.sink_v is not None else None
        ops.append(self.config, self.cold[layer], self.hot_k[layer], self.hot_v[layer], sink_k, sink_v, self.key_clip,
                   step.block_table, step.hot_slot, step.seq_len, step.seq_cold, step.cu_q, k, v, step.max_new, self.flags)

    def end(self, step: Step) -> None:
        """The step's tokens are in: lengths advance (host), as kvq::cold_after says."""
        for s, n, l0, c0 in zip(step.seqs, step.num_new, step.host_len, step.host_cold):
            self.len[s] = l0 + n
            self.cold_len[s] = cold_after(l0 + n, c0, self.residual, self.page)

    def rollback(self, seq: int, new_len: int) -> None:
        """Speculative decoding: back to new_len tokens (O(1)); refused below the cold length."""
        if not self.cold_len[seq] <= new_len <= self.len[seq]:
            raise ops.KvqError("kvq.rollback: kInvalidLength: new_len: %d is outside [cold %d, len %d]"
                               % (new_len, self.cold_len[seq], self.len[seq]), "kInvalidLength", "new_len")
        self.len[seq] = new_len

    def dequantize(self, layer: int, seq: int, unrotate: bool = True):
        """Sequence seq's K and V of one layer as the cache holds them: [len][kv_heads][D] each
        (with format.rotate, unrotated back to the model's domain unless unrotate=False)."""
        n = self.len[seq]
        dev = self.device
        k = torch.empty(n, self.kv_heads, self.head_dim, dtype=self.dtype, device=dev)
        v = torch.empty_like(k)
        sink_k = self.sink_k[layer] if self.sink_k is not None else None
        sink_v = self.sink_v[layer] if self.sink_v is not None else None
        i32 = dict(dtype=torch.int32, device=dev)
        ops.dequantize(self.config, self.cold[layer], self.hot_k[layer], self.hot_v[layer], sink_k, sink_v, self.key_clip,
                       self.table[seq:seq + 1].to(dev), torch.tensor([seq], **i32), torch.tensor([n], **i32),
                       torch.tensor([self.cold_len[seq]], **i32), torch.tensor([0, n], **i32), n, k, v, self.flags)
        if self.format.rotate and unrotate:
            self._rotate(layer, (k, v), True, True, copy=False)
        return k, v

    def check_flags(self) -> int:
        """Reads and clears the flags word (synchronises); raises KvqError when a kernel skipped a
        sequence (kFlagBadSequence)."""
        f = int(self.flags.item())
        self.flags.zero_()
        if f & 4:
            raise ops.KvqError("kvq: kFlagBadSequence: flags: a kernel rejected a sequence on the device",
                               "kFlagBadSequence", "flags")
        return f
