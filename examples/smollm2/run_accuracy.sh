#!/usr/bin/env bash
# run_accuracy.sh - the full accuracy evaluation of docs/ACCURACY.md: perplexity, passkey retrieval
# and greedy-generation agreement for none / int8 / int4 / int2 / k4v2 (Gk = Gv = 32, R = 128,
# P = 64) and int2 with R = 0, on the CPU (default) or the GPU. Runs JOBS processes at a time
# (default 2, THREADS threads each, default 1). Logs go to OUT/logs, CSV rows to OUT/accuracy.csv
# (bench/results/accuracy.csv's columns).
#   usage: run_accuracy.sh BUILD_DIR OUT_DIR [perplexity|passkey|generate|passkey_gpu ...]
# Environment: DEVICE cpu|gpu (--device), MODEL and TEXT (paths of the GGUF file and the text, for
# a machine without network: fetch_model.sh / fetch_text.sh otherwise), PASSKEY_TRIALS (trials per
# cell of passkey_gpu, default 10), TIMEOUT (seconds per process, default none).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$1/examples/smollm2/smollm2
out=$2
shift 2
evals=${*:-perplexity generate passkey}
jobs=${JOBS:-2}
device=${DEVICE:-cpu}
threads=${THREADS:-1}
limit=${TIMEOUT:-0}
model=${MODEL:-$("$here/fetch_model.sh")}
text=${TEXT:-$("$here/fetch_text.sh" persuasion)}
mkdir -p "$out/logs" "$out/csv"

configs=(
  "none --format none"
  "int8 --format int8"
  "int4 --format int4 --gk 32 --gv 32"
  "int2 --format int2 --gk 32 --gv 32"
  "k4v2 --format k4v2 --gk 32 --gv 32"
  "int2_r0 --format int2 --gk 32 --gv 32 --residual 0"
)
# What each evaluation runs (the sizes fit about an hour on two cores; see docs/ACCURACY.md).
declare -A args=(
  [perplexity]="perplexity --text $text --window 4096 --windows 4 --chunk 256 --batch 1"
  [generate]="generate --passage $text --max-new 128"
  [passkey]="passkey --lengths 1024,2048,4096 --depths 0.1,0.5,0.9 --trials 4"
  [passkey8k]="passkey --lengths 8192 --depths 0.1,0.5,0.9 --trials 1"
  # The GPU run's passkey: every length up to the trained context, more trials per cell.
  [passkey_gpu]="passkey --lengths 1024,2048,4096,8192 --depths 0.1,0.5,0.9 --trials ${PASSKEY_TRIALS:-10} --seed 3"
)

list=()
for e in $evals; do
  names=$e
  [ "$e" = passkey ] && names="passkey passkey8k"
  for n in $names; do
    for c in "${configs[@]}"; do list+=("$n ${c}"); done
  done
done

export bin model out device threads limit
for k in "${!args[@]}"; do export "args_$k=${args[$k]}"; done

printf '%s\n' "${list[@]}" | xargs -P "$jobs" -I{} bash -c '
  set -- {}
  name=$1; label=$2; shift 2
  var=args_$name
  start=$SECONDS
  timeout "$limit" "$bin" --model "$model" --device "$device" --threads "$threads" "$@" --csv "$out/csv/${name}_${label}.csv" ${!var} > "$out/logs/${name}_${label}.log" 2>&1 ||
    echo "FAILED: $name $label" >> "$out/logs/times.txt"
  echo "$name $label: $((SECONDS - start)) s" >> "$out/logs/times.txt"'

# One CSV, in a fixed order.
echo "model,format,gk,gv,residual,metric,context,value,n" > "$out/accuracy.csv"
for n in perplexity passkey passkey8k passkey_gpu generate; do
  for c in "${configs[@]}"; do
    f=$out/csv/${n}_${c%% *}.csv
    [ -f "$f" ] && tail -n +2 "$f" >> "$out/accuracy.csv"
  done
done
echo "wrote $out/accuracy.csv"
