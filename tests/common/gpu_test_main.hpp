// The main of kvq's GPU test binaries (kvq_gpu_tests, smollm2_gpu_tests, serve_gpu_tests). Without
// a usable GPU a run exits with code 77, which CTest reports as skipped (SKIP_RETURN_CODE); with
// KVQ_REQUIRE_GPU=1 a missing GPU is a failure instead. Listing the test cases (CTest discovery at
// build time) needs no GPU. Include after `#define DOCTEST_CONFIG_IMPLEMENT` and <doctest/doctest.h>.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace kvq_test {

// why_unavailable(): "" when a GPU is usable, else why not; called only when tests will run.
template <class WhyUnavailable>
int gpu_test_main(int argc, char** argv, WhyUnavailable why_unavailable) {
  bool listing = false;
  for (int i = 1; i < argc; ++i) listing = listing || std::strncmp(argv[i], "--list", 6) == 0 || std::strncmp(argv[i], "-l", 2) == 0;
  if (!listing) {
    const std::string why = why_unavailable();
    if (!why.empty()) {
      const char* req = std::getenv("KVQ_REQUIRE_GPU");
      if (req && std::strcmp(req, "1") == 0) {
        std::fprintf(stderr, "KVQ_REQUIRE_GPU=1 but %s\n", why.c_str());
        return 1;
      }
      std::printf("%s: GPU tests skipped (set KVQ_REQUIRE_GPU=1 to make this a failure)\n", why.c_str());
      return 77;
    }
  }
  doctest::Context ctx(argc, argv);
  return ctx.run();
}

}  // namespace kvq_test
