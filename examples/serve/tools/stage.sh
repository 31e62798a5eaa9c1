#!/usr/bin/env bash
# stage.sh - puts what run_gpu_bench.sh needs on a machine without network into .device/serve/
# (ignored by git, so it can be carried): the model in two halves under 64 MiB each
# (SmolLM2-135M-Instruct.Q4_1.gguf.part-aa, -ab) and the Debian packages of cpp-httplib,
# nlohmann-json and CLI11 (debs/, from apt's cache; downloaded with apt-get download if missing).
set -euo pipefail
cd "$(dirname "$0")/../../.."
dest=.device/serve
mkdir -p $dest/debs
model=$(examples/smollm2/fetch_model.sh)
rm -f $dest/SmolLM2-135M-Instruct.Q4_1.gguf.part-*
split -b 50M "$model" $dest/SmolLM2-135M-Instruct.Q4_1.gguf.part-
for p in libcpp-httplib-dev libcpp-httplib0.11 nlohmann-json3-dev libcli11-dev; do
  deb=$(ls /var/cache/apt/archives/${p}_*.deb 2>/dev/null | head -n1 || true)
  if [ -n "$deb" ]; then cp "$deb" $dest/debs/; else (cd $dest/debs && apt-get download "$p"); fi
done
ls -l $dest $dest/debs
