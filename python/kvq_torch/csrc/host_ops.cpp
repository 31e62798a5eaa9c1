// host_ops.cpp - see host_ops.hpp. Compiled by the host compiler, without torch headers.
#include "host_ops.hpp"

#include <cstdlib>

#include <kvq/dispatch/dispatch.hpp>
#include <kvq/numeric/dtype.hpp>
#include <kvq/quant/record_layout.hpp>
#include <kvq/quant/rotation.hpp>
#include <kvq/reference/append.hpp>
#include <kvq/reference/attention.hpp>
#include <kvq/reference/dequantize.hpp>
#include <kvq/runtime/typed_args.hpp>

#include "kvq_instances.hpp"

namespace kvq_torch {
namespace {

using Instances = kvq_torch_instances::Instances;

bool parse_int(const std::string& s, int* out) {
  if (s.empty() || s.size() > 9) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  *out = std::atoi(s.c_str());
  return true;
}

bool parse_format(const std::string& s, kvq::QuantDesc* d) {
  if (s == "none") return *d = kvq::kDescNone, true;
  if (s == "int8") return *d = kvq::kDescInt8, true;
  if (s == "int4") return *d = kvq::desc_int4(32), true;
  if (s == "int2") return *d = kvq::desc_int2(32), true;
  int g = 0;
  if (s.size() > 5 && (s.compare(0, 5, "int4g") == 0 || s.compare(0, 5, "int2g") == 0) && parse_int(s.substr(5), &g) && g > 0) {
    *d = s[3] == '4' ? kvq::desc_int4(g) : kvq::desc_int2(g);
    return true;
  }
  return false;
}

std::string format_string(const kvq::QuantDesc& d) {
  switch (d.kind) {
    case kvq::QuantKind::kNone: return "none";
    case kvq::QuantKind::kInt8: return "int8";
    case kvq::QuantKind::kAsym: {
      std::string s = "int" + std::to_string(d.bits);
      return d.group == 32 ? s : s + "g" + std::to_string(d.group);
    }
  }
  return "?";
}

template <class... Cfgs>
std::vector<kvq::ConfigKey> keys_of(kvq::ConfigList<Cfgs...>) {
  return {kvq::key_of<Cfgs>()...};
}

}  // namespace

bool parse_config(const std::string& text, kvq::ConfigKey* key, std::string* error) {
  std::vector<std::string> f;
  size_t start = 0;
  for (;;) {
    const size_t bar = text.find('|', start);
    f.push_back(text.substr(start, bar == std::string::npos ? std::string::npos : bar - start));
    if (bar == std::string::npos) break;
    start = bar + 1;
  }
  if (f.size() != 5) return *error = "expected DTYPE|HEAD_DIM|PAGE|K_FORMAT|V_FORMAT", false;
  kvq::ConfigKey k{};
  if (f[0] == "bf16")
    k.dtype = kvq::DType::kBF16;
  else if (f[0] == "fp16")
    k.dtype = kvq::DType::kFP16;
  else
    return *error = "dtype '" + f[0] + "' is not bf16 or fp16", false;
  if (!parse_int(f[1], &k.head_dim) || !parse_int(f[2], &k.page))
    return *error = "head dim and page must be numbers", false;
  if (!parse_format(f[3], &k.k) || !parse_format(f[4], &k.v))
    return *error = "formats are none, int8, int4, int2, int4g<G>, int2g<G>", false;
  *key = k;
  return true;
}

std::string config_string(const kvq::ConfigKey& key) {
  return std::string(key.dtype == kvq::DType::kBF16 ? "bf16" : "fp16") + "|" + std::to_string(key.head_dim) + "|" +
         std::to_string(key.page) + "|" + format_string(key.k) + "|" + format_string(key.v);
}

std::vector<std::string> compiled_configs() {
  std::vector<std::string> out;
  for (const kvq::ConfigKey& k : keys_of(Instances{})) out.push_back(config_string(k));
  return out;
}

bool is_compiled(const kvq::ConfigKey& key) { return kvq::contains(Instances{}, key); }

size_t record_bytes_of(const kvq::ConfigKey& key) {
  if (kvq::validate_layout(key.k, key.v, key.head_dim, key.page) != kvq::Status::kSuccess) return 0;
  return kvq::record_offsets(key.k, key.v, key.head_dim, key.page).bytes;
}

const char* status_name(kvq::Status s) {
  switch (s) {
    case kvq::Status::kSuccess: return "kSuccess";
    case kvq::Status::kNullPointer: return "kNullPointer";
    case kvq::Status::kInvalidShape: return "kInvalidShape";
    case kvq::Status::kInvalidLength: return "kInvalidLength";
    case kvq::Status::kBlockTableOverflow: return "kBlockTableOverflow";
    case kvq::Status::kInvalidPageId: return "kInvalidPageId";
    case kvq::Status::kInvalidHotSlot: return "kInvalidHotSlot";
    case kvq::Status::kConfigMismatch: return "kConfigMismatch";
    case kvq::Status::kNotInstantiated: return "kNotInstantiated";
    case kvq::Status::kWorkspaceTooSmall: return "kWorkspaceTooSmall";
    case kvq::Status::kCudaError: return "kCudaError";
  }
  return "kUnknown";
}

kvq::Status cpu_append(const kvq::ConfigKey& key, const kvq::CacheView<void>& view, const kvq::AppendBatch<void>& a,
                       uint32_t* flags) {
  return kvq::dispatch(Instances{}, key, [&](auto tag) {
    using Cfg = typename decltype(tag)::type;
    using T = typename Cfg::dtype;
    return kvq::reference::append<Cfg>(kvq::typed_view<T>(view), kvq::typed_append<T>(a), flags);
  });
}

kvq::Status cpu_attention(const kvq::ConfigKey& key, const kvq::CacheView<void>& view,
                          const kvq::AttentionBatch<void>& a, float* out) {
  return kvq::dispatch(Instances{}, key, [&](auto tag) {
    using Cfg = typename decltype(tag)::type;
    using T = typename Cfg::dtype;
    return kvq::reference::attention<Cfg>(kvq::typed_view<T>(view), kvq::typed_attention<T>(a), out);
  });
}

kvq::Status cpu_dequantize_sequence(const kvq::ConfigKey& key, const kvq::CacheView<void>& view, int batch, int b,
                                    int64_t len, int64_t cold, void* k_out, void* v_out) {
  return kvq::dispatch(Instances{}, key, [&](auto tag) {
    using Cfg = typename decltype(tag)::type;
    using T = typename Cfg::dtype;
    return kvq::reference::dequantize_sequence<Cfg>(kvq::typed_view<T>(view), batch, b, len, cold, static_cast<T*>(k_out),
                                                    static_cast<T*>(v_out));
  });
}

kvq::Status cpu_plan_decode(const kvq::ConfigKey& key, const kvq::DecodeShape& shape, kvq::DecodePlan* plan) {
  return kvq::dispatch(Instances{}, key, [&](auto tag) {
    using Cfg = typename decltype(tag)::type;
    return kvq::plan_decode(shape, Cfg::head_dim, Cfg::page, Cfg::record_bytes, plan);
  });
}

kvq::Status cpu_plan_prefill(const kvq::ConfigKey& key, const kvq::PrefillShape& shape, kvq::PrefillPlan* plan) {
  return kvq::dispatch(Instances{}, key, [&](auto tag) {
    using Cfg = typename decltype(tag)::type;
    return kvq::plan_prefill(shape, Cfg::head_dim, Cfg::page, Cfg::record_bytes,
                             kvq::prefill_rows_per_cta(Cfg::head_dim, true), plan);
  });
}

namespace {

struct HostF32 {  // fp32 with the model dtypes' conversions
  float x;
  static HostF32 from_float(float f) { return HostF32{f}; }
  float to_float() const { return x; }
};

template <class T, int D>
void rotate_rows(T* x, int64_t n, uint64_t seed, bool inverse) {
  for (int64_t r = 0; r < n; ++r) {
    float f[D];
    T* p = x + r * D;
    for (int e = 0; e < D; ++e) f[e] = p[e].to_float();
    if (inverse)
      kvq::unrotate<D>(f, seed);
    else
      kvq::rotate<D>(f, seed);
    for (int e = 0; e < D; ++e) p[e] = T::from_float(f[e]);
  }
}

template <class T>
kvq::Status rotate_typed(T* x, int D, int64_t n, uint64_t seed, bool inverse) {
  switch (D) {
    case 64: return rotate_rows<T, 64>(x, n, seed, inverse), kvq::Status::kSuccess;
    case 128: return rotate_rows<T, 128>(x, n, seed, inverse), kvq::Status::kSuccess;
    case 256: return rotate_rows<T, 256>(x, n, seed, inverse), kvq::Status::kSuccess;
    default: return kvq::Status::kConfigMismatch;
  }
}

}  // namespace

kvq::Status cpu_rotate(void* x, RotateDType dtype, int D, int64_t n, uint64_t seed, bool inverse) {
  if (n < 0) return kvq::Status::kInvalidShape;
  if (n > 0 && !x) return kvq::Status::kNullPointer;
  switch (dtype) {
    case RotateDType::kF32: return rotate_typed(static_cast<HostF32*>(x), D, n, seed, inverse);
    case RotateDType::kBF16: return rotate_typed(static_cast<kvq::bf16*>(x), D, n, seed, inverse);
    case RotateDType::kFP16: return rotate_typed(static_cast<kvq::fp16*>(x), D, n, seed, inverse);
  }
  return kvq::Status::kConfigMismatch;
}

}  // namespace kvq_torch
