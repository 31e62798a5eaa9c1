// kvq/reference/host_cache.hpp - HostCache: an owning, host-memory cache of one layer for the CPU
// fallback, the examples and the tests (an engine normally owns these buffers itself).
#pragma once

#include <cstdint>
#include <vector>

#include "kvq/cache/rollback.hpp"
#include "kvq/cache/view.hpp"
#include "kvq/cache/window.hpp"

KVQ_NAMESPACE_BEGIN
namespace reference {

template <class Cfg>
class HostCache {
 public:
  using T = typename Cfg::dtype;
  static constexpr uint8_t kPoolFill = 0xA5;  // what a fresh pool holds (never a valid page by accident)

  HostCache(int num_kv_heads, int64_t num_pages, int num_slots, int residual, int max_pages_per_seq, int batch)
      : cold(size_t(num_pages) * size_t(num_kv_heads) * Cfg::record_bytes, kPoolFill),
        hot_k(size_t(num_slots) * size_t(residual + Cfg::page) * size_t(num_kv_heads) * Cfg::head_dim),
        hot_v(hot_k.size()),
        block_table(size_t(batch) * size_t(max_pages_per_seq), -1),
        hot_slot(size_t(batch)),
        len(size_t(batch), 0),
        cold_len(size_t(batch), 0),
        num_kv_heads_(num_kv_heads),
        num_pages_(num_pages),
        num_slots_(num_slots),
        residual_(residual),
        max_pages_(max_pages_per_seq) {
    for (int b = 0; b < batch; ++b) hot_slot[size_t(b)] = b % num_slots;
    for (int64_t p = num_pages - 1; p >= 0; --p) free_pages_.push_back(int32_t(p));
  }

  CacheView<T> view() {
    CacheView<T> v;
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
    return v;
  }
  SeqLengths lengths() const { return SeqLengths{len.data(), cold_len.data()}; }

  // Fills sequence b's block-table entries for the pages an append of num_new tokens turns cold.
  // Returns false when the pool or the block-table row is exhausted.
  bool reserve(int b, int64_t num_new) {
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

  // Records the lengths after a successful append of num_new tokens to sequence b.
  void commit(int b, int64_t num_new) {
    cold_len[size_t(b)] = int32_t(cold_after(len[size_t(b)] + num_new, cold_len[size_t(b)], residual_, Cfg::page));
    len[size_t(b)] += int32_t(num_new);
  }

  // Speculative-decoding rollback (kvq/cache/rollback.hpp): O(1), nothing moves. Fails (false)
  // below the cold length or above the length.
  bool rollback(int b, int64_t new_len) {
    if (check_rollback(len[size_t(b)], cold_len[size_t(b)], new_len) != Status::kSuccess) return false;
    len[size_t(b)] = int32_t(new_len);
    return true;
  }

  // Ends sequence b: its cold pages go back to the pool (their bytes stay until reused), its
  // block-table row is cleared and its lengths become 0, so the batch slot can start a new
  // sequence. Pages reserved past the cold length (reserve() without an append) are returned too.
  void release(int b) {
    int32_t* row = block_table.data() + size_t(b) * size_t(max_pages_);
    for (int p = max_pages_ - 1; p >= 0; --p)
      if (row[p] >= 0) {
        free_pages_.push_back(row[p]);
        row[p] = -1;
      }
    len[size_t(b)] = 0;
    cold_len[size_t(b)] = 0;
  }

  // Pages the pool can still hand out.
  int64_t free_pages() const { return int64_t(free_pages_.size()); }

  std::vector<uint8_t> cold;
  std::vector<T> hot_k, hot_v;
  std::vector<int32_t> block_table, hot_slot, len, cold_len;

 private:
  int num_kv_heads_;
  int64_t num_pages_;
  int num_slots_, residual_, max_pages_;
  std::vector<int32_t> free_pages_;
};

}  // namespace reference
KVQ_NAMESPACE_END
