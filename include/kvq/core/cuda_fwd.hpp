// kvq/core/cuda_fwd.hpp - the one CUDA type kvq's declaration headers name, without CUDA headers,
// so host-only translation units of an engine can call kvq launchers.
#pragma once

struct CUstream_st;
typedef struct CUstream_st* cudaStream_t;  // identical to the CUDA runtime's typedef
