// kvq/kernels/record_codec_fwd.cuh - the primary templates of a format's decode operand codecs (the
// concept is described in record_codec.cuh; asym_record_codec.cuh, int8_record_codec.cuh and
// none_record_codec.cuh are the specializations).
#pragma once

#include "kvq/core/platform.hpp"

KVQ_NAMESPACE_BEGIN
namespace detail {

template <class Q, class Cfg>
struct KeyOperand;
template <class Q, class Cfg>
struct ValueOperand;

}  // namespace detail
KVQ_NAMESPACE_END
