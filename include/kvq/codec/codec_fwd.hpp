// kvq/codec/codec_fwd.hpp - the primary template of a format's codec (codec.hpp describes the
// concept; none_codec.hpp, int8_codec.hpp and asym_codec.hpp are the specializations).
#pragma once

#include <cstddef>

#include "kvq/core/platform.hpp"

KVQ_NAMESPACE_BEGIN

// Codec<Q>: how format Q's record sections become values and back. Undefined for a type that is
// not a format: a missing codec is a compile-time error where it is used.
template <class Q>
struct Codec;

// A contiguous run of a section's parameters (Codec<Q>::param_run): `src` bytes into the
// section's parameter part, `bytes` long (0: no such run).
struct ParamRun {
  size_t src, bytes;
};

KVQ_NAMESPACE_END
