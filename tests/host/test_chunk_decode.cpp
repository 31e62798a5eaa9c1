// decode_record_chunk (8 channels at once, used by the dequantize kernel) and the prefill tile
// loader's chunk decodes equal decode_record_element (the reference's per-element decode) bit for
// bit, on every format and on group sizes smaller than the chunk.
#include <doctest/doctest.h>

#include <kvq/cache/chunk_decode.hpp>
#include <kvq/reference/append.hpp>

#include <cstring>
#include <vector>

#include "test_util.hpp"

namespace {

// The prefill tile loader's pieces (kv_tile.cuh): keys from a loaded word and parameters converted
// once per key group (decode_key_chunk / decode_key_word), values from a token pair's loaded words
// (decode_value_chunk, and decode_value_words where one value group covers the chunk), the same with
// the codes read as fp16 subnormals (decode_key_word_subnormal, decode_value_pair_subnormal), INT8
// rows from their 8 code bytes as two words (decode_int8_words).
template <class Cfg>
void check_tile_loader_pieces(const uint8_t* record) {
  using KQ = typename Cfg::k_quant;
  using VQ = typename Cfg::v_quant;
  constexpr int D = Cfg::head_dim, P = Cfg::page;
  constexpr kvq::RecordOffsets o = Cfg::record;
  size_t mismatches = 0, checked = 0;
  auto same = [&](float a, float b) {
    mismatches += std::memcmp(&a, &b, 4) != 0;
    ++checked;
  };
  for (int t = 0; t < P; ++t)
    for (int c0 = 0; c0 < D; c0 += kvq::kDecodeChunk) {
      float x[kvq::kDecodeChunk];
      if constexpr (KQ::kind == kvq::QuantKind::kAsym) {
        const kvq::KeyChunkParams par = kvq::key_chunk_params<KQ, D>(record + o.k_params, t, c0);
        kvq::decode_key_chunk<KQ, D>(record + o.k_codes, t, c0, par, x);
        for (int e = 0; e < kvq::kDecodeChunk; ++e) same(x[e], kvq::decode_record_element<Cfg, kvq::Role::kKey>(record, t, c0 + e));
        kvq::decode_key_word_subnormal<KQ>(kvq::key_chunk_word<KQ, D>(record + o.k_codes, t, c0),
                                           kvq::subnormal_key_params<KQ>(par), x);
        for (int e = 0; e < kvq::kDecodeChunk; ++e) same(x[e], kvq::decode_record_element<Cfg, kvq::Role::kKey>(record, t, c0 + e));
      }
      if constexpr (KQ::kind == kvq::QuantKind::kInt8) {
        uint32_t w[2];
        std::memcpy(w, record + o.k_codes + size_t(t) * D + c0, 8);
        kvq::decode_int8_words(w[0], w[1], reinterpret_cast<const float*>(record + o.k_params)[t], x);
        for (int e = 0; e < kvq::kDecodeChunk; ++e) same(x[e], kvq::decode_record_element<Cfg, kvq::Role::kKey>(record, t, c0 + e));
      }
      if constexpr (VQ::kind == kvq::QuantKind::kInt8) {
        uint32_t w[2];
        std::memcpy(w, record + o.v_codes + size_t(t) * D + c0, 8);
        kvq::decode_int8_words(w[0], w[1], reinterpret_cast<const float*>(record + o.v_params)[t], x);
        for (int e = 0; e < kvq::kDecodeChunk; ++e) same(x[e], kvq::decode_record_element<Cfg, kvq::Role::kValue>(record, t, c0 + e));
      }
      if constexpr (VQ::kind == kvq::QuantKind::kAsym) {
        const uint32_t* words = reinterpret_cast<const uint32_t*>(record + o.v_codes) +
                                kvq::code_slot<VQ::bits, D>(kvq::Role::kValue, t & ~1, c0).word;
        kvq::decode_value_chunk<VQ, D, P>(words, record + o.v_params, t, t & 1, c0, x);
        for (int e = 0; e < kvq::kDecodeChunk; ++e) same(x[e], kvq::decode_record_element<Cfg, kvq::Role::kValue>(record, t, c0 + e));
        if constexpr (VQ::group % kvq::kDecodeChunk == 0) {
          const kvq::AsymParams par = kvq::asym_params_at<VQ, kvq::Role::kValue, D, P>(record + o.v_params, t, c0);
          kvq::decode_value_words<VQ>(words, t & 1, par, x);
          for (int e = 0; e < kvq::kDecodeChunk; ++e) same(x[e], kvq::decode_record_element<Cfg, kvq::Role::kValue>(record, t, c0 + e));
          if (t % 2 == 0) {
            float y[2][kvq::kDecodeChunk];
            kvq::decode_value_pair_subnormal<VQ>(
                words, par, kvq::asym_params_at<VQ, kvq::Role::kValue, D, P>(record + o.v_params, t + 1, c0), y);
            for (int p = 0; p < 2; ++p)
              for (int e = 0; e < kvq::kDecodeChunk; ++e)
                same(y[p][e], kvq::decode_record_element<Cfg, kvq::Role::kValue>(record, t + p, c0 + e));
          }
        }
      }
    }
  CHECK(checked > 0);
  CHECK(mismatches == 0);
}

template <class Cfg>
void check_chunks(uint64_t seed) {
  using T = typename Cfg::dtype;
  constexpr int D = Cfg::head_dim, P = Cfg::page;
  std::vector<T> rows = kvq_test::make_rows<T>(seed, 2 * P, 1, D, 3.0f);  // K rows then V rows
  rows[5] = T::from_float(1.0e6f);                               // out-of-range for fp16 scales
  const std::vector<uint8_t> record = kvq_test::encode_record<Cfg>(rows);
  size_t mismatches = 0;
  for (int t = 0; t < P; ++t)
    for (int c0 = 0; c0 < D; c0 += kvq::kDecodeChunk) {
      float k[kvq::kDecodeChunk], v[kvq::kDecodeChunk];
      kvq::decode_record_chunk<Cfg, kvq::Role::kKey>(record.data(), t, c0, k);
      kvq::decode_record_chunk<Cfg, kvq::Role::kValue>(record.data(), t, c0, v);
      for (int e = 0; e < kvq::kDecodeChunk; ++e) {
        const float ke = kvq::decode_record_element<Cfg, kvq::Role::kKey>(record.data(), t, c0 + e);
        const float ve = kvq::decode_record_element<Cfg, kvq::Role::kValue>(record.data(), t, c0 + e);
        mismatches += std::memcmp(&ke, &k[e], 4) != 0;
        mismatches += std::memcmp(&ve, &v[e], 4) != 0;
      }
    }
  CHECK(mismatches == 0);
  // (INT3's two planes have no chunk pieces yet: the kernels do not read it.)
  if constexpr ((Cfg::k_quant::kind != kvq::QuantKind::kNone || Cfg::v_quant::kind != kvq::QuantKind::kNone) &&
                Cfg::k_quant::bits != 3 && Cfg::v_quant::bits != 3)
    check_tile_loader_pieces<Cfg>(record.data());
}

}  // namespace

TEST_CASE("chunk decode: 8 channels at once equal the per-element decode bit for bit") {
  check_chunks<kvq::CacheConfig<kvq::bf16, 128, 64, kvq::Int2<32>, kvq::Int2<32>>>(1);
  check_chunks<kvq::CacheConfig<kvq::fp16, 64, 32, kvq::Int4<32>, kvq::Int2<32>>>(2);
  check_chunks<kvq::CacheConfig<kvq::bf16, 256, 16, kvq::Int8, kvq::Int8>>(3);
  check_chunks<kvq::CacheConfig<kvq::fp16, 128, 64, kvq::NoQuant, kvq::NoQuant>>(4);
  check_chunks<kvq::CacheConfig<kvq::bf16, 64, 16, kvq::Int4<16>, kvq::Int2<4>>>(5);  // value groups < 8
  check_chunks<kvq::CacheConfig<kvq::bf16, 256, 128, kvq::Int4<32>, kvq::Int4<32>>>(6);
  check_chunks<kvq::CacheConfig<kvq::bf16, 128, 64, kvq::Int2<8>, kvq::Int4<16>>>(7);
  check_chunks<kvq::CacheConfig<kvq::bf16, 128, 64, kvq::Int3<64>, kvq::Int2<64>>>(8);
  check_chunks<kvq::CacheConfig<kvq::fp16, 64, 16, kvq::Int3<16>, kvq::Int3<8>>>(9);
}
