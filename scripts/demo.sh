#!/usr/bin/env bash
# Builds and runs the quickstart (the README's demo command). Installs cmake/g++ from Debian
# packages when missing; builds the GPU part too when nvcc is found.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v cmake >/dev/null || need+=(cmake)
command -v g++ >/dev/null || need+=(g++)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq && apt-get install -y -qq "${need[@]}"
fi

build=${KVQ_BUILD_DIR:-build-demo}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DKVQ_BUILD_TESTS=OFF
cmake --build "$build" -j "$(nproc)" --target quickstart
"$build"/examples/quickstart
