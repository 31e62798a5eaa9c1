// kvq::last_cuda_error() (core/status.hpp): the cudaError_t behind the latest kCudaError, per host
// thread, 0 until a kvq call on the thread failed, not reset by reading it. (The GPU test
// test_cuda_errors.cu checks the launchers that set it.)
#include <string>
#include <thread>

#include "test_util.hpp"

TEST_CASE("status: last_cuda_error is per host thread, 0 until set, and reading it does not reset it") {
  int before = -1;
  std::thread([&] { before = kvq::last_cuda_error(); }).join();
  CHECK(before == 0);  // a fresh thread has seen no kvq failure

  const int saved = kvq::last_cuda_error();
  kvq::detail::cuda_error_slot() = 700;  // what core/launch.cuh's cuda_status stores (700: cudaErrorIllegalAddress)
  CHECK(kvq::last_cuda_error() == 700);
  CHECK(kvq::last_cuda_error() == 700);
  int other = -1;
  std::thread([&] {
    other = kvq::last_cuda_error();
    kvq::detail::cuda_error_slot() = 1;  // another thread's failure
  }).join();
  CHECK(other == 0);
  CHECK(kvq::last_cuda_error() == 700);  // untouched by the other thread's
  kvq::detail::cuda_error_slot() = saved;
  CHECK(std::string(kvq::to_string(kvq::Status::kCudaError)) == "CUDA error");
}
