// kvq/quant/formats.hpp - the quantizer types that choose a K or V format (DESIGN section 4).
//
//   kvq::Int2<G>, kvq::Int4<G>  asymmetric min/max, fp16 scale and zero per group of G
//                               (keys: one channel x G tokens; values: one token x G channels)
//   kvq::Int3<G>                the same with 8 levels, its codes in two planes (packing.hpp);
//                               the decode and prefill kernels do not read it yet
//   kvq::Int8                   symmetric, one fp32 scale per token and head
//   kvq::NoQuant                the model dtype stored as is (the "none" baseline)
//
// K and V formats are chosen independently (e.g. Int4<32> keys with Int2<32> values).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvq/core/platform.hpp"

KVQ_NAMESPACE_BEGIN

enum class QuantKind : int { kNone = 0, kInt8 = 1, kAsym = 2 };

// Runtime description of a format: what the planner, the dispatcher and the docs talk about.
struct QuantDesc {
  QuantKind kind;
  int bits;   // 16 for kNone, 8 for kInt8, 2, 3 or 4 for kAsym
  int group;  // kAsym only: Gk (keys) or Gv (values); 0 otherwise
  constexpr bool operator==(const QuantDesc& o) const {
    return kind == o.kind && bits == o.bits && group == o.group;
  }
};

template <int Bits, int Group>
struct IntAsym {
  static_assert(Bits >= 2 && Bits <= 4, "asymmetric formats are INT2, INT3 or INT4");
  static_assert(Group >= 1, "group size must be positive");
  static constexpr QuantKind kind = QuantKind::kAsym;
  static constexpr int bits = Bits;
  static constexpr int group = Group;
  static constexpr int max_code = (1 << Bits) - 1;
  static constexpr int codes_per_word = 32 / Bits;  // INT2 / INT4 (INT3: two planes, packing.hpp)
  static constexpr QuantDesc desc{kind, bits, group};
};

template <int Group = 32>
using Int2 = IntAsym<2, Group>;
template <int Group = 32>
using Int4 = IntAsym<4, Group>;
template <int Group = 64>
using Int3 = IntAsym<3, Group>;

struct Int8 {
  static constexpr QuantKind kind = QuantKind::kInt8;
  static constexpr int bits = 8;
  static constexpr int group = 0;
  static constexpr QuantDesc desc{kind, bits, group};
};

struct NoQuant {
  static constexpr QuantKind kind = QuantKind::kNone;
  static constexpr int bits = 16;
  static constexpr int group = 0;
  static constexpr QuantDesc desc{kind, bits, group};
};

constexpr QuantDesc kDescNone{QuantKind::kNone, 16, 0};
constexpr QuantDesc kDescInt8{QuantKind::kInt8, 8, 0};
constexpr QuantDesc desc_int2(int group = 32) { return QuantDesc{QuantKind::kAsym, 2, group}; }
constexpr QuantDesc desc_int4(int group = 32) { return QuantDesc{QuantKind::kAsym, 4, group}; }
constexpr QuantDesc desc_int3(int group = 64) { return QuantDesc{QuantKind::kAsym, 3, group}; }

// Which half of a record a format is applied to: keys are grouped per channel over tokens,
// values per token over channels.
enum class Role : int { kKey = 0, kValue = 1 };

KVQ_NAMESPACE_END
