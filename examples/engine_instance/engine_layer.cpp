// examples/engine_instance/engine_layer.cpp - see engine_layer.hpp. Compiled by the host compiler:
// the kernels come from the .cu files kvq_add_instances generated, reached through kvq::Handle.
#include "engine_layer.hpp"

namespace engine {

kvq::Status AttentionLayer::init(const kvq::ConfigKey& key, const kvq::DecodeShape& decode,
                                 const kvq::PrefillShape& prefill) {
  kvq::Status st = make_handle(key, &kvq_);  // engine::make_handle: exactly the compiled list
  if (st != kvq::Status::kSuccess) return st;
  st = kvq_.plan_decode(decode, &decode_plan_);  // asks the occupancy calculator: host, once
  if (st != kvq::Status::kSuccess) return st;
  return kvq_.plan_prefill(prefill, &prefill_plan_);  // the Hopper kernel where the GPU and build have it
}

size_t AttentionLayer::workspace_bytes() const {
  return decode_plan_.workspace_bytes > prefill_plan_.workspace_bytes ? decode_plan_.workspace_bytes
                                                                      : prefill_plan_.workspace_bytes;
}

kvq::Status AttentionLayer::step(const kvq::CacheView<void>& cache, const kvq::AppendBatch<void>& append,
                                 int max_new_tokens, const kvq::AttentionBatch<void>& attention, bool decode,
                                 void* workspace, void* out, uint32_t* flags, cudaStream_t stream) const {
  const kvq::Status st = kvq_.append(cache, append, max_new_tokens, flags, stream);
  if (st != kvq::Status::kSuccess) return st;
  return decode ? kvq_.decode(cache, attention, decode_plan_, workspace, workspace_bytes(), out, flags, stream)
                : kvq_.prefill(cache, attention, prefill_plan_, workspace, workspace_bytes(), out, flags, stream);
}

}  // namespace engine
