// kvq/cache/config.hpp - CacheConfig: the compile-time description of one cache configuration.
//
//   kvq::CacheConfig<T, D, P, KQ, VQ>
//     T  model dtype (kvq::bf16 or kvq::fp16)   D  head dim (64, 128, 256)
//     P  page size in tokens (16, 32, 64, 128)  KQ, VQ  K and V formats (kvq/quant/formats.hpp)
//
// Every kernel and host routine is a template on one of these; a bad combination is a
// compile-time error here, never a runtime surprise.
#pragma once

#include "kvq/quant/record_layout.hpp"
#include "kvq/numeric/dtype.hpp"
#include "kvq/quant/formats.hpp"

KVQ_NAMESPACE_BEGIN

template <class T, int D, int P, class KQ, class VQ>
struct CacheConfig {
  static_assert(is_model_dtype<T>::value, "T must be kvq::bf16 or kvq::fp16");
  static_assert(is_supported_head_dim(D), "head dim must be 64, 128 or 256");
  static_assert(is_supported_page(P), "page size must be 16, 32, 64 or 128");
  static_assert(format_fits(KQ::desc, Role::kKey, D, P), "key group size Gk must divide the page size");
  static_assert(format_fits(VQ::desc, Role::kValue, D, P), "value group size Gv must divide the head dim");

  static_assert(record_offsets(KQ::desc, VQ::desc, D, P).bytes ==
                    section_codes_bytes(KQ::desc, D, P) + section_params_bytes(KQ::desc, Role::kKey, D, P) +
                        section_codes_bytes(VQ::desc, D, P) + section_params_bytes(VQ::desc, Role::kValue, D, P),
                "supported configurations have no padding inside a record");

  using dtype = T;
  using k_quant = KQ;
  using v_quant = VQ;
  static constexpr int head_dim = D;
  static constexpr int page = P;
  static constexpr RecordOffsets record = record_offsets(KQ::desc, VQ::desc, D, P);
  static constexpr size_t record_bytes = record.bytes;
};

// The runtime key of a configuration: what the dispatcher matches and the planner sizes.
struct ConfigKey {
  DType dtype;
  int head_dim;
  int page;
  QuantDesc k;
  QuantDesc v;
  constexpr bool operator==(const ConfigKey& o) const {
    return dtype == o.dtype && head_dim == o.head_dim && page == o.page && k == o.k && v == o.v;
  }
};

template <class Cfg>
constexpr ConfigKey key_of() {
  return ConfigKey{dtype_of<typename Cfg::dtype>(), Cfg::head_dim, Cfg::page, Cfg::k_quant::desc,
                   Cfg::v_quant::desc};
}

KVQ_NAMESPACE_END
