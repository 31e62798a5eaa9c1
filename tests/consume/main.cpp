// Consumer of the installed package: plans a cache and round-trips one append through the host
// reference. Exit code 0 means the installed headers work.
#include <kvq/kvq.hpp>

#include <cstdio>

int main() {
  using Cfg = kvq::CacheConfig<kvq::bf16, 128, 64, kvq::Int2<32>, kvq::Int2<32>>;
  const kvq::ModelShape llama8b{32, 8, 128};
  const kvq::CacheFormat int2{kvq::desc_int2(), kvq::desc_int2(), 64, 128};
  if (kvq::validate(llama8b, int2) != kvq::Status::kSuccess) return 1;
  kvq::reference::HostCache<Cfg> cache(8, 16, 1, 128, 16, 1);
  std::vector<kvq::bf16> k(300 * 8 * 128), v(k.size());
  for (size_t i = 0; i < k.size(); ++i) {
    k[i] = kvq::bf16::from_float(float(i % 97) / 7.0f);
    v[i] = kvq::bf16::from_float(float(i % 89) / 5.0f);
  }
  int32_t cu[2] = {0, 300};
  if (!cache.reserve(0, 300)) return 2;
  kvq::AppendBatch<kvq::bf16> a;
  a.batch = 1;
  a.lengths = cache.lengths();
  a.cu_new = cu;
  a.new_k = k.data();
  a.new_v = v.data();
  if (kvq::reference::append<Cfg>(cache.view(), a) != kvq::Status::kSuccess) return 3;
  cache.commit(0, 300);
  std::printf("consumer: %d tokens, %d cold, %.1f bytes/token (int2) vs %.1f (bf16)\n", cache.len[0], cache.cold_len[0],
              kvq::bytes_per_token(llama8b, int2), kvq::bytes_per_token_dense(llama8b));
  return cache.cold_len[0] == 128 ? 0 : 4;
}
