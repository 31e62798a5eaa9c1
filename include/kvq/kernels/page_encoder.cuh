// kvq/kernels/page_encoder.cuh - one thread block quantizes one page of one KV head into a record.
// Used by the append kernel (pages leaving the hot window) and by the attention kernels (pages
// turning cold in the current step, quantized on the fly), so both produce the same bytes.
//
// The page's raw rows are first copied into shared memory with 16-byte loads that are all in
// flight at once (a section is P x D x 2 bytes: 16 KB at D 128, P 64, four loads a thread), and
// the codec (codec/section_codec.hpp, the host reference's code) then reads them from there. The
// values' loads are issued before the keys are encoded and land while they are. Reading the
// groups straight from global memory, two passes of 2-byte loads a group, left the append at
// 3-14 % of the copy bandwidth.
#pragma once

#include <cuda_runtime.h>

#include "kvq/cache/append_plan.hpp"
#include "kvq/codec/section_codec.hpp"
#include "kvq/core/launch.cuh"

KVQ_NAMESPACE_BEGIN
namespace detail {

// Threads of a block that calls encode_page_block (the append and transition kernels).
constexpr int kEncoderThreads = 256;

// The encoder's dynamic shared memory (page_encoder_smem() of the kernel), in order:
//   stage   [P][D + pad] T      one section's raw rows (keys, then values); rows padded by 16
//                               bytes so that the value groups' reads (one row a thread) fall
//                               in different banks, where the whole stays within kMaxBytes
//   scratch [P * D] bytes       the codec's scratch (section_codec.hpp)
//   rows_k, rows_v [P] const T* where each token's raw rows are (source_row)
template <class Cfg>
struct PageEncoderLayout {
  using T = typename Cfg::dtype;
  static constexpr int D = Cfg::head_dim, P = Cfg::page;
  static constexpr int kVec = 16 / int(sizeof(T));  // elements a 16-byte load moves
  // At most 98 KB, so that a block fits the 99 KB of shared memory of sm_86 / sm_89 GPUs (which
  // run sm_80 code) with 1 KB left for the kernels' static shared memory. Only D 256 with pages of
  // 128 goes without the padding (100,352 bytes instead of 102,400).
  static constexpr size_t kMaxBytes = 98 * 1024;
  static constexpr size_t unpadded_bytes = size_t(P) * D * (sizeof(T) + 1) + 2 * size_t(P) * sizeof(const T*);
  static constexpr int kStride = unpadded_bytes + size_t(P) * 16 <= kMaxBytes ? D + kVec : D;  // stage row stride, elements
  static constexpr int kVecsPerRow = D / kVec;
  static constexpr int kVecs = P * kVecsPerRow;  // 16-byte loads of a section
  static constexpr int kPerThread = (kVecs + kEncoderThreads - 1) / kEncoderThreads;
  static constexpr size_t stage_bytes = size_t(P) * kStride * sizeof(T);
  static constexpr size_t scratch_offset = stage_bytes;
  static constexpr size_t rows_offset = scratch_offset + size_t(P) * D;
  static constexpr size_t bytes = rows_offset + 2 * size_t(P) * sizeof(const T*);
  static_assert(D % kVec == 0 && stage_bytes % 16 == 0 && (size_t(P) * D) % 16 == 0, "16-byte aligned parts");
  static_assert(bytes <= kMaxBytes, "the encoder's shared memory must fit every supported GPU");
};

// Dynamic shared memory of a kernel that encodes pages (one name per translation unit).
__device__ __forceinline__ uint8_t* page_encoder_smem() {
  extern __shared__ __align__(16) uint8_t kvq_page_encoder_smem[];
  return kvq_page_encoder_smem;
}

// Allows `kernel` the encoder's shared memory where it exceeds the default 48 KB (D 256 with
// pages of 64 or more); returns the bytes to launch it with.
template <class Cfg, class Kernel>
Status page_encoder_smem_bytes(Kernel kernel, size_t* bytes) {
  *bytes = PageEncoderLayout<Cfg>::bytes;
  if (*bytes <= 48 * 1024) return Status::kSuccess;
  return cuda_status(allow_dynamic_smem(kernel, *bytes));
}

// A section's raw rows, 16 bytes a load, into registers (load_rows) and from there into the
// stage (store_rows): this thread's loads are vector i = threadIdx.x + j * kEncoderThreads.
template <class Cfg>
struct SectionRows {
  using L = PageEncoderLayout<Cfg>;
  using T = typename Cfg::dtype;
  uint4 r[L::kPerThread];

  __device__ __forceinline__ void load_rows(const T* const* rows) {
    KVQ_UNROLL
    for (int j = 0; j < L::kPerThread; ++j) {
      const int i = int(threadIdx.x) + j * kEncoderThreads;
      if (L::kVecs % kEncoderThreads == 0 || i < L::kVecs)
        r[j] = *reinterpret_cast<const uint4*>(rows[i / L::kVecsPerRow] + (i % L::kVecsPerRow) * L::kVec);
    }
  }
  __device__ __forceinline__ void store_rows(T* stage) const {
    KVQ_UNROLL
    for (int j = 0; j < L::kPerThread; ++j) {
      const int i = int(threadIdx.x) + j * kEncoderThreads;
      if (L::kVecs % kEncoderThreads == 0 || i < L::kVecs)
        *reinterpret_cast<uint4*>(stage + (i / L::kVecsPerRow) * L::kStride + (i % L::kVecsPerRow) * L::kVec) = r[j];
    }
  }
};

// Quantizes page p (tokens [p*P, (p+1)*P)) of head h of the sequence described by s, reading
// rows from the ring / fresh_k / fresh_v (source_row; sink rows as encoder_token says), into
// `record`. Every thread of the block (kEncoderThreads) calls it; it begins and ends with a
// barrier, and reads the rows only before the closing one.
template <class Cfg>
__device__ void encode_page_block(const CacheView<typename Cfg::dtype>& v, const typename Cfg::dtype* fresh_k,
                                  const typename Cfg::dtype* fresh_v, const SeqAppend& s, int64_t p, int h,
                                  uint8_t* record, uint32_t& flags) {
  using T = typename Cfg::dtype;
  using L = PageEncoderLayout<Cfg>;
  constexpr int D = Cfg::head_dim, P = Cfg::page;
  constexpr RecordOffsets o = Cfg::record;
  uint8_t* smem = page_encoder_smem();
  T* stage = reinterpret_cast<T*>(smem);
  uint8_t* scratch = smem + L::scratch_offset;
  const T** rows_k = reinterpret_cast<const T**>(smem + L::rows_offset);
  const T** rows_v = rows_k + P;
  __syncthreads();  // an earlier page's encoder of this block may still read the stage
  for (int t = threadIdx.x; t < P; t += kEncoderThreads) {
    rows_k[t] = source_row(v, v.hot_k, fresh_k, s, encoder_token(v, p * P + t), h, D, P);
    rows_v[t] = source_row(v, v.hot_v, fresh_v, s, encoder_token(v, p * P + t), h, D, P);
  }
  __syncthreads();
  SectionRows<Cfg> rows;
  rows.load_rows(rows_k);
  rows.store_rows(stage);
  __syncthreads();
  rows.load_rows(rows_v);  // in flight while the keys are encoded
  auto staged = [&](int t) -> const T* { return stage + t * L::kStride; };
  auto sync = [] { __syncthreads(); };
  encode_section<typename Cfg::k_quant, Role::kKey, D, P, T>(staged, record + o.k_codes, record + o.k_params, scratch,
                                                            int(threadIdx.x), kEncoderThreads, sync, flags, v.key_clip);
  rows.store_rows(stage);  // encode_section ended with a barrier: the keys' stage is free
  __syncthreads();
  encode_section<typename Cfg::v_quant, Role::kValue, D, P, T>(staged, record + o.v_codes, record + o.v_params, scratch,
                                                              int(threadIdx.x), kEncoderThreads, sync, flags);
}

}  // namespace detail
KVQ_NAMESPACE_END
