// Main of the smollm2 GPU backend tests (tests/common/gpu_test_main.hpp: skipped without a GPU).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "../../common/gpu_test_main.hpp"
#include "model_gpu.hpp"

int main(int argc, char** argv) { return kvq_test::gpu_test_main(argc, argv, [] { return smollm2::gpu_unavailable_reason(); }); }
