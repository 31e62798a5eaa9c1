// kv_cache_configs.hpp - the kvq configurations this example compiles: bf16, head dim 64, pages
// 16/32/64; none, int8, and INT4 / INT2 / INT4-keys-INT2-values with Gk, Gv in {16, 32, 64}
// (Gk at most the page); INT2-keys-INT4-values with page 64 and Gk = Gv = 32; INT3 keys with INT2
// values at page 64. One list per page size, each instantiated in its own kv_cache_p*.cpp.
#pragma once

#include <memory>

#include <kvq/dispatch/dispatch.hpp>

#include "kv_cache.hpp"

namespace smollm2 {

template <int P, class K, class V>
using Cfg64 = kvq::CacheConfig<kvq::bf16, 64, P, K, V>;

template <class... A>
struct Concat;
template <class... A>
struct Concat<kvq::ConfigList<A...>> {
  using type = kvq::ConfigList<A...>;
};
template <class... A, class... B, class... Rest>
struct Concat<kvq::ConfigList<A...>, kvq::ConfigList<B...>, Rest...> {
  using type = typename Concat<kvq::ConfigList<A..., B...>, Rest...>::type;
};

template <int P, int GK, int GV>
using AsymConfigs = kvq::ConfigList<Cfg64<P, kvq::Int4<GK>, kvq::Int4<GV>>, Cfg64<P, kvq::Int2<GK>, kvq::Int2<GV>>,
                                    Cfg64<P, kvq::Int4<GK>, kvq::Int2<GV>>>;
template <int P, int GK>
using AsymRow = typename Concat<AsymConfigs<P, GK, 16>, AsymConfigs<P, GK, 32>, AsymConfigs<P, GK, 64>>::type;
template <int P>
using BaseConfigs = kvq::ConfigList<Cfg64<P, kvq::NoQuant, kvq::NoQuant>, Cfg64<P, kvq::Int8, kvq::Int8>>;

using ConfigsP16 = typename Concat<BaseConfigs<16>, AsymRow<16, 16>>::type;
using ConfigsP32 = typename Concat<BaseConfigs<32>, AsymRow<32, 16>, AsymRow<32, 32>>::type;
// INT2 keys with INT4 values (k2v4), for per-layer mixes (--mix): page 64, Gk = Gv = 32 only.
// INT3 keys with INT2 values (k3v2; kvq's host reference only, no device kernels yet): page 64,
// Gk / Gv 64 / 64 (3.0 bits an element), 64 / 32 and 32 / 64 (3.25).
using ConfigsP64 = typename Concat<BaseConfigs<64>, AsymRow<64, 16>, AsymRow<64, 32>, AsymRow<64, 64>,
                                   kvq::ConfigList<Cfg64<64, kvq::Int2<32>, kvq::Int4<32>>, Cfg64<64, kvq::Int3<64>, kvq::Int2<64>>,
                                                   Cfg64<64, kvq::Int3<64>, kvq::Int2<32>>, Cfg64<64, kvq::Int3<32>, kvq::Int2<64>>>>::type;

// Defined in kv_cache_p16.cpp / _p32.cpp / _p64.cpp; nullptr when the key is not in the list.
std::unique_ptr<KvCache> make_kv_cache_p16(const CacheSpec&, int layers, int kv_heads, int max_seqs, int64_t max_len);
std::unique_ptr<KvCache> make_kv_cache_p32(const CacheSpec&, int layers, int kv_heads, int max_seqs, int64_t max_len);
std::unique_ptr<KvCache> make_kv_cache_p64(const CacheSpec&, int layers, int kv_heads, int max_seqs, int64_t max_len);

}  // namespace smollm2
