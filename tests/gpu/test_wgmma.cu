// The wgmma primitives of numeric/wgmma.cuh on their own (sm_90a builds on an sm_90 GPU): one
// warpgroup computes S = Q K^T (both operands in swizzled shared-memory panels, K-major; and again
// with Q from registers) and
// O = P V (P from registers in the A layout, V MN-major with transpose-B), for 32- and 64-token
// S tiles and head dims 64 and 128, against a double-precision product on the host. A wrong
// descriptor, swizzle or fragment layout gives wrong entries, not a small error.
#include <kvq/numeric/wgmma.cuh>

#include <cmath>
#include <random>

#include "gpu_util.cuh"

// This translation unit's wgmma probe (kvq::detail::wgmma_available); not in the anonymous
// namespace: a kernel of internal linkage cannot have kvq's hidden visibility.
struct WgmmaTestTag {};

namespace {

using kvq::bf16;

// Row-major [rows][cols] 16-bit matrix from global into a panel matrix at `dst` (16-byte chunks).
__device__ void to_panels(uint8_t* dst, const bf16* src, int rows, int cols) {
  for (int idx = threadIdx.x; idx < rows * cols / 8; idx += blockDim.x) {
    const int r = idx / (cols / 8), c = idx % (cols / 8);
    *reinterpret_cast<uint4*>(dst + 16 * kvq::detail::panel_chunk(rows, r, c)) = reinterpret_cast<const uint4*>(src)[idx];
  }
}

// q [64][D], k [BN][D], v [BN][D], p [64][BN]; s_out [64][BN], o_out [64][D] (fp32).
template <int D, int BN>
__global__ void wgmma_probe(const bf16* q, const bf16* k, const bf16* v, const bf16* p, float* s_out, float* o_out) {
  using namespace kvq::detail;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw_addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  uint8_t* smem = smem_raw + ((1024 - raw_addr % 1024) % 1024);
  uint8_t* qs = smem;
  uint8_t* ks = qs + 64 * D * 2;
  uint8_t* vs = ks + BN * D * 2;
  to_panels(qs, q, 64, D);
  to_panels(ks, k, BN, D);
  to_panels(vs, v, BN, D);
  fence_proxy_async_shared();
  __syncthreads();
  const uint32_t qa = static_cast<uint32_t>(__cvta_generic_to_shared(qs));
  const uint32_t ka = static_cast<uint32_t>(__cvta_generic_to_shared(ks));
  const uint32_t va = static_cast<uint32_t>(__cvta_generic_to_shared(vs));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, i = lane % 4;
  float s[BN / 2];
  wgmma_fence();
  KVQ_UNROLL
  for (int kk = 0; kk < D / 16; ++kk)
    wgmma_ss<bf16, BN>(s, kmajor_desc(qa, 64, kk), kmajor_desc(ka, BN, kk), kk > 0);
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_pin(s);
  for (int j = 0; j < BN / 8; ++j)
    for (int e = 0; e < 4; ++e) s_out[(16 * warp + g + 8 * (e / 2)) * BN + 8 * j + 2 * i + e % 2] = s[4 * j + e];
  // The same S with Q from registers (A layout) and K-major B: wgmma_rs with transpose-B clear.
  float s2[BN / 2];
  {
    uint32_t qa[D / 16][4];
    auto qw = [&](int r, int c) { return *reinterpret_cast<const uint32_t*>(q + r * D + c); };
    for (int kk = 0; kk < D / 16; ++kk) {
      qa[kk][0] = qw(16 * warp + g, 16 * kk + 2 * i);
      qa[kk][1] = qw(16 * warp + g + 8, 16 * kk + 2 * i);
      qa[kk][2] = qw(16 * warp + g, 16 * kk + 2 * i + 8);
      qa[kk][3] = qw(16 * warp + g + 8, 16 * kk + 2 * i + 8);
    }
    wgmma_fence();
    KVQ_UNROLL
    for (int kk = 0; kk < D / 16; ++kk)
      wgmma_rs<bf16, BN, 0>(s2, qa[kk], kmajor_desc(ka, BN, kk), kk > 0);
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_pin(s2);
  }
  for (int j = 0; j < BN / 8; ++j)
    for (int e = 0; e < 4; ++e) s_out[64 * BN + (16 * warp + g + 8 * (e / 2)) * BN + 8 * j + 2 * i + e % 2] = s2[4 * j + e];
  uint32_t pa[BN / 16][4];
  auto pw = [&](int r, int c) { return *reinterpret_cast<const uint32_t*>(p + r * BN + c); };
  for (int kt = 0; kt < BN / 16; ++kt) {
    pa[kt][0] = pw(16 * warp + g, 16 * kt + 2 * i);
    pa[kt][1] = pw(16 * warp + g + 8, 16 * kt + 2 * i);
    pa[kt][2] = pw(16 * warp + g, 16 * kt + 2 * i + 8);
    pa[kt][3] = pw(16 * warp + g + 8, 16 * kt + 2 * i + 8);
  }
  float o[D / 2];
  for (int r = 0; r < D / 2; ++r) o[r] = 0.0f;
  wgmma_fence();
  KVQ_UNROLL
  for (int kt = 0; kt < BN / 16; ++kt) wgmma_rs<bf16, D, 1>(o, pa[kt], mnmajor_desc(va, BN, kt), 1);
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_pin(o);
  for (int j = 0; j < D / 8; ++j)
    for (int e = 0; e < 4; ++e) o_out[(16 * warp + g + 8 * (e / 2)) * D + 8 * j + 2 * i + e % 2] = o[4 * j + e];
}

template <int D, int BN>
void check_probe(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto fill = [&](size_t n) {
    std::vector<bf16> x(n);
    for (auto& e : x) e = bf16::from_float(nd(rng));
    return x;
  };
  const std::vector<bf16> q = fill(64 * D), k = fill(BN * D), v = fill(BN * D), p = fill(64 * BN);
  kvq_test::DeviceBuffer<bf16> dq(q), dk(k), dv(v), dp(p);
  kvq_test::DeviceBuffer<float> ds(2 * 64 * BN), dout(64 * D);  // S twice: Q from shared memory, from registers
  const size_t smem = 1024 + size_t(64 + 2 * BN) * D * 2;
  KVQ_CUDA_CHECK(cudaFuncSetAttribute(wgmma_probe<D, BN>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  wgmma_probe<D, BN><<<1, 128, smem>>>(dq.get(), dk.get(), dv.get(), dp.get(), ds.get(), dout.get());
  KVQ_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> s = ds.download(), o = dout.download();
  int bad_s = 0, bad_s2 = 0, bad_o = 0;
  for (int r = 0; r < 64; ++r) {
    for (int c = 0; c < BN; ++c) {
      double ref = 0.0;
      for (int x = 0; x < D; ++x) ref += double(q[r * D + x].to_float()) * double(k[c * D + x].to_float());
      if (std::fabs(s[r * BN + c] - ref) > 1e-3 * (1.0 + std::fabs(ref))) ++bad_s;
      if (std::fabs(s[64 * BN + r * BN + c] - ref) > 1e-3 * (1.0 + std::fabs(ref))) ++bad_s2;
    }
    for (int c = 0; c < D; ++c) {
      double ref = 0.0;
      for (int x = 0; x < BN; ++x) ref += double(p[r * BN + x].to_float()) * double(v[x * D + c].to_float());
      if (std::fabs(o[r * D + c] - ref) > 1e-3 * (1.0 + std::fabs(ref))) ++bad_o;
    }
  }
  CHECK_MESSAGE(bad_s == 0, "S = Q K^T: " << bad_s << " of " << 64 * BN << " entries wrong (D " << D << ", BN " << BN << ")");
  CHECK_MESSAGE(bad_s2 == 0, "S = Q K^T, Q from registers: " << bad_s2 << " of " << 64 * BN << " entries wrong (D " << D
                                                               << ", BN " << BN << ")");
  CHECK_MESSAGE(bad_o == 0, "O = P V: " << bad_o << " of " << 64 * D << " entries wrong (D " << D << ", BN " << BN << ")");
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("wgmma primitives: swizzled panels, descriptors and fragment layouts (sm_90a)") {
    int dev = 0;
    KVQ_CUDA_CHECK(cudaGetDevice(&dev));
    if (!kvq::detail::wgmma_available<WgmmaTestTag>(dev)) {
      MESSAGE("wgmma path not built for this GPU (needs an sm_90a build and a compute capability 9.0 GPU): skipped");
      return;
    }
    check_probe<128, 64>(1);
    check_probe<128, 32>(2);
    check_probe<64, 64>(3);
    check_probe<64, 32>(4);
  }
}
