// Record layout (quant/record_layout.hpp), CacheConfig, and 64-bit offsets (cache/view.hpp).
#include "test_util.hpp"

namespace {

using namespace kvq_test;
using kvq::QuantDesc;

void check_offsets(QuantDesc k, QuantDesc v, int D, int P, size_t kp, size_t vc, size_t vp, size_t bytes) {
  const kvq::RecordOffsets o = kvq::record_offsets(k, v, D, P);
  CHECK(o.k_codes == 0);
  CHECK(o.k_params == kp);
  CHECK(o.v_codes == vc);
  CHECK(o.v_params == vp);
  CHECK(o.bytes == bytes);
}

TEST_CASE("layout: record sizes and offsets, hand-computed") {
  // INT2 D=128 P=64: codes 64*128*2/8 = 2048, K params 2 groups * 128 * (scale+zero) * 2 B = 1024,
  // V params 64 tokens * 4 groups * 4 B = 1024 -> 6144 (3 bits per element)
  check_offsets(kvq::desc_int2(), kvq::desc_int2(), 128, 64, 2048, 3072, 5120, 6144);
  // bf16 "none": 2 * 64 * 128 * 2 B
  check_offsets(kvq::kDescNone, kvq::kDescNone, 128, 64, 16384, 16384, 32768, 32768);
  // INT8: codes 8192, one fp32 scale per token: 256
  check_offsets(kvq::kDescInt8, kvq::kDescInt8, 128, 64, 8192, 8448, 16640, 16896);
  // INT4: codes 4096 + params 1024 per section
  check_offsets(kvq::desc_int4(), kvq::desc_int4(), 128, 64, 4096, 5120, 9216, 10240);
  // INT4 keys, INT2 values
  check_offsets(kvq::desc_int4(), kvq::desc_int2(), 128, 64, 4096, 5120, 7168, 8192);
  // D=64 P=16, Int4<16> keys / Int2<32> values: 512 + 256 | 256 + 128
  check_offsets(kvq::desc_int4(16), kvq::desc_int2(32), 64, 16, 512, 768, 1024, 1152);
  // D=256 P=128, Int4<32> / Int2<32>: 16384 + 4096 | 8192 + 4096
  check_offsets(kvq::desc_int4(), kvq::desc_int2(), 256, 128, 16384, 20480, 28672, 32768);
  // D=256 P=16 INT8: 4096 + 64 | 4096 + 64
  check_offsets(kvq::kDescInt8, kvq::kDescInt8, 256, 16, 4096, 4160, 8256, 8320);
  // D=128 P=128, Int2<64>: codes 4096, K params 2*128*4 = 1024, V params 128*2*4 = 1024
  check_offsets(kvq::desc_int2(64), kvq::desc_int2(64), 128, 128, 4096, 5120, 9216, 10240);
  // mixed none keys / INT2 values
  check_offsets(kvq::kDescNone, kvq::desc_int2(), 64, 32, 4096, 4096, 4608, 4864);
}

TEST_CASE("layout: every format pair, head dim and page: 16-byte parts, no padding, unsupported shapes rejected") {
  SUBCASE("every format pair, head dim and page: 16-byte parts, no padding, bits per element") {
    std::vector<QuantDesc> formats = {kvq::kDescNone, kvq::kDescInt8};
    for (int g : {8, 16, 32, 64, 128}) {
      formats.push_back(kvq::desc_int2(g));
      formats.push_back(kvq::desc_int4(g));
    }
    int tested = 0;
    for (int D : {64, 128, 256})
      for (int P : {16, 32, 64, 128})
        for (const QuantDesc& k : formats)
          for (const QuantDesc& v : formats) {
            if (!kvq::format_fits(k, Role::kKey, D, P) || !kvq::format_fits(v, Role::kValue, D, P)) continue;
            CHECK(kvq::validate_layout(k, v, D, P) == Status::kSuccess);
            ++tested;
            const kvq::RecordOffsets o = kvq::record_offsets(k, v, D, P);
            CAPTURE(D);
            CAPTURE(P);
            CAPTURE(k.bits);
            CAPTURE(k.group);
            CAPTURE(v.bits);
            CAPTURE(v.group);
            for (size_t part : {o.k_codes, o.k_params, o.v_codes, o.v_params, o.bytes}) CHECK(part % 16 == 0);
            CHECK(o.k_codes <= o.k_params);
            CHECK(o.k_params <= o.v_codes);
            CHECK(o.v_codes <= o.v_params);
            CHECK(o.v_params <= o.bytes);
            // bits per element of a section: b + 32/G (fp16 scale + zero per group), 8 + 32/D, 16
            auto section_bits = [&](QuantDesc q) {
              return q.kind == kvq::QuantKind::kNone   ? 16.0
                     : q.kind == kvq::QuantKind::kInt8 ? 8.0 + 32.0 / D
                                                       : q.bits + 32.0 / q.group;
            };
            const double want = (section_bits(k) + section_bits(v)) * P * D / 8.0;
            CHECK(double(o.bytes) == want);  // the supported shapes never pad
            CHECK(o.v_codes - o.k_params == kvq::section_params_bytes(k, Role::kKey, D, P));
            CHECK(o.v_params - o.v_codes == kvq::section_codes_bytes(v, D, P));
          }
    CHECK(tested > 300);
  }
  SUBCASE("format_fits / validate_layout reject unsupported shapes and formats") {
    using kvq::QuantKind;
    CHECK(kvq::validate_layout(kvq::desc_int2(), kvq::desc_int2(), 96, 64) == Status::kConfigMismatch);
    CHECK(kvq::validate_layout(kvq::desc_int2(), kvq::desc_int2(), 128, 48) == Status::kConfigMismatch);
    CHECK(kvq::validate_layout(kvq::desc_int2(), kvq::desc_int2(), 128, 256) == Status::kConfigMismatch);
    CHECK(kvq::validate_layout(kvq::desc_int2(24), kvq::desc_int2(), 128, 64) == Status::kConfigMismatch);  // Gk must divide P
    CHECK(kvq::validate_layout(kvq::desc_int2(), kvq::desc_int2(48), 128, 64) == Status::kConfigMismatch);  // Gv must divide D
    CHECK(kvq::validate_layout(kvq::desc_int2(64), kvq::desc_int2(), 128, 32) == Status::kConfigMismatch);
    CHECK(kvq::validate_layout(kvq::desc_int2(0), kvq::desc_int2(), 128, 64) == Status::kConfigMismatch);
    CHECK(kvq::validate_layout(QuantDesc{QuantKind::kAsym, 5, 32}, kvq::desc_int2(), 128, 64) == Status::kConfigMismatch);
    CHECK(kvq::validate_layout(QuantDesc{QuantKind::kAsym, 1, 32}, kvq::desc_int2(), 128, 64) == Status::kConfigMismatch);
    CHECK(kvq::validate_layout(kvq::desc_int3(), kvq::desc_int2(64), 128, 64) == Status::kSuccess);  // INT3 keys
    CHECK(kvq::validate_layout(kvq::desc_int3(128), kvq::desc_int2(), 128, 64) == Status::kConfigMismatch);  // Gk > P
    CHECK(kvq::validate_layout(QuantDesc{QuantKind::kAsym, 8, 32}, kvq::desc_int2(), 128, 64) == Status::kConfigMismatch);
    CHECK(kvq::validate_layout(QuantDesc{QuantKind::kInt8, 8, 32}, kvq::kDescInt8, 128, 64) == Status::kConfigMismatch);
    CHECK(kvq::validate_layout(kvq::kDescNone, QuantDesc{QuantKind::kNone, 8, 0}, 128, 64) == Status::kConfigMismatch);
    CHECK(kvq::validate_layout(kvq::kDescInt8, kvq::kDescNone, 256, 128) == Status::kSuccess);
    CHECK(kvq::validate_layout(kvq::desc_int2(128), kvq::desc_int4(256), 256, 128) == Status::kSuccess);
    // the key group is over tokens (divides P), the value group over channels (divides D)
    CHECK(kvq::format_fits(kvq::desc_int2(128), Role::kKey, 64, 128));
    CHECK(!kvq::format_fits(kvq::desc_int2(128), Role::kValue, 64, 128));
    CHECK(kvq::format_fits(kvq::desc_int2(64), Role::kValue, 64, 16));
    CHECK(!kvq::format_fits(kvq::desc_int2(64), Role::kKey, 64, 16));
  }
}

TEST_CASE("layout: CacheConfig static values and key_of") {
  CHECK(CfgInt2::head_dim == 128);
  CHECK(CfgInt2::page == 64);
  CHECK(CfgInt2::record_bytes == 6144);
  CHECK(CfgNone::record_bytes == 32768);
  CHECK(CfgInt8::record_bytes == 16896);
  CHECK(CfgInt4::record_bytes == 10240);
  CHECK(CfgK4V2::record_bytes == 8192);
  CHECK(CfgP16K4V2D64::record_bytes == 1152);
  CHECK(CfgFp16Int2::record_bytes == CfgInt2::record_bytes);
  CHECK(CfgK4V2::record.v_codes == 5120);
  CHECK(CfgK4V2::record.v_params == 7168);
  CHECK((std::is_same<CfgK4V2::k_quant, kvq::Int4<32>>::value));
  CHECK((std::is_same<CfgK4V2::v_quant, kvq::Int2<32>>::value));
  CHECK((std::is_same<CfgFp16Int2::dtype, kvq::fp16>::value));
  CHECK(kvq::Int2<32>::max_code == 3);
  CHECK(kvq::Int2<32>::codes_per_word == 16);
  CHECK(kvq::Int4<16>::max_code == 15);
  CHECK(kvq::Int4<16>::codes_per_word == 8);
  CHECK(kvq::Int4<16>::desc == kvq::desc_int4(16));
  CHECK(kvq::Int8::desc == kvq::kDescInt8);
  CHECK(kvq::NoQuant::desc == kvq::kDescNone);
  CHECK(!(kvq::desc_int2(32) == kvq::desc_int2(16)));
  CHECK(!(kvq::desc_int2(32) == kvq::desc_int4(32)));
  constexpr kvq::ConfigKey k = kvq::key_of<CfgK4V2>();
  CHECK(k.dtype == kvq::DType::kBF16);
  CHECK(k.head_dim == 128);
  CHECK(k.page == 64);
  CHECK(k.k == kvq::desc_int4(32));
  CHECK(k.v == kvq::desc_int2(32));
  CHECK(kvq::key_of<CfgFp16Int2>().dtype == kvq::DType::kFP16);
  CHECK(kvq::key_of<CfgP16Int2>() == kvq::ConfigKey{kvq::DType::kBF16, 128, 16, kvq::desc_int2(16), kvq::desc_int2(32)});
  CHECK(!(kvq::key_of<CfgInt2>() == kvq::key_of<CfgFp16Int2>()));
  static_assert(CfgInt2::record_bytes % 16 == 0, "records are 16-byte multiples");
}

TEST_CASE("layout: record and hot offsets are 64-bit and exact beyond 2^31") {
  const size_t off = kvq::record_offset(99999, 7, 8, CfgInt2::record_bytes);
  CHECK(off == 4915193856ull);
  CHECK(off > (1ull << 31));
  CHECK(off == (uint64_t(99999) * 8 + 7) * 6144);
  CHECK(kvq::record_offset(0, 0, 8, 6144) == 0);
  CHECK(kvq::record_offset(1, 0, 8, 6144) == 8 * 6144);
  CHECK(kvq::record_offset(300000, 7, 8, CfgNone::record_bytes) == (uint64_t(300000) * 8 + 7) * 32768);
  // ring: slot 20000, row 191 of a 192-row window, head 7 of 8, D 128
  const size_t h = kvq::hot_offset(20000, 191, 7, 192, 8, 128);
  CHECK(h == 3932356480ull);
  CHECK(h > (1ull << 31));
  CHECK(kvq::hot_offset(0, 1, 0, 192, 8, 128) == 8 * 128);
  CHECK(kvq::hot_offset(1, 0, 0, 192, 8, 128) == 192 * 8 * 128);
  CHECK(kvq::hot_offset(0, 0, 1, 192, 8, 128) == 128);
  // token positions are int32 (check_lengths): the ring row is exact up to INT32_MAX
  CHECK(kvq::ring_row(int64_t(INT32_MAX), 192) == int(int64_t(INT32_MAX) % 192));
  CHECK(kvq::ring_row(int64_t(2000000001), 320) == int(2000000001 % 320));
}

}  // namespace
