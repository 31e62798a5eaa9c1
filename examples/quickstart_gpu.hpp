// examples/quickstart_gpu.hpp - the GPU half of the quickstart, declared for the host half.
//
// quickstart.cpp runs everything on the host reference; where the build has CUDA
// (KVQ_EXAMPLE_HAVE_CUDA) and a GPU is present at run time it hands the same appends to
// quickstart_gpu.cpp, which replays them through kvq_engine_instance (runtime key -> kvq::Handle ->
// kvq::append<Cfg>) and compares the device cache with the host's byte for byte.
// Plain C++: no CUDA header, so quickstart.cpp builds with the host compiler alone.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <kvq/cache/config.hpp>
#include <kvq/core/status.hpp>
#include <kvq/numeric/dtype.hpp>

namespace quickstart {

// One batched append as the host ran it: lengths before it, the new tokens, the cold lengths after.
struct ReplayStep {
  std::vector<int32_t> len, cold;     // [batch], before the append
  std::vector<int32_t> cu_new;        // [batch + 1]
  const kvq::bf16* new_k = nullptr;   // [cu_new[batch]][num_kv_heads][head_dim]
  const kvq::bf16* new_v = nullptr;
  std::vector<int32_t> cold_after;    // [batch], what the append must report through cold_out
  int max_new = 0;                    // the largest new-token count of the step
};

// A whole run of one format: cache geometry, the appends, and the host's final cache bytes.
struct Replay {
  kvq::ConfigKey key;
  int batch = 0, num_kv_heads = 0, num_slots = 0, residual = 0, max_pages_per_seq = 0;
  int64_t num_pages = 0;
  uint8_t cold_fill = 0;  // the byte the host pool starts with (HostCache: 0xA5); hot rings start at 0
  const std::vector<int32_t>* block_table = nullptr;  // the final table (entries are only ever added)
  const std::vector<int32_t>* hot_slot = nullptr;
  const std::vector<ReplayStep>* steps = nullptr;
  const std::vector<uint8_t>* cold = nullptr;         // expected bytes
  const std::vector<kvq::bf16>* hot_k = nullptr;
  const std::vector<kvq::bf16>* hot_v = nullptr;
};

struct GpuOutcome {
  kvq::Status status = kvq::Status::kSuccess;  // the first non-success Status of the replay
  bool instantiated = true;                     // false: the key is not in kvq_engine_instance
  uint64_t cold_mismatch = 0, hot_mismatch = 0; // differing bytes
  uint64_t cold_len_mismatch = 0;               // cold_out entries that differ from the host's
  uint32_t flags = 0;                           // kFlag* bits the kernels reported
  std::string error;                            // CUDA error text, if any
};

// Number of usable GPUs (0 when there is no device or no driver); `name` gets device 0's name.
int gpu_count(std::string* name);

GpuOutcome gpu_replay(const Replay& r);

}  // namespace quickstart
