#!/usr/bin/env bash
# run_gpu.sh - kvq_torch on a GPU machine with PyTorch (CUDA), nvcc and no internet, from the
# repository root:  bash python/kvq_torch/run_gpu.sh
# Builds the package against the installed torch, runs its tests (GPU ones included), the decode
# benchmark and the Hugging Face example; every step bounded by `timeout`, about 8 minutes in all.
# Outputs under $OUT (default ./kvq_torch_out): build.log, pytest.log, bench.csv/bench.log, hf.log.
#   SMOLLM2_GGUF   the model file (default ~/.cache/kvq-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf; the
#                  example is skipped without it); SMOLLM2_TEXT the Persuasion text (fetch_text.sh)
#   KVQ_TORCH_CONFIG_FILTER  which configurations to compile (default: head dim 64 and 128, page 64,
#                  every format of configs.txt minus int8 at 128)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/kvq_torch_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MAX_JOBS=${MAX_JOBS:-16} TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0a}
export KVQ_TORCH_CONFIG_FILTER=${KVQ_TORCH_CONFIG_FILTER:-'d64_p64|d128_p64_(none|int2|int4|k4v2)'}
export KVQ_REQUIRE_GPU=${KVQ_REQUIRE_GPU:-1}
gguf=${SMOLLM2_GGUF:-$HOME/.cache/kvq-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}
text=${SMOLLM2_TEXT:-$HOME/.cache/kvq-smollm2/austen/persuasion.txt}
status=0
step() { local t=$1 name=$2; shift 2; local s=$SECONDS
  echo "== $name (limit ${t}s)"; timeout "$t" "$@"; local rc=$?
  echo "== $name: rc=$rc, $((SECONDS - s)) s"; [ $rc -eq 0 ] || status=1; return $rc; }

python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name())'
rm -rf python/kvq_torch/build python/kvq_torch/*.egg-info
step 240 build python3 -m pip install --no-build-isolation --no-deps -v ./python/kvq_torch >"$OUT/build.log" 2>&1 ||
  { tail -40 "$OUT/build.log"; exit 1; }
grep -E "^kvq_torch:|warning" "$OUT/build.log" | head -20
step 150 pytest python3 -m pytest -q -rs python/kvq_torch/tests -p no:cacheprovider 2>&1 | tee "$OUT/pytest.log" | tail -25
step 90 bench python3 python/kvq_torch/bench/bench_decode.py --grid 1x4096,8x4096,8x131072 --formats int2,none \
  --iters 20 --cxx-csv bench/results/decode_h100.csv --csv "$OUT/bench.csv" 2>&1 | tee "$OUT/bench.log"
if [ -f "$gguf" ]; then
  step 150 hf python3 python/kvq_torch/examples/hf_smollm2/run.py perplexity --model "$gguf" --text "$text" \
    --formats none,int8,int4,int2,k4v2 2>&1 | tee "$OUT/hf.log"
  step 60 hf_generate python3 python/kvq_torch/examples/hf_smollm2/run.py generate --model "$gguf" \
    --formats none,int2 2>&1 | tee -a "$OUT/hf.log"
else
  echo "== hf: skipped, no model at $gguf (set SMOLLM2_GGUF; it travels in two parts, see docs/ACCURACY.md)"
fi
exit $status
