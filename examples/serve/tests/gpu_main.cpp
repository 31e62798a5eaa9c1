// Main of serve_gpu_tests. Without a usable GPU every run exits with code 77, which CTest reports as
// skipped (SKIP_RETURN_CODE); with KVQ_REQUIRE_GPU=1 a missing GPU is a failure. Listing the test
// cases (CTest discovery at build time) needs no GPU.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backend_gpu.hpp"

int main(int argc, char** argv) {
  bool listing = false;
  for (int i = 1; i < argc; ++i) listing = listing || std::strncmp(argv[i], "--list", 6) == 0 || std::strncmp(argv[i], "-l", 2) == 0;
  if (!listing) {
    const std::string why = serve::gpu_unavailable_reason();
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
