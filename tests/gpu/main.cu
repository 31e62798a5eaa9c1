// Main of the GPU test binary (tests/common/gpu_test_main.hpp: skipped without a GPU).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <cstdio>
#include <string>

#include "../common/gpu_test_main.hpp"

int main(int argc, char** argv) {
  return kvq_test::gpu_test_main(argc, argv, []() -> std::string {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) return std::string("no usable GPU: ") + (e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, 0);
    std::printf("GPU: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
    return "";
  });
}
