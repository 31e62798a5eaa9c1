// kv_cache_gpu_int2_k16v64.cu - kvq's append, decode and prefill kernels for smollm2::GpuInt2K16V64 (kv_cache_gpu.hpp).
#include <kvq/append/append_impl.cuh>
#include <kvq/decode/decode_impl.cuh>
#include <kvq/prefill/prefill_impl.cuh>

#include "kv_cache_gpu.hpp"

KVQ_INSTANTIATE_APPEND(smollm2::GpuInt2K16V64);
KVQ_INSTANTIATE_DECODE(smollm2::GpuInt2K16V64);
KVQ_INSTANTIATE_PREFILL(smollm2::GpuInt2K16V64);
