// Main of serve_gpu_tests (tests/common/gpu_test_main.hpp: skipped without a GPU).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "../../../tests/common/gpu_test_main.hpp"
#include "backend_gpu.hpp"

int main(int argc, char** argv) { return kvq_test::gpu_test_main(argc, argv, [] { return serve::gpu_unavailable_reason(); }); }
