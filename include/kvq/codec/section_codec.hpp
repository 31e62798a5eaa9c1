// kvq/codec/section_codec.hpp - encode the K or V section of one record (one page, one KV head)
// through its format's codec (codec.hpp).
//
// One implementation serves the host reference (tid 0 of 1 thread, a no-op barrier) and the
// kernels (a thread block, __syncthreads): the work is cut into groups and words the same way,
// each handled by group_codec.hpp / packing.hpp, so the bytes cannot differ. The section's work is
// its codec's; a barrier ends it.
#pragma once

#include <cstdint>

#include "kvq/codec/codec.hpp"
#include "kvq/quant/formats.hpp"
#include "kvq/quant/group_codec.hpp"
#include "kvq/quant/record_layout.hpp"

KVQ_NAMESPACE_BEGIN

// row(t) -> const T* : the D raw model values of token t of the page (t in [0, P)).
// codes/params: the section's two parts inside the record (record_layout.hpp).
// scratch: P*D bytes, 16-byte aligned, of per-thread-group scratch (shared memory on the device).
KVQ_EXEC_CHECK_DISABLE
template <class Q, Role R, int D, int P, class T, class Row, class Sync>
KVQ_HD void encode_section(Row&& row, uint8_t* codes, uint8_t* params, uint8_t* scratch, int tid,
                           int nthreads, Sync&& sync, uint32_t& flags, KeyClip key_clip = KeyClip::kMinMax) {
  Codec<Q>::template encode_section<R, D, P, T>(row, codes, params, scratch, tid, nthreads, sync, flags, key_clip);
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
