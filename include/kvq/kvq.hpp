// kvq/kvq.hpp - everything a host-only consumer needs (formats, layout, planner, host reference).
// Kernels have their own headers: kvq/append/append.hpp (declarations) and *_impl.cuh.
#pragma once

#include "kvq/attention/batch.hpp"
#include "kvq/cache/append_plan.hpp"
#include "kvq/cache/config.hpp"
#include "kvq/cache/planner.hpp"
#include "kvq/cache/record_layout.hpp"
#include "kvq/cache/rollback.hpp"
#include "kvq/cache/view.hpp"
#include "kvq/cache/window.hpp"
#include "kvq/core/status.hpp"
#include "kvq/core/version.hpp"
#include "kvq/dispatch/dispatch.hpp"
#include "kvq/numeric/dtype.hpp"
#include "kvq/quant/element_decode.hpp"
#include "kvq/quant/formats.hpp"
#include "kvq/quant/section_codec.hpp"
#include "kvq/reference/append.hpp"
#include "kvq/reference/attention.hpp"
#include "kvq/reference/dequantize.hpp"
#include "kvq/reference/host_cache.hpp"
