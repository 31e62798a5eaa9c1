// INT3 keys on the device: the append kernel writes INT3 records (two code planes, docs/FORMAT.md
// 4.2) through the same Codec<IntAsym<3, G>>::encode_section as the host reference, so its bytes
// must equal the reference's; the dequantize kernel reads them through decode_record_chunk (the
// dequantize cases are in test_dequantize.cu). Decode and prefill do not read INT3 yet.
#include "append_check.cuh"

namespace {

// Not in cmake/kvq_configs.cmake (decode and prefill have no INT3 path): INT3 keys with Gk 64 and
// INT2 values with Gv 64, INT2/32's record size; and a page-16 configuration with INT3 values.
using CfgK3V2 = kvq::CacheConfig<kvq::bf16, 128, 64, kvq::Int3<64>, kvq::Int2<64>>;
using CfgInt3P16 = kvq::CacheConfig<kvq::fp16, 64, 16, kvq::Int3<16>, kvq::Int3<32>>;

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("append int3: device bytes equal the host reference (K3V2 Gk 64 / Gv 64; INT3 keys and values, page 16)") {
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      kvq_test::check_append_random<CfgK3V2>(seed * 1000 + 301);
      kvq_test::check_append_random<CfgInt3P16>(seed * 1000 + 302);
    }
  }
  TEST_CASE("append int3: attention sinks and MSE key clipping: device bytes and sink rows equal the host reference") {
    kvq_test::check_append_random<CfgK3V2>(21301, 5, 4, kvq::KeyClip::kMinMax);
    kvq_test::check_append_random<CfgK3V2>(22301, 5, 16, kvq::KeyClip::kMse);
    kvq_test::check_append_random<CfgInt3P16>(22302, 5, 15, kvq::KeyClip::kMse);
    kvq_test::check_append_sink_steps<CfgK3V2>(25301, 64, 4, kvq::KeyClip::kMinMax);
    kvq_test::check_append_sink_steps<CfgInt3P16>(25302, 0, 8, kvq::KeyClip::kMse);
  }
}
