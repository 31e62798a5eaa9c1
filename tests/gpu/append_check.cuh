// GPU append vs host reference: a random multi-step schedule over a batch mixing prompts, chunks,
// decode steps, speculative rollbacks and idle sequences; after every step the device's cold pool,
// hot rings, flags and reported cold lengths must equal the host reference's, byte for byte.
#pragma once

#include <kvq/append/append_impl.cuh>
#include <kvq/reference/append.hpp>
#include <kvq/reference/host_cache.hpp>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "../common/kv_data.hpp"
#include "gpu_util.cuh"

namespace kvq_test {

template <class Cfg>
struct DeviceMirror {
  using T = typename Cfg::dtype;
  DeviceBuffer<uint8_t> cold;
  DeviceBuffer<T> hot_k, hot_v;
  DeviceBuffer<T> sink_k, sink_v;  // attention sinks (empty when the host cache keeps none)
  DeviceBuffer<int32_t> block_table, hot_slot, len, cold_len;

  void upload(const kvq::reference::HostCache<Cfg>& h) {
    cold.upload(h.cold);
    hot_k.upload(h.hot_k);
    hot_v.upload(h.hot_v);
    sink_k.upload(h.sink_k);
    sink_v.upload(h.sink_v);
    upload_tables(h);
  }
  void upload_tables(const kvq::reference::HostCache<Cfg>& h) {
    block_table.upload(h.block_table);
    hot_slot.upload(h.hot_slot);
    len.upload(h.len);
    cold_len.upload(h.cold_len);
  }
  kvq::CacheView<T> view(kvq::reference::HostCache<Cfg>& h) {
    kvq::CacheView<T> v = h.view();
    v.cold = cold.get();
    v.hot_k = hot_k.get();
    v.hot_v = hot_v.get();
    v.sink_k = v.sinks > 0 ? sink_k.get() : nullptr;
    v.sink_v = v.sinks > 0 ? sink_v.get() : nullptr;
    v.block_table = block_table.get();
    v.hot_slot = hot_slot.get();
    return v;
  }
  void expect_equal(const kvq::reference::HostCache<Cfg>& h, const std::string& where) {
    const long long dc = first_difference(cold.download(), h.cold);
    const long long dk = first_difference(hot_k.download(), h.hot_k);
    const long long dv = first_difference(hot_v.download(), h.hot_v);
    CHECK_MESSAGE(dc == -1, where << ": cold pool differs at byte " << dc << " (record " << dc / static_cast<long long>(Cfg::record_bytes)
                                  << ", offset " << dc % static_cast<long long>(Cfg::record_bytes) << ")");
    CHECK_MESSAGE(dk == -1, where << ": hot K ring differs at byte " << dk);
    CHECK_MESSAGE(dv == -1, where << ": hot V ring differs at byte " << dv);
    const long long dsk = first_difference(sink_k.download(), h.sink_k);
    const long long dsv = first_difference(sink_v.download(), h.sink_v);
    CHECK_MESSAGE(dsk == -1, where << ": sink K rows differ at byte " << dsk);
    CHECK_MESSAGE(dsv == -1, where << ": sink V rows differ at byte " << dsv);
  }
};

// One append step on host and device with the given new rows ([sum counts][heads][D] each);
// returns false if the host cache ran out of pages.
template <class Cfg>
bool step_both_with(kvq::reference::HostCache<Cfg>& host, DeviceMirror<Cfg>& dev, const std::vector<int32_t>& counts,
                    const std::vector<typename Cfg::dtype>& k, const std::vector<typename Cfg::dtype>& v,
                    const std::string& where) {
  using T = typename Cfg::dtype;
  const int batch = int(counts.size());
  std::vector<int32_t> cu(size_t(batch) + 1, 0);
  for (int b = 0; b < batch; ++b) {
    cu[size_t(b) + 1] = cu[size_t(b)] + counts[size_t(b)];
    if (!host.reserve(b, counts[size_t(b)])) return false;
  }
  dev.upload_tables(host);
  DeviceBuffer<int32_t> d_cu(cu), d_cold_out{static_cast<size_t>(batch)};
  DeviceBuffer<T> d_k(std::max<size_t>(k.size(), 8)), d_v(std::max<size_t>(v.size(), 8));
  if (!k.empty()) {
    KVQ_CUDA_CHECK(cudaMemcpy(d_k.get(), k.data(), k.size() * sizeof(T), cudaMemcpyHostToDevice));
    KVQ_CUDA_CHECK(cudaMemcpy(d_v.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  DeviceBuffer<uint32_t> d_flags(std::vector<uint32_t>{0u});

  kvq::AppendBatch<T> a;
  a.batch = batch;
  a.lengths = host.lengths();
  a.cu_new = cu.data();
  a.new_k = k.data();
  a.new_v = v.data();
  std::vector<int32_t> cold_out(size_t(batch), -1);
  a.cold_out = cold_out.data();
  uint32_t host_flags = 0;
  REQUIRE(kvq::reference::append<Cfg>(host.view(), a, &host_flags) == kvq::Status::kSuccess);

  kvq::AppendBatch<T> da = a;
  da.lengths = kvq::SeqLengths{dev.len.get(), dev.cold_len.get()};
  da.cu_new = d_cu.get();
  da.new_k = d_k.get();
  da.new_v = d_v.get();
  da.cold_out = d_cold_out.get();
  const int max_new = counts.empty() ? 0 : *std::max_element(counts.begin(), counts.end());
  REQUIRE(kvq::append<Cfg>(dev.view(host), da, max_new, d_flags.get(), nullptr) == kvq::Status::kSuccess);
  KVQ_CUDA_CHECK(cudaDeviceSynchronize());

  dev.expect_equal(host, where);
  CHECK_MESSAGE(d_flags.download()[0] == host_flags, where << ": flags " << d_flags.download()[0] << " vs host " << host_flags);
  CHECK_MESSAGE(d_cold_out.download() == cold_out, where << ": cold lengths differ");
  for (int b = 0; b < batch; ++b) host.commit(b, counts[size_t(b)]);
  dev.len.upload(host.len);
  dev.cold_len.upload(host.cold_len);
  return true;
}

// The same with fresh random rows (NaN/Inf/out-of-range values planted when `poison`).
template <class Cfg>
bool step_both(kvq::reference::HostCache<Cfg>& host, DeviceMirror<Cfg>& dev, const std::vector<int32_t>& counts,
               KvGenerator& gen, bool poison, const std::string& where) {
  using T = typename Cfg::dtype;
  int64_t total = 0;
  for (int32_t c : counts) total += c;
  std::vector<T> k = gen.keys<T>(total), v = gen.values<T>(total);
  if (poison) {
    gen.poison(k, 3);
    gen.poison(v, 3);
  }
  return step_both_with(host, dev, counts, k, v, where);
}

// A random schedule: per step each sequence gets a prompt-sized chunk, a small chunk, a decode
// token or a few (speculative), or nothing; some steps roll sequences back. sinks / key_clip: the
// cache's encoding (HostCache::set_encoding; sinks need a quantized configuration); with sinks the
// sink buffers start as random bits (DeviceMirror compares them after every step) and some steps
// also release a sequence, whose slot then takes a new sequence.
template <class Cfg>
void check_append_random(uint64_t seed, int steps = 7, int sinks = 0, kvq::KeyClip key_clip = kvq::KeyClip::kMinMax) {
  constexpr int P = Cfg::page;
  std::mt19937_64 rng(seed);
  const int heads = 1 + int(rng() % 3);
  const int residual = P * int(rng() % 3);  // R = 0, P or 2P
  const int batch = 5;
  const int max_pages = 96;
  const int slots = batch + 2;
  kvq::reference::HostCache<Cfg> host(heads, int64_t(batch) * max_pages, slots, residual, max_pages, batch);
  REQUIRE(host.set_encoding(sinks, key_clip) == kvq::Status::kSuccess);
  // Hot slots are a permutation, not the batch index; poison the pool and rings with random bytes.
  std::vector<int32_t> perm(slots);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  for (int b = 0; b < batch; ++b) host.hot_slot[size_t(b)] = perm[size_t(b)];
  for (auto& x : host.cold) x = uint8_t(rng());
  for (auto& x : host.hot_k) x.bits = uint16_t(rng());
  for (auto& x : host.hot_v) x.bits = uint16_t(rng());
  for (auto& x : host.sink_k) x.bits = uint16_t(rng());  // empty without sinks
  for (auto& x : host.sink_v) x.bits = uint16_t(rng());
  DeviceMirror<Cfg> dev;
  dev.upload(host);
  KvGenerator gen(heads, Cfg::head_dim, seed * 7919 + 1);
  for (int s = 0; s < steps; ++s) {
    std::vector<int32_t> counts(batch);
    for (int b = 0; b < batch; ++b) {
      const int kind = int(rng() % 6);
      counts[size_t(b)] = kind == 0 ? int(rng() % 700) : kind == 1 ? int(rng() % (3 * P)) : kind == 5 ? 0 : 1 + int(rng() % 4);
      const int64_t room = int64_t(max_pages - 2) * P - host.len[size_t(b)];
      if (counts[size_t(b)] > room) counts[size_t(b)] = 0;
    }
    const std::string where = "seed " + std::to_string(seed) + " step " + std::to_string(s) + " R=" +
                              std::to_string(residual) + " heads=" + std::to_string(heads) + " sinks=" +
                              std::to_string(sinks) + (key_clip == kvq::KeyClip::kMse ? " kMse" : "");
    REQUIRE(step_both(host, dev, counts, gen, s % 3 == 2, where));
    // Speculative rollback of a sequence: drop up to 3 tokens, never below its cold length.
    const int b = int(rng() % batch);
    const int64_t back = std::max<int64_t>(host.cold_len[size_t(b)], host.len[size_t(b)] - int64_t(rng() % 4));
    REQUIRE(host.rollback(b, back));
    // With sinks: now and then a sequence ends and its slot starts over (its sink rows are
    // rewritten when the new sequence's page 0 turns cold; until then the old ones stay).
    if (sinks > 0 && rng() % 3 == 0) REQUIRE(host.release(int(rng() % batch)));
  }
}

// Attention sinks in chosen situations, on a batch of three sequences (two KV heads, hot slots
// permuted, every buffer poisoned) that share one prompt: sequence 0 takes it token by token
// (decode steps, page 0 turning cold on a single token), sequence 1 in chunks of 1 .. P + 3
// tokens, sequence 2 in one call, then decode tokens. After every step the device's pool, rings,
// sink rows, flags and cold lengths must equal the host reference's; at the end sequences 0, 1
// and 2 must hold the same cold records and sink rows (any chunking gives the one-shot bytes, on
// the device too). Then sequence 2 is released and takes a new prompt (its slot's sink rows are
// rewritten), and sequence 1 rolls back to its cold length and continues.
template <class Cfg>
void check_append_sink_steps(uint64_t seed, int residual, int sinks, kvq::KeyClip key_clip) {
  using T = typename Cfg::dtype;
  constexpr int P = Cfg::page, D = Cfg::head_dim;
  const int heads = 2, batch = 3, slots = 5;
  const int64_t n = residual + 2 * P + 3;  // page 0 and 1 turn cold
  const int max_pages = int(2 * n / P) + 4;
  std::mt19937_64 rng(seed);
  kvq::reference::HostCache<Cfg> host(heads, int64_t(batch) * max_pages, slots, residual, max_pages, batch);
  REQUIRE(host.set_encoding(sinks, key_clip) == kvq::Status::kSuccess);
  host.hot_slot = {3, 0, 4};
  for (auto& x : host.cold) x = uint8_t(rng());
  for (auto& x : host.hot_k) x.bits = uint16_t(rng());
  for (auto& x : host.hot_v) x.bits = uint16_t(rng());
  for (auto& x : host.sink_k) x.bits = uint16_t(rng());
  for (auto& x : host.sink_v) x.bits = uint16_t(rng());
  DeviceMirror<Cfg> dev;
  dev.upload(host);
  KvGenerator gen(heads, D, seed + 1);
  std::vector<T> pk = gen.keys<T>(n), pv = gen.values<T>(n);
  for (size_t i = 0; i < size_t(heads) * D; ++i) pk[i] = T::from_float(pk[i].to_float() * 8.0f);  // token 0: a sink
  const size_t row = size_t(heads) * D;
  const std::string base = "sink steps seed " + std::to_string(seed) + " R=" + std::to_string(residual) + " sinks=" +
                           std::to_string(sinks) + (key_clip == kvq::KeyClip::kMse ? " kMse" : "");
  std::vector<int64_t> done(batch, 0);
  for (int step = 0; done[0] < n || done[1] < n || done[2] < n; ++step) {
    std::vector<int32_t> counts(batch);
    counts[0] = done[0] < n ? 1 : 0;
    counts[1] = int32_t(std::min<int64_t>(n - done[1], 1 + int64_t(rng() % uint64_t(P + 3))));
    counts[2] = step == 0 ? int32_t(n) : 0;
    std::vector<T> k, v;
    for (int b = 0; b < batch; ++b) {
      k.insert(k.end(), pk.begin() + std::ptrdiff_t(done[size_t(b)] * row), pk.begin() + std::ptrdiff_t((done[size_t(b)] + counts[size_t(b)]) * row));
      v.insert(v.end(), pv.begin() + std::ptrdiff_t(done[size_t(b)] * row), pv.begin() + std::ptrdiff_t((done[size_t(b)] + counts[size_t(b)]) * row));
      done[size_t(b)] += counts[size_t(b)];
    }
    REQUIRE(step_both_with(host, dev, counts, k, v, base + " step " + std::to_string(step)));
  }
  // Same prompt, three ways: the same records (in each sequence's own pages) and sink rows.
  REQUIRE(host.cold_len == std::vector<int32_t>(3, int32_t(host.cold_len[0])));
  REQUIRE(host.cold_len[0] >= 2 * P);
  const std::vector<uint8_t> pool = dev.cold.download();
  const std::vector<T> sk = dev.sink_k.download(), sv = dev.sink_v.download();
  const size_t page_bytes = size_t(heads) * Cfg::record_bytes, sink_elems = size_t(sinks) * heads * D;
  for (int b = 1; b < batch; ++b) {
    for (int64_t p = 0; p < host.cold_len[0] / P; ++p) {
      const size_t a0 = size_t(host.block_table[size_t(p)]) * page_bytes;
      const size_t ab = size_t(host.block_table[size_t(b) * max_pages + size_t(p)]) * page_bytes;
      CHECK_MESSAGE(std::equal(pool.begin() + long(a0), pool.begin() + long(a0 + page_bytes), pool.begin() + long(ab)),
                    base << ": sequence " << b << " page " << p << " differs from sequence 0's");
    }
    const size_t s0 = size_t(host.hot_slot[0]) * sink_elems, sb = size_t(host.hot_slot[size_t(b)]) * sink_elems;
    CHECK_MESSAGE(std::equal(sk.begin() + long(s0), sk.begin() + long(s0 + sink_elems), sk.begin() + long(sb),
                             [](T x, T y) { return x.bits == y.bits; }),
                  base << ": sequence " << b << " sink K rows differ from sequence 0's");
    CHECK_MESSAGE(std::equal(sv.begin() + long(s0), sv.begin() + long(s0 + sink_elems), sv.begin() + long(sb),
                             [](T x, T y) { return x.bits == y.bits; }),
                  base << ": sequence " << b << " sink V rows differ from sequence 0's");
  }
  // ... and those sink rows are the prompt's first rows.
  for (int t = 0; t < sinks; ++t)
    for (int h = 0; h < heads; ++h) {
      const size_t o = kvq::sink_offset(host.hot_slot[0], t, h, sinks, heads, D);
      CHECK_MESSAGE(std::equal(sk.begin() + long(o), sk.begin() + long(o + D), pk.begin() + long((size_t(t) * heads + h) * D),
                               [](T x, T y) { return x.bits == y.bits; }),
                    base << ": sink K row " << t << " head " << h << " is not the prompt's row");
    }
  // Sequence 2 ends; a new prompt in its slot, in two chunks around page 0 turning cold.
  REQUIRE(host.release(2));
  REQUIRE(step_both(host, dev, {0, 0, int32_t(residual + P - 1)}, gen, false, base + " new prompt, page 0 hot"));
  REQUIRE(step_both(host, dev, {1, 0, 40}, gen, false, base + " new prompt, page 0 turns cold"));
  // Sequence 1 rolls back to its cold length and continues with other tokens.
  REQUIRE(host.rollback(1, host.cold_len[1]));
  REQUIRE(step_both(host, dev, {0, int32_t(P + 1), 2}, gen, true, base + " after rollback"));
}


// A configuration that quantizes neither K nor V refuses sinks (check_sinks, cache/append_plan.hpp):
// HostCache::set_encoding and the GPU append return kConfigMismatch; nothing is written, the
// sink buffers the view names included.
template <class Cfg>
void check_append_refuses_sinks() {
  using T = typename Cfg::dtype;
  constexpr int D = Cfg::head_dim;
  kvq::reference::HostCache<Cfg> host(1, 16, 2, 0, 8, 1);  // 80 tokens: 5 pages of 16 at most
  REQUIRE(host.set_encoding(4, kvq::KeyClip::kMinMax) == kvq::Status::kConfigMismatch);
  REQUIRE(host.view().sinks == 0);
  DeviceMirror<Cfg> dev;
  dev.upload(host);
  const std::vector<T> poison(size_t(2) * 4 * D, T{0x1234});
  DeviceBuffer<T> sk(poison), sv(poison);
  const std::vector<int32_t> cu{0, 80};
  DeviceBuffer<int32_t> d_cu(cu);
  DeviceBuffer<T> d_k(size_t(80) * D), d_v(size_t(80) * D);
  DeviceBuffer<uint32_t> d_flags(std::vector<uint32_t>{0u});
  REQUIRE(host.reserve(0, 80));
  dev.upload_tables(host);
  kvq::AppendBatch<T> da;
  da.batch = 1;
  da.lengths = kvq::SeqLengths{dev.len.get(), dev.cold_len.get()};
  da.cu_new = d_cu.get();
  da.new_k = d_k.get();
  da.new_v = d_v.get();
  kvq::CacheView<T> v = dev.view(host);
  v.sinks = 4;
  v.sink_k = sk.get();
  v.sink_v = sv.get();
  CHECK(kvq::append<Cfg>(v, da, 80, d_flags.get(), nullptr) == kvq::Status::kConfigMismatch);
  KVQ_CUDA_CHECK(cudaDeviceSynchronize());
  dev.expect_equal(host, "none configuration with sinks");
  CHECK(first_difference(sk.download(), poison) == -1);
  CHECK(first_difference(sv.download(), poison) == -1);
  CHECK(d_flags.download()[0] == 0u);
}

}  // namespace kvq_test
