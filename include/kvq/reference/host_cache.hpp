// kvq/reference/host_cache.hpp - HostCache: an owning, host-memory cache of one layer for the CPU
// fallback, the examples and the tests (an engine normally owns these buffers itself).
#pragma once

#include <climits>
#include <cstdint>
#include <vector>

#include "kvq/cache/append_plan.hpp"
#include "kvq/cache/rollback.hpp"
#include "kvq/cache/view.hpp"
#include "kvq/cache/window.hpp"
#include "kvq/core/status.hpp"

KVQ_NAMESPACE_BEGIN
namespace reference {

template <class Cfg>
class HostCache {
 public:
  using T = typename Cfg::dtype;
  static constexpr uint8_t kPoolFill = 0xA5;  // what a fresh pool holds (never a valid page by accident)

  // Arguments a cache cannot have (checked first; nothing is allocated then): kInvalidShape for a
  // KV-head count outside [1, 65535], slots < 1, pages outside [0, 2^31] (page ids are int32),
  // a negative table width or batch, or buffers larger than a std::vector holds; kConfigMismatch
  // for a residual R that is negative or not a multiple of the page size.
  static Status check(int num_kv_heads, int64_t num_pages, int num_slots, int residual, int max_pages_per_seq,
                      int batch) {
    if (num_kv_heads <= 0 || num_kv_heads > 65535 || num_slots <= 0 || num_pages < 0 || num_pages > int64_t(INT32_MAX) + 1 ||
        max_pages_per_seq < 0 || batch < 0)
      return Status::kInvalidShape;
    if (residual < 0 || residual % Cfg::page != 0 || INT32_MAX - Cfg::page < residual) return Status::kConfigMismatch;
    const uint64_t window_elems = uint64_t(residual + Cfg::page) * uint64_t(num_kv_heads) * uint64_t(Cfg::head_dim);
    const uint64_t cold_bytes = uint64_t(num_kv_heads) * Cfg::record_bytes;  // per page
    if (uint64_t(num_pages) > std::vector<uint8_t>().max_size() / cold_bytes ||
        uint64_t(num_slots) > std::vector<T>().max_size() / window_elems ||
        uint64_t(batch) * uint64_t(max_pages_per_seq) > std::vector<int32_t>().max_size())
      return Status::kInvalidShape;
    return Status::kSuccess;
  }

  // Use status() (or check() beforehand): a cache built from arguments check() rejects holds no
  // buffers, its view() is all null (every entry point then returns kNullPointer) and reserve /
  // commit / rollback / release refuse every sequence. The constructor never throws for bad
  // arguments (only std::bad_alloc when valid sizes exceed the host's memory).
  HostCache(int num_kv_heads, int64_t num_pages, int num_slots, int residual, int max_pages_per_seq, int batch)
      : status_(check(num_kv_heads, num_pages, num_slots, residual, max_pages_per_seq, batch)) {
    if (status_ != Status::kSuccess) return;
    cold.assign(size_t(num_pages) * size_t(num_kv_heads) * Cfg::record_bytes, kPoolFill);
    hot_k.resize(size_t(num_slots) * size_t(residual + Cfg::page) * size_t(num_kv_heads) * Cfg::head_dim);
    hot_v.resize(hot_k.size());
    block_table.assign(size_t(batch) * size_t(max_pages_per_seq), -1);
    hot_slot.resize(size_t(batch));
    len.assign(size_t(batch), 0);
    cold_len.assign(size_t(batch), 0);
    num_kv_heads_ = num_kv_heads;
    num_pages_ = num_pages;
    num_slots_ = num_slots;
    residual_ = residual;
    max_pages_ = max_pages_per_seq;
    for (int b = 0; b < batch; ++b) hot_slot[size_t(b)] = b % num_slots;
    for (int64_t p = num_pages - 1; p >= 0; --p) free_pages_.push_back(int32_t(p));
  }

  // Attention sinks and the key encoder (cache/view.hpp): keep tokens [0, sinks) of every
  // sequence unquantized, choose key group ranges by `key_clip`. Only while every sequence is
  // empty: kInvalidLength otherwise (cold pages would mix encodings and sink rows be lost);
  // kConfigMismatch (nothing changes then) for sinks outside [0, min(kMaxSinks, page - 1)], for
  // sinks > 0 on a configuration that quantizes neither K nor V (check_sinks: every entry point
  // refuses that view), or for a key_clip that is not a KeyClip value.
  Status set_encoding(int sinks, KeyClip key_clip) {
    if (status_ != Status::kSuccess) return status_;
    for (int32_t l : len)
      if (l != 0) return Status::kInvalidLength;
    if (sinks < 0 || sinks > kMaxSinks || sinks >= Cfg::page) return Status::kConfigMismatch;
    CacheView<T> probe;
    probe.sinks = sinks;
    if (check_sinks<Cfg>(probe) != Status::kSuccess) return Status::kConfigMismatch;
    if (key_clip != KeyClip::kMinMax && key_clip != KeyClip::kMse) return Status::kConfigMismatch;
    sinks_ = sinks;
    key_clip_ = key_clip;
    sink_k.assign(size_t(num_slots_) * size_t(sinks) * size_t(num_kv_heads_) * Cfg::head_dim, T{});
    sink_v.assign(sink_k.size(), T{});
    return Status::kSuccess;
  }

  // kSuccess, or why the constructor's arguments were refused (check()).
  Status status() const { return status_; }
  // Sequences of the batch (0 for a refused cache).
  int batch() const { return int(len.size()); }

  CacheView<T> view() {
    CacheView<T> v;
    if (status_ != Status::kSuccess) return v;  // all null
    v.cold = cold.data();
    v.num_pages = num_pages_;
    v.hot_k = hot_k.data();
    v.hot_v = hot_v.data();
    v.num_slots = num_slots_;
    v.residual = residual_;
    v.num_kv_heads = num_kv_heads_;
    v.block_table = block_table.data();
    v.max_pages_per_seq = max_pages_;
    v.hot_slot = hot_slot.data();
    v.sink_k = sinks_ ? sink_k.data() : nullptr;
    v.sink_v = sinks_ ? sink_v.data() : nullptr;
    v.sinks = sinks_;
    v.key_clip = key_clip_;
    return v;
  }
  SeqLengths lengths() const { return SeqLengths{len.data(), cold_len.data()}; }

  // Fills sequence b's block-table entries for the pages an append of num_new tokens turns cold.
  // Returns false when the pool or the block-table row is exhausted (or b is not a sequence of the
  // batch, num_new < 0).
  bool reserve(int b, int64_t num_new) {
    if (!has(b) || num_new < 0) return false;
    const int64_t have = cold_len[size_t(b)] / Cfg::page;
    const int64_t need = cold_after(len[size_t(b)] + num_new, cold_len[size_t(b)], residual_, Cfg::page) / Cfg::page;
    if (need > max_pages_) return false;
    for (int64_t p = have; p < need; ++p) {
      int32_t& slot = block_table[size_t(b) * size_t(max_pages_) + size_t(p)];
      if (slot >= 0) continue;
      if (free_pages_.empty()) return false;
      slot = free_pages_.back();
      free_pages_.pop_back();
    }
    return true;
  }

  // Records the lengths after a successful append of num_new tokens to sequence b. false (nothing
  // changes) when b is not a sequence of the batch or num_new < 0.
  bool commit(int b, int64_t num_new) {
    if (!has(b) || num_new < 0) return false;
    cold_len[size_t(b)] = int32_t(cold_after(len[size_t(b)] + num_new, cold_len[size_t(b)], residual_, Cfg::page));
    len[size_t(b)] += int32_t(num_new);
    return true;
  }

  // Speculative-decoding rollback (kvq/cache/rollback.hpp): O(1), nothing moves. Fails (false)
  // below the cold length or above the length, or for a b outside the batch.
  bool rollback(int b, int64_t new_len) {
    if (!has(b) || check_rollback(len[size_t(b)], cold_len[size_t(b)], new_len) != Status::kSuccess) return false;
    len[size_t(b)] = int32_t(new_len);
    return true;
  }

  // Ends sequence b: its cold pages go back to the pool (their bytes stay until reused), its
  // block-table row is cleared and its lengths become 0, so the batch slot can start a new
  // sequence. Pages reserved past the cold length (reserve() without an append) are returned too.
  // false (nothing changes) for a b outside the batch.
  bool release(int b) {
    if (!has(b)) return false;
    int32_t* row = block_table.data() + size_t(b) * size_t(max_pages_);
    for (int p = max_pages_ - 1; p >= 0; --p)
      if (row[p] >= 0) {
        free_pages_.push_back(row[p]);
        row[p] = -1;
      }
    len[size_t(b)] = 0;
    cold_len[size_t(b)] = 0;
    return true;
  }

  // Pages the pool can still hand out.
  int64_t free_pages() const { return int64_t(free_pages_.size()); }

  std::vector<uint8_t> cold;
  std::vector<T> hot_k, hot_v;
  std::vector<T> sink_k, sink_v;  // [num_slots][sinks][num_kv_heads][head_dim], when sinks > 0
  std::vector<int32_t> block_table, hot_slot, len, cold_len;

 private:
  bool has(int b) const { return b >= 0 && b < batch(); }

  Status status_ = Status::kSuccess;
  int num_kv_heads_ = 0;
  int64_t num_pages_ = 0;
  int num_slots_ = 0, residual_ = 0, max_pages_ = 0;
  std::vector<int32_t> free_pages_;
  int sinks_ = 0;
  KeyClip key_clip_ = KeyClip::kMinMax;
};

}  // namespace reference
KVQ_NAMESPACE_END
