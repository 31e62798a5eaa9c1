// kv_cache_gpu_k2v4.cu - kvq's append, decode and prefill kernels for smollm2::GpuK2V4 (kv_cache_gpu.hpp).
#include <kvq/append/append_impl.cuh>
#include <kvq/decode/decode_impl.cuh>
#include <kvq/prefill/prefill_impl.cuh>

#include "kv_cache_gpu.hpp"

KVQ_INSTANTIATE_APPEND(smollm2::GpuK2V4);
KVQ_INSTANTIATE_DECODE(smollm2::GpuK2V4);
KVQ_INSTANTIATE_PREFILL(smollm2::GpuK2V4);
