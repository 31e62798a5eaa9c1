// The append, decode and prefill kernels for one configuration of engine::Instances (kvq_instances.hpp),
// compiled by nvcc.
#include <kvq/append/append_impl.cuh>
#include <kvq/decode/decode_impl.cuh>
#include <kvq/prefill/prefill_impl.cuh>
#include "kvq_instances.hpp"
KVQ_INSTANTIATE_APPEND(engine::Bf16D128P64Int2);
KVQ_INSTANTIATE_DECODE(engine::Bf16D128P64Int2);
KVQ_INSTANTIATE_PREFILL(engine::Bf16D128P64Int2);
