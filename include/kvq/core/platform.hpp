// kvq/core/platform.hpp - compiler portability macros and the versioned namespace.
//
// Every kvq symbol lives in `kvq::v1` (an inline namespace), so two engines linking different
// kvq majors into one process never share a mangled name.
#pragma once

#if defined(__CUDACC__)
#define KVQ_HD __host__ __device__ __forceinline__
#define KVQ_HD_CONSTEXPR __host__ __device__ constexpr
#define KVQ_DEVICE __device__ __forceinline__
#else
#define KVQ_HD inline
#define KVQ_HD_CONSTEXPR constexpr
#define KVQ_DEVICE inline
#endif

// Placed before a __host__ __device__ template that calls a caller-supplied functor: the functor
// may be host-only (the host reference) or device-only (a kernel); each instantiation only runs
// where its functor can (the same idiom CCCL uses).
#if defined(__CUDACC__)
#define KVQ_EXEC_CHECK_DISABLE _Pragma("nv_exec_check_disable")
#else
#define KVQ_EXEC_CHECK_DISABLE
#endif

// Unrolling hint that host compilers do not warn about.
#if defined(__CUDA_ARCH__)
#define KVQ_UNROLL _Pragma("unroll")
#define KVQ_UNROLL8 _Pragma("unroll 8")
#else
#define KVQ_UNROLL
#define KVQ_UNROLL8
#endif

// Kernels get hidden visibility so that a shared library instantiating them exports nothing.
#if defined(__GNUC__)
#define KVQ_HIDDEN __attribute__((visibility("hidden")))
#else
#define KVQ_HIDDEN
#endif

#define KVQ_NAMESPACE_BEGIN \
  namespace kvq {           \
  inline namespace v1 {
#define KVQ_NAMESPACE_END \
  }                       \
  }
