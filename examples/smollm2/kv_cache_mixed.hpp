// kv_cache_mixed.hpp - the CPU KV cache with a format per layer (CacheSpec::mix): each model
// layer is stepped in the single-format cache of its format.
#pragma once

#include <memory>

#include "kv_cache.hpp"

namespace smollm2 {

// Throws Error for a layer outside the model or an unsupported combination of options.
std::unique_ptr<KvCache> make_mixed_kv_cache(const CacheSpec& spec, int layers, int kv_heads, int max_seqs, int64_t max_len);

}  // namespace smollm2
