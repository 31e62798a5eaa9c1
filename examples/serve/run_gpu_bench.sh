#!/usr/bin/env bash
# run_gpu_bench.sh - kvq_serve on a GPU: build, a greedy GPU-vs-CPU agreement check, then per KV
# format: start the server, run bench/serve_load.py (N concurrent clients, bounded in requests and
# time, loopback only), stop the server with SIGTERM. Every step is bounded with `timeout`; the
# whole run stays within about 7 minutes with the defaults. Results go to $OUT (default
# ./serve-bench-out): serving.csv (rows for bench/results/serving.csv), server logs, generate JSON.
#
# Needs: nvcc and cmake; the model, either $SMOLLM2_GGUF or the two halves
#   .device/serve/SmolLM2-135M-Instruct.Q4_1.gguf.part-aa and .part-ab  (examples/serve/tools/stage.sh)
# and cpp-httplib, nlohmann-json, CLI11: installed, or their Debian packages in .device/serve/debs/
# (stage.sh copies them there; they are unpacked under /tmp, nothing is installed).
#
# Knobs (environment): FORMATS ("none int8 int4 k4v2 int2"), CONCURRENCY (96), REQUESTS (384),
# DURATION (seconds of load per format, 25), KV_MIB (KV-cache memory, 4096: the same for every
# format, so the formats differ in how many sequences fit), MAX_BATCH (128), PROMPT_LENS
# ("1024,2048,3072,4096"), MAX_TOKENS (128), MAX_SEQ_LEN (the server's --max-seq-len; default the
# model's context), BATCH_VARIANT=1 (the server's --batch-variant: per-batch-size decode plans and
# cuBLAS's own GEMM choice, to compare with the default batch-invariant steps), SKIP_AGREEMENT=1
# (skip the GPU-vs-CPU greedy check), BUILD (build-serve), ARCH (90a-real), SERVE_BIN (a
# kvq_serve built beforehand for this commit: skips the build), BUILD_ONLY=1 (stop after the build:
# the model is not needed for it, so it can run in a device call of its own).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/serve-bench-out}
mkdir -p "$OUT"
FORMATS=${FORMATS:-none int8 int4 k4v2 int2}
CONCURRENCY=${CONCURRENCY:-96}
REQUESTS=${REQUESTS:-384}
DURATION=${DURATION:-25}
KV_MIB=${KV_MIB:-4096}
MAX_BATCH=${MAX_BATCH:-128}
PROMPT_LENS=${PROMPT_LENS:-1024,2048,3072,4096}
MAX_TOKENS=${MAX_TOKENS:-128}
BUILD=${BUILD:-build-serve}
ARCH=${ARCH:-90a-real}
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/run.log"; }
t_start=$(date +%s)

# ---- HTTP / JSON / CLI libraries ---------------------------------------------------------------
prefix_args=()
if [ ! -f /usr/include/httplib.h ] || [ ! -f /usr/include/nlohmann/json.hpp ] || [ ! -f /usr/include/CLI/CLI.hpp ]; then
  ls .device/serve/debs/*.deb >/dev/null 2>&1 || { log "cpp-httplib/nlohmann-json/CLI11 missing and no .device/serve/debs"; exit 2; }
  deps=/tmp/serve-deps
  rm -rf $deps && mkdir -p $deps
  for d in .device/serve/debs/*.deb; do dpkg -x "$d" $deps; done
  prefix_args=(-DCMAKE_PREFIX_PATH=$deps/usr)
  export LD_LIBRARY_PATH=$deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  log "libraries unpacked from .device/serve/debs into $deps"
fi

# ---- build ---------------------------------------------------------------------------------------
serve=${SERVE_BIN:-$BUILD/examples/serve/kvq_serve}
if [ -n "${SERVE_BIN:-}" ]; then
  log "using $SERVE_BIN (no build)"
else
log "build ($BUILD, CUDA architectures $ARCH)"
timeout 60 cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DKVQ_BUILD_TESTS=OFF -DKVQ_BUILD_EXAMPLES=ON \
  -DCMAKE_CUDA_ARCHITECTURES="$ARCH" "${prefix_args[@]}" > "$OUT/build.log" 2>&1 || { log "configure failed"; tail -20 "$OUT/build.log"; exit 1; }
timeout 330 cmake --build "$BUILD" --target kvq_serve -j "$(nproc)" >> "$OUT/build.log" 2>&1 || { log "build failed"; tail -30 "$OUT/build.log"; exit 1; }
fi
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1)
commit=${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
log "built in $(( $(date +%s) - t_start )) s; GPU: ${gpu:-none}; commit $commit"
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || true

if [ -n "${BUILD_ONLY:-}" ]; then log "BUILD_ONLY: done"; exit 0; fi

# ---- the model -----------------------------------------------------------------------------------
sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
model=${SMOLLM2_GGUF:-}
if [ -z "$model" ]; then
  parts=.device/serve/SmolLM2-135M-Instruct.Q4_1.gguf.part
  [ -s ${parts}-aa ] && [ -s ${parts}-ab ] || { log "no model: set SMOLLM2_GGUF or carry ${parts}-aa and -ab"; exit 2; }
  model=/tmp/serve-bench-model.gguf
  cat ${parts}-aa ${parts}-ab > $model
fi
[ "$(sha256sum "$model" | cut -d' ' -f1)" = "$sha" ] || { log "model $model: SHA-256 mismatch"; exit 2; }
log "model $model"

# ---- greedy agreement: GPU vs CPU backend, same engine --------------------------------------------
[ -n "${SKIP_AGREEMENT:-}" ] || for dev in gpu cpu; do
  KVQ_KV_FORMAT=int4 timeout 90 "$serve" generate --model "$model" --device $dev --max-batch 4 --max-tokens 32 --chat \
    --prompt "What is the capital of France?" --prompt "Write a haiku about the sea." --batched \
    > "$OUT/generate_$dev.jsonl" 2> "$OUT/generate_$dev.err" || log "generate on $dev failed (see generate_$dev.err)"
done
[ -n "${SKIP_AGREEMENT:-}" ] || python3 - "$OUT" <<'PY' | tee -a "$OUT/run.log"
import json, sys
out = sys.argv[1]
try:
    g = [json.loads(l) for l in open(out + "/generate_gpu.jsonl")]
    c = [json.loads(l) for l in open(out + "/generate_cpu.jsonl")]
except Exception as e:
    print("agreement: no result (%s)" % e); sys.exit()
for a, b in zip(g, c):
    n = next((i for i, (x, y) in enumerate(zip(a["token_ids"], b["token_ids"])) if x != y), min(len(a["token_ids"]), len(b["token_ids"])))
    print("agreement int4 greedy, %r: GPU and CPU agree on the first %d of %d tokens\n  gpu: %r\n  cpu: %r"
          % (a["prompt"], n, len(b["token_ids"]), a["text"], b["text"]))
PY

# ---- the load, per format --------------------------------------------------------------------------
for fmt in $FORMATS; do
  log "format $fmt: starting the server"
  KVQ_KV_FORMAT=$fmt "$serve" serve --model "$model" --device gpu --port 0 --max-batch "$MAX_BATCH" --kv-memory-mib "$KV_MIB" \
    --max-concurrent $((CONCURRENCY + 8)) --shutdown-grace 5 ${MAX_SEQ_LEN:+--max-seq-len $MAX_SEQ_LEN} ${BATCH_VARIANT:+--batch-variant} > "$OUT/server_$fmt.out" 2> "$OUT/server_$fmt.err" &
  pid=$!
  url=""
  for _ in $(seq 1 240); do
    url=$(grep -o 'http://127.0.0.1:[0-9]*' "$OUT/server_$fmt.out" 2>/dev/null | head -n1)
    [ -n "$url" ] && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.5
  done
  if [ -z "$url" ]; then
    log "format $fmt: the server did not start"; tail -5 "$OUT/server_$fmt.err"; kill $pid 2>/dev/null; wait $pid 2>/dev/null; continue
  fi
  head -n3 "$OUT/server_$fmt.err" | tee -a "$OUT/run.log"
  timeout $((DURATION + 120)) python3 bench/serve_load.py --url "$url" --format "$fmt" --gpu "${gpu:-unknown}" --commit "$commit" \
    --concurrency "$CONCURRENCY" --requests "$REQUESTS" --duration "$DURATION" --prompt-lens "$PROMPT_LENS" \
    --max-tokens "$MAX_TOKENS" --check --timeout $((DURATION + 90)) --csv "$OUT/serving.csv" \
    --server "max_batch=$MAX_BATCH kv_mib=$KV_MIB budget=8192${MAX_SEQ_LEN:+ max_seq_len=$MAX_SEQ_LEN}${BATCH_VARIANT:+ batch_variant}" 2>&1 | tee -a "$OUT/run.log" || log "format $fmt: load generator failed"
  kill -TERM $pid 2>/dev/null
  timeout 40 tail --pid=$pid -f /dev/null || { log "format $fmt: server did not stop; killing it"; kill -KILL $pid 2>/dev/null; }
  wait $pid 2>/dev/null
  log "format $fmt: server exit status $?; $(tail -n1 "$OUT/server_$fmt.err")"
done
log "done in $(( $(date +%s) - t_start )) s; rows in $OUT/serving.csv"
