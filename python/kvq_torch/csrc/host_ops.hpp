// host_ops.hpp - the part of kvq_torch that knows kvq's configurations, with plain pointers only
// (no torch header): parsing a configuration string, the compiled list, and the host reference
// (kvq/reference, the specification and CPU fallback) behind the CPU kernels of the ops.
//
// A configuration string is DTYPE|HEAD_DIM|PAGE|K_FORMAT|V_FORMAT, the fields of a
// kvq_add_instances entry without its name: "bf16|64|64|int2|int2", formats none, int8, int4,
// int2 (groups of 32), int4g<G>, int2g<G>.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <kvq/attention/batch.hpp>
#include <kvq/cache/append_plan.hpp>
#include <kvq/cache/config.hpp>
#include <kvq/cache/view.hpp>
#include <kvq/core/status.hpp>
#include <kvq/decode/plan.hpp>
#include <kvq/prefill/plan.hpp>

namespace kvq_torch {

// Parses a configuration string; false (and *error says why) when it is malformed.
bool parse_config(const std::string& text, kvq::ConfigKey* key, std::string* error);
// The canonical string of a key ("bf16|64|64|int4|int2").
std::string config_string(const kvq::ConfigKey& key);
// The configurations compiled into this build (kvq_torch_instances::Instances), as strings.
std::vector<std::string> compiled_configs();
bool is_compiled(const kvq::ConfigKey& key);
// Record bytes of any valid layout (compiled or not); 0 when kvq::validate_layout refuses it.
size_t record_bytes_of(const kvq::ConfigKey& key);
// kvq::Status's enumerator name ("kInvalidShape").
const char* status_name(kvq::Status s);

// The host reference of a compiled configuration (kNotInstantiated otherwise). The views'
// model-dtype pointers point at the key's dtype. Every pointer is host memory.
kvq::Status cpu_append(const kvq::ConfigKey& key, const kvq::CacheView<void>& view, const kvq::AppendBatch<void>& batch,
                       uint32_t* flags);
kvq::Status cpu_attention(const kvq::ConfigKey& key, const kvq::CacheView<void>& view,
                          const kvq::AttentionBatch<void>& batch, float* out);
kvq::Status cpu_dequantize_sequence(const kvq::ConfigKey& key, const kvq::CacheView<void>& view, int batch, int b,
                                    int64_t len, int64_t cold, void* k_out, void* v_out);
// The CUDA-free plans (kvq/decode/plan.hpp, kvq/prefill/plan.hpp) of a compiled configuration:
// what the CPU ops check their plan argument against.
kvq::Status cpu_plan_decode(const kvq::ConfigKey& key, const kvq::DecodeShape& shape, kvq::DecodePlan* plan);
kvq::Status cpu_plan_prefill(const kvq::ConfigKey& key, const kvq::PrefillShape& shape, kvq::PrefillPlan* plan);

// The element types the rotation ops take: the model dtypes and fp32 (an engine that rotates
// before rounding to the model dtype, as examples/smollm2 does).
enum class RotateDType { kF32, kBF16, kFP16 };
// kvq/quant/rotation.hpp's rotate<D> (inverse false) or unrotate<D> of n head vectors of D values
// in place, host memory, each vector through fp32 and back (what kvq::rotate_heads does on the
// GPU, bit for bit). kConfigMismatch for D other than 64, 128, 256.
kvq::Status cpu_rotate(void* x, RotateDType dtype, int D, int64_t n, uint64_t seed, bool inverse);

}  // namespace kvq_torch
