"""kvq_torch: kvq's quantized paged KV cache and attention kernels from PyTorch.

    import kvq_torch
    kvq_torch.compiled_configs()          # what this build holds, e.g. ['bf16|64|64|int2|int2', ...]
    cache = kvq_torch.Cache(layers=30, kv_heads=3, head_dim=64, num_q_heads=9,
                            format=kvq_torch.CacheFormat("int2", "int2", page=64, residual=128),
                            max_seqs=8, max_seq_len=8192, device="cuda")
    s = cache.new_sequence()
    step = cache.begin([s], [len(prompt)])   # host: pages, lengths, decode or prefill
    out = cache.attend(layer, q, k, v, step)  # per layer: attention, then append (torch.ops.kvq)
    cache.end(step)

The operators themselves are torch.ops.kvq.* (kvq_torch.ops documents them).
"""
from ._configs import ConfigError, cold_after, cold_pages_needed, layer_rotation_seed  # noqa: F401
from .ops import KvqError, built_with_cuda, capacity, compiled_configs, rotate_heads, rotated  # noqa: F401
from .cache import Cache, CacheFormat, Step  # noqa: F401
from . import ops  # noqa: F401

__version__ = "0.1.0"
