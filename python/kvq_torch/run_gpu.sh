#!/usr/bin/env bash
# run_gpu.sh - kvq_torch on a GPU machine with PyTorch (CUDA), nvcc and no internet, from the
# repository root:  bash python/kvq_torch/run_gpu.sh
# About 6 minutes at most, every step bounded by `timeout` and its results written to $OUT as it ends:
#   build  <= 200 s  the configurations the tests, the benchmark and the HF example need
#   then, side by side (<= 90 s): pytest (GPU tests included), HF perplexity (one process a format:
#          none,int2,int4,k4v2 plain and int2_rec,k4v2_rec = kvq::recommended_* with rotation, 4 windows
#          of 4096 as `smollm2 perplexity --window 4096 --windows 4`), HF generation (<= 40 s)
#   bench  <= 45 s   decode, int2, head dim 128, batch 1 and 8 x 131072 tokens (alone on the GPU)
# Outputs under $OUT (default ./kvq_torch_out): build.log, pytest.log, hf_ppl.csv
# (format,variant,perplexity,tokens; variant plain or rec), hf_ppl_<format>.log, hf_generate.log,
# bench.csv / bench.log, summary.txt.
#   SMOLLM2_GGUF  the model (default /tmp/m/model.gguf, else ~/.cache/kvq-smollm2/...; the HF steps
#                 are skipped without it); SMOLLM2_TEXT the Persuasion text (default /tmp/m/persuasion.txt)
#   KVQ_TORCH_CONFIG_FILTER  which configurations to compile (default below)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/kvq_torch_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MAX_JOBS=${MAX_JOBS:-16} TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0a}
export KVQ_TORCH_CONFIG_FILTER=${KVQ_TORCH_CONFIG_FILTER:-'d64_p64_(none|int2|int4|k4v2)$|d128_p64_int2$'}
export KVQ_REQUIRE_GPU=${KVQ_REQUIRE_GPU:-1}
export PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1  # offline: never wait on an index
pick() { for f in "$@"; do [ -f "$f" ] && { echo "$f"; return; }; done; echo "$1"; }
gguf=${SMOLLM2_GGUF:-$(pick /tmp/m/model.gguf "$HOME/.cache/kvq-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")}
text=${SMOLLM2_TEXT:-$(pick /tmp/m/persuasion.txt "$HOME/.cache/kvq-smollm2/austen/persuasion.txt")}
status=0
T0=$SECONDS
note() { echo "$*" | tee -a "$OUT/summary.txt"; }
step() { local t=$1 name=$2; shift 2; local s=$SECONDS
  echo "== $name (limit ${t}s)"; timeout -k 5 "$t" "$@"; local rc=$?
  note "== $name: rc=$rc, $((SECONDS - s)) s (at $((SECONDS - T0)) s)"; [ $rc -eq 0 ] || status=1; return $rc; }
: >"$OUT/summary.txt"

python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name())' |
  tee -a "$OUT/summary.txt"

# ---- build (<= 200 s) --------------------------------------------------------------------------
# ninja: torch's build falls back to one compile at a time without it (far over the budget).
if ! python3 -c 'import sys; from torch.utils.cpp_extension import is_ninja_available as n; sys.exit(0 if n() else 1)'; then
  nb=$(python3 -c 'import ninja; print(ninja.BIN_DIR)' 2>/dev/null) && export PATH="$nb:$PATH"
  python3 -c 'import sys; from torch.utils.cpp_extension import is_ninja_available as n; sys.exit(0 if n() else 1)' ||
    note "** no ninja: the build compiles one file at a time and will likely run out of its 200 s"
fi
rm -rf python/kvq_torch/build python/kvq_torch/*.egg-info python/kvq_torch/kvq_torch/_C*.so
s=$SECONDS
built=0
# pip without build isolation, dependencies or an index: setuptools and wheel come from this env.
if python3 -c 'import setuptools, wheel' 2>/dev/null; then
  step 200 build python3 -m pip install --no-build-isolation --no-deps --no-index -v ./python/kvq_torch \
    >"$OUT/build.log" 2>&1 && built=1
else
  note "(no 'wheel' in this env: building in place instead of pip install)"
fi
if [ $built -eq 0 ] && ! grep -q "error:" "$OUT/build.log" 2>/dev/null; then
  left=$((200 - (SECONDS - s))); [ $left -lt 60 ] && left=60
  (cd python/kvq_torch && step $left build_inplace python3 setup.py build_ext --inplace) >>"$OUT/build.log" 2>&1 && {
    built=1; export PYTHONPATH="$PWD/python/kvq_torch${PYTHONPATH:+:$PYTHONPATH}"; status=0; }
fi
grep -E "^kvq_torch:|warning" "$OUT/build.log" | head -20
if [ $built -eq 0 ]; then tail -40 "$OUT/build.log"; note "build failed"; exit 1; fi
cd /tmp && python3 -c 'import kvq_torch; print("kvq_torch", kvq_torch.__file__, kvq_torch.compiled_configs())' | tee -a "$OUT/summary.txt"
cd - >/dev/null

# ---- pytest, HF perplexity, HF generation side by side (<= 90 s) ---------------------------------
pids=()
step 90 pytest python3 -m pytest -q -rs python/kvq_torch/tests -p no:cacheprovider >"$OUT/pytest.log" 2>&1 &
pids+=($!)
hf=python/kvq_torch/examples/hf_smollm2/run.py
formats="int2 int2_rec k4v2_rec none int4 k4v2"
if [ -f "$gguf" ] && [ -f "$text" ]; then
  for f in $formats; do
    step 90 "hf_ppl_$f" env OMP_NUM_THREADS=2 python3 $hf perplexity --model "$gguf" --text "$text" --formats "$f" \
      --window 4096 --windows 4 --csv "$OUT/hf_ppl_$f.csv" >"$OUT/hf_ppl_$f.log" 2>&1 &
    pids+=($!)
  done
  step 40 hf_generate env OMP_NUM_THREADS=2 python3 $hf generate --model "$gguf" --formats int2,int2_rec \
    >"$OUT/hf_generate.log" 2>&1 &
  pids+=($!)
else
  note "== hf: skipped, no model at $gguf or no text at $text (set SMOLLM2_GGUF / SMOLLM2_TEXT)"
fi
for p in "${pids[@]}"; do wait "$p" || status=1; done
tail -5 "$OUT/pytest.log"
if ls "$OUT"/hf_ppl_*.csv >/dev/null 2>&1; then
  echo "format,variant,perplexity,tokens" >"$OUT/hf_ppl.csv"
  for f in $formats; do [ -f "$OUT/hf_ppl_$f.csv" ] && tail -n +2 "$OUT/hf_ppl_$f.csv" >>"$OUT/hf_ppl.csv"; done
  rm -f "$OUT"/hf_ppl_*.csv
  cat "$OUT/hf_ppl.csv" | tee -a "$OUT/summary.txt"
  grep -h "^perplexity" "$OUT"/hf_ppl_*.log
  grep -h "^generate" "$OUT/hf_generate.log" 2>/dev/null | cut -c1-200
fi

# ---- benchmark, alone on the GPU (<= 45 s) -------------------------------------------------------
step 45 bench python3 python/kvq_torch/bench/bench_decode.py --grid 1x131072,8x131072 --formats int2 --iters 20 \
  --cxx-csv "${KVQ_CXX_CSV:-bench/results/decode_h100.csv}" --csv "$OUT/bench.csv" >"$OUT/bench.log" 2>&1
cat "$OUT/bench.log"
note "total $((SECONDS - T0)) s, status $status"
exit $status
