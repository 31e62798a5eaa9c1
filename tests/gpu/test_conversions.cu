// The hardware fp32 -> fp16 conversion the kernels use must equal the portable software
// conversion of the host reference on every one of the 2^32 fp32 bit patterns.
#include <kvq/numeric/bits.hpp>

#include <ios>

#include "gpu_util.cuh"

namespace {

__global__ void count_f16_mismatches(unsigned long long* mismatches, uint32_t* first) {
  unsigned long long local = 0;
  const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
  for (uint64_t u = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; u < (1ull << 32); u += stride) {
    const float f = __uint_as_float(uint32_t(u));
    const uint16_t hw = kvq::f32_to_f16_bits(f), sw = kvq::f32_to_f16_bits_soft(f);
    if (hw != sw) {
      ++local;
      atomicMin(first, uint32_t(u));
    }
  }
  if (local) atomicAdd(mismatches, local);
}

__global__ void roundtrip_f16(unsigned long long* mismatches) {
  const uint32_t h = blockIdx.x * blockDim.x + threadIdx.x;
  if (h >= 65536) return;
  const float hw = kvq::f16_bits_to_f32(uint16_t(h));
  const uint16_t back = kvq::f32_to_f16_bits_soft(hw);
  const bool nan = (h & 0x7fff) > 0x7c00;
  if (!nan && back != h) atomicAdd(mismatches, 1ull);
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("fp32 to fp16: device conversion equals the host reference's on all 2^32 inputs") {
    kvq_test::DeviceBuffer<unsigned long long> count(std::vector<unsigned long long>{0ull});
    kvq_test::DeviceBuffer<uint32_t> first(std::vector<uint32_t>{0xffffffffu});
    count_f16_mismatches<<<132 * 8, 256>>>(count.get(), first.get());
    KVQ_CUDA_CHECK(cudaGetLastError());
    KVQ_CUDA_CHECK(cudaDeviceSynchronize());
    CHECK_MESSAGE(count.download()[0] == 0ull, "first mismatching input bits 0x" << std::hex << first.download()[0]);
    kvq_test::DeviceBuffer<unsigned long long> rt(std::vector<unsigned long long>{0ull});
    roundtrip_f16<<<256, 256>>>(rt.get());
    KVQ_CUDA_CHECK(cudaDeviceSynchronize());
    CHECK(rt.download()[0] == 0ull);
  }
}
