"""torch.ops.kvq: kvq's operations as PyTorch operators, their fake (meta) kernels for
torch.compile, and the error type.

Every op is registered by the native library (csrc/kvq_torch.cpp) with a schema that marks what it
mutates (Tensor(a!)): append writes the cold pool, the rings and the sink rows; decode / prefill /
dequantize write their outputs, the workspace and the flags; rollback and advance the lengths. The
ops run on the current CUDA stream, never synchronise and never allocate: a decode step (append +
decode, with plans made beforehand) can be captured in a CUDA graph. Plans are host-side:
plan_decode / plan_prefill return a CPU uint8 tensor holding kvq's plan, made once per batch-shape
bound, and the run ops read it on the host.

Refusals raise KvqError (a ValueError) naming kvq's Status and the argument, before anything is
written; the wrappers here convert the ValueError the native op raises. Through torch.ops.kvq
directly, the same message comes as ValueError ("kvq.<op>: <Status>: <argument>: <why>").
"""
from __future__ import annotations

import functools
import re

import torch

from . import _C  # noqa: F401  registers torch.ops.kvq

_ops = torch.ops.kvq

KEY_CLIP = {"minmax": 0, "mse": 1}


class KvqError(ValueError):
    """A call kvq refused. status: kvq::Status's name ("kInvalidShape"); argument: the argument
    concerned ("new_k", "config", ...; "-" when kvq cannot tell)."""

    def __init__(self, message: str, status: str = "", argument: str = "", op: str = ""):
        super().__init__(message)
        self.status, self.argument, self.op = status, argument, op


_MESSAGE = re.compile(r"kvq\.(\w+): (k\w+): ([^:]+): (.*)", re.S)


def _translate(exc: BaseException) -> BaseException:
    m = _MESSAGE.search(str(exc))
    if not m:
        return exc
    return KvqError(m.group(0).split("\n")[0], status=m.group(2), argument=m.group(3), op=m.group(1))


def _wrap(op):
    @functools.wraps(op)
    def call(*args, **kwargs):
        try:
            return op(*args, **kwargs)
        except ValueError as e:
            raise _translate(e) from None
    return call


# ---- fake kernels: what torch.compile sees (shapes only, no data) ------------------------------

@torch.library.register_fake("kvq::append")
def _append_fake(config, cold, hot_k, hot_v, sink_k, sink_v, key_clip, block_table, hot_slot, seq_len, seq_cold,
                 cu_new, new_k, new_v, max_new_tokens, flags):
    return None


def _attention_fake(config, plan, cold, hot_k, hot_v, sink_k, sink_v, key_clip, block_table, hot_slot, seq_len, seq_cold,
                    cu_q, q, new_k, new_v, softmax_scale, softcap, workspace, out, flags):
    return None


torch.library.register_fake("kvq::decode")(_attention_fake)
torch.library.register_fake("kvq::prefill")(_attention_fake)


@torch.library.register_fake("kvq::dequantize")
def _dequantize_fake(config, cold, hot_k, hot_v, sink_k, sink_v, key_clip, block_table, hot_slot, seq_len, seq_cold,
                     cu_out, max_len, k_out, v_out, flags):
    return None


@torch.library.register_fake("kvq::rollback")
def _rollback_fake(seq_len, seq_cold, new_len, flags):
    return None


@torch.library.register_fake("kvq::advance")
def _advance_fake(seq_len, seq_cold, cu_new, residual, page):
    return None


@torch.library.register_fake("kvq::rotate_heads")
def _rotate_heads_fake(x, seed, inverse):
    return None


_PLAN_NBYTES = list(_ops.plan_nbytes())


@torch.library.register_fake("kvq::plan_decode")
def _plan_decode_fake(config, batch, num_q_heads, num_kv_heads, residual, max_tokens, max_q_len, total_q, device):
    return torch.empty(_PLAN_NBYTES[0], dtype=torch.uint8, device="cpu")


@torch.library.register_fake("kvq::plan_prefill")
def _plan_prefill_fake(config, batch, num_q_heads, num_kv_heads, residual, max_tokens, max_q_len, total_q, device):
    return torch.empty(_PLAN_NBYTES[1], dtype=torch.uint8, device="cpu")


# ---- eager wrappers (KvqError instead of ValueError) -------------------------------------------

append = _wrap(_ops.append)
decode = _wrap(_ops.decode)
prefill = _wrap(_ops.prefill)
dequantize = _wrap(_ops.dequantize)
rollback = _wrap(_ops.rollback)
advance = _wrap(_ops.advance)
plan_decode = _wrap(_ops.plan_decode)
plan_prefill = _wrap(_ops.plan_prefill)
plan_workspace_bytes = _wrap(_ops.plan_workspace_bytes)
_capacity = _wrap(_ops.capacity)
_decode_plan_info = _wrap(_ops.decode_plan_info)

DECODE_PLAN_FIELDS = ("batch", "num_q_heads", "num_kv_heads", "residual", "max_tokens", "max_q_len", "total_q", "num_sms",
                      "rows_per_cta", "split_tokens", "max_splits", "tail_slots", "tail_span", "tail_ctas",
                      "dependent_launches", "workspace_bytes")


def decode_plan_info(plan: torch.Tensor) -> dict:
    """What a decode plan (plan_decode's tensor) chose: its shape bounds, the split (split_tokens,
    max_splits), the kernel (rows_per_cta: 64 = the many-row kernel, else the records kernel's
    query-row tile), the tail schedule and the workspace (kvq/decode/plan.hpp)."""
    return dict(zip(DECODE_PLAN_FIELDS, _decode_plan_info(plan)))
_rotate_heads = _wrap(_ops.rotate_heads)


def rotate_heads(x: torch.Tensor, seed: int, inverse: bool = False) -> torch.Tensor:
    """kvq/quant/rotation.hpp's rotation (or, inverse, unrotation) of every head vector of x, in
    place, and x returned: x [..., D] with D 64, 128 or 256 its last dimension, float32, bfloat16
    or float16, contiguous, on the CPU (kvq's host functions) or CUDA (kvq::rotate_heads, current
    stream); both give the same bits. Each vector goes through fp32 and is rounded once. seed: a
    per-layer seed, e.g. layer_rotation_seed(layer) (an int64 bit pattern of kvq's uint64 seed)."""
    _rotate_heads(x, seed, inverse)
    return x


def rotated(x: torch.Tensor, seed: int, inverse: bool = False) -> torch.Tensor:
    """rotate_heads on a contiguous copy of x (x itself untouched)."""
    y = x.contiguous().clone()
    _rotate_heads(y, seed, inverse)
    return y


def layer_rotation_seed(layer: int) -> int:
    """kvq::layer_rotation_seed(layer) (the seed kvq's examples use for layer `layer`), as the int64
    bit pattern rotate_heads takes."""
    return int(_ops.layer_rotation_seed(layer))


def compiled_configs() -> list[str]:
    """The configuration keys compiled into this build ("bf16|64|64|int2|int2", ...)."""
    return list(_ops.compiled_configs())


def built_with_cuda() -> bool:
    return bool(_ops.built_with_cuda())


def capacity(config: str, layers: int, kv_heads: int, residual: int, sinks: int = 0, budget: int = 0,
             num_seqs: int = 1, seq_len: int = 0) -> dict:
    """kvq/cache/planner.hpp for a format (compiled or not; every layer counted): record_bytes
    (one page and KV head), page_bytes (one page, every layer and KV head), hot_bytes_per_sequence,
    bytes_per_token, bytes_for_sequence(seq_len), sequences_that_fit(budget, seq_len),
    tokens_that_fit(budget, num_seqs)."""
    r = _capacity(config, layers, kv_heads, residual, sinks, budget, num_seqs, seq_len)
    page = int(config.split("|")[2])
    return {"record_bytes": r[0], "page_bytes": r[1], "hot_bytes_per_sequence": r[2],
            "bytes_per_token": r[1] / page, "bytes_for_sequence": r[3], "sequences_that_fit": r[4],
            "tokens_that_fit": r[5]}
