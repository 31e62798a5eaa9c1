// kv_cache_p64.cpp - the page-64 configurations of kv_cache_configs.hpp.
#include "kv_cache_configs.hpp"
#include "kv_cache_impl.hpp"

namespace smollm2 {

std::unique_ptr<KvCache> make_kv_cache_p64(const CacheSpec& spec, int layers, int kv_heads, int max_seqs, int64_t max_len) {
  std::unique_ptr<KvCache> out;
  kvq::dispatch(ConfigsP64{}, config_key(spec), [&](auto tag) {
    using Cfg = typename decltype(tag)::type;
    out = std::make_unique<KvCacheImpl<Cfg>>(spec, layers, kv_heads, max_seqs, max_len);
    return kvq::Status::kSuccess;
  });
  return out;
}

}  // namespace smollm2
