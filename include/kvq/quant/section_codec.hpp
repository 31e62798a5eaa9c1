// kvq/quant/section_codec.hpp - encode the K or V section of one record (one page, one KV head).
//
// One implementation serves the host reference (tid 0 of 1 thread, a no-op barrier) and the
// kernels (a thread block, __syncthreads): the work is cut into groups and words the same way,
// each handled by group_codec.hpp / packing.hpp, so the bytes cannot differ.
#pragma once

#include <cstdint>

#include "kvq/quant/record_layout.hpp"
#include "kvq/quant/formats.hpp"
#include "kvq/quant/group_codec.hpp"
#include "kvq/quant/packing.hpp"

KVQ_NAMESPACE_BEGIN

namespace detail {
// Channel c of tokens [t0, t0 + n) of a page: one key group, read through the caller's row().
template <class Row>
struct KeyColumn {
  Row& row;
  int t0, c;
  KVQ_EXEC_CHECK_DISABLE
  KVQ_HD float operator()(int k) const { return row(t0 + k)[c].to_float(); }
};
}  // namespace detail

// row(t) -> const T* : the D raw model values of token t of the page (t in [0, P)).
// codes/params: the section's two parts inside the record (record_layout.hpp).
// scratch: P*D bytes of per-thread-group scratch (shared memory on the device).
KVQ_EXEC_CHECK_DISABLE
template <class Q, Role R, int D, int P, class T, class Row, class Sync>
KVQ_HD void encode_section(Row&& row, uint8_t* codes, uint8_t* params, uint8_t* scratch, int tid,
                           int nthreads, Sync&& sync, uint32_t& flags, KeyClip key_clip = KeyClip::kMinMax) {
  if constexpr (Q::kind == QuantKind::kNone) {
    // Copied in 16-byte chunks (rows are 16-byte aligned: D * 2 bytes, see append_plan.hpp).
    constexpr int kChunk = 16 / sizeof(T);
    T* out = reinterpret_cast<T*>(codes);
    for (int i = tid * kChunk; i < P * D; i += nthreads * kChunk) {
      const T* src = row(i / D) + i % D;
#if defined(__CUDA_ARCH__)
      *reinterpret_cast<uint4*>(out + i) = *reinterpret_cast<const uint4*>(src);
#else
      for (int j = 0; j < kChunk; ++j) out[i + j] = src[j];
#endif
    }
  } else if constexpr (Q::kind == QuantKind::kInt8) {
    int8_t* out = reinterpret_cast<int8_t*>(codes);
    float* scales = reinterpret_cast<float*>(params);
    for (int t = tid; t < P; t += nthreads) {
      const T* x = row(t);
      scales[t] = encode_int8_group(D, [&](int i) { return x[i].to_float(); },
                                    [&](int i, int8_t code) { out[t * D + i] = code; }, flags);
    }
  } else {
    constexpr int G = Q::group;
    uint16_t* p16 = reinterpret_cast<uint16_t*>(params);
    if constexpr (R == Role::kKey) {
      // groups: (token group g, channel c); params scale at [2g][c], zero at [2g+1][c]
      for (int i = tid; i < (P / G) * D; i += nthreads) {
        const int g = i / D, c = i % D;
        const AsymParams p = encode_asym_group<Q::bits>(
            G, detail::KeyColumn<Row>{row, g * G, c},
            [&](int k, uint32_t code) { scratch[(g * G + k) * D + c] = uint8_t(code); }, flags, key_clip);
        p16[(2 * g) * D + c] = p.scale;
        p16[(2 * g + 1) * D + c] = p.zero;
      }
    } else {
      // groups: (token t, channel group g); params scale at [t][g], zero at [P + t][g]
      constexpr int groups = D / G;
      for (int i = tid; i < P * groups; i += nthreads) {
        const int t = i / groups, g = i % groups;
        const T* x = row(t);
        const AsymParams p = encode_asym_group<Q::bits>(
            G, [&](int k) { return x[g * G + k].to_float(); },
            [&](int k, uint32_t code) { scratch[t * D + g * G + k] = uint8_t(code); }, flags);
        p16[t * groups + g] = p.scale;
        p16[P * groups + t * groups + g] = p.zero;
      }
    }
    sync();
    uint32_t* words = reinterpret_cast<uint32_t*>(codes);
    constexpr int num_words = P * D / (32 / Q::bits);
    for (int w = tid; w < num_words; w += nthreads)
      words[w] = pack_word<Q::bits, D>(R, w, [&](int t, int c) { return scratch[t * D + c]; });
  }
  sync();
}

// Encode a whole record: K section then V section. row_k(t), row_v(t) as in encode_section;
// key_clip: how asymmetric key groups choose their range (group_codec.hpp).
KVQ_EXEC_CHECK_DISABLE
template <class Cfg, class RowK, class RowV, class Sync>
KVQ_HD void encode_record(RowK&& row_k, RowV&& row_v, uint8_t* record, uint8_t* scratch, int tid,
                          int nthreads, Sync&& sync, uint32_t& flags, KeyClip key_clip = KeyClip::kMinMax) {
  using T = typename Cfg::dtype;
  constexpr RecordOffsets o = Cfg::record;
  encode_section<typename Cfg::k_quant, Role::kKey, Cfg::head_dim, Cfg::page, T>(
      row_k, record + o.k_codes, record + o.k_params, scratch, tid, nthreads, sync, flags, key_clip);
  encode_section<typename Cfg::v_quant, Role::kValue, Cfg::head_dim, Cfg::page, T>(
      row_v, record + o.v_codes, record + o.v_params, scratch, tid, nthreads, sync, flags);
}

KVQ_NAMESPACE_END
