#!/usr/bin/env bash
# run_accuracy.sh - the full accuracy evaluation of docs/ACCURACY.md: perplexity, passkey retrieval
# and greedy-generation agreement for none / int8 / int4 / int2 / k4v2 (Gk = Gv = 32, R = 128,
# P = 64) and int2 with R = 0, on the CPU. Runs JOBS processes at a time (default 2, one thread
# each). Logs go to OUT/logs, CSV rows to OUT/accuracy.csv (bench/results/accuracy.csv's columns).
#   usage: run_accuracy.sh BUILD_DIR OUT_DIR [perplexity|passkey|generate ...]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$1/examples/smollm2/smollm2
out=$2
shift 2
evals=${*:-perplexity generate passkey}
jobs=${JOBS:-2}
model=$("$here/fetch_model.sh")
text=$("$here/fetch_text.sh" persuasion)
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
)

list=()
for e in $evals; do
  names=$e
  [ "$e" = passkey ] && names="passkey passkey8k"
  for n in $names; do
    for c in "${configs[@]}"; do list+=("$n ${c}"); done
  done
done

export bin model out
for k in "${!args[@]}"; do export "args_$k=${args[$k]}"; done

printf '%s\n' "${list[@]}" | xargs -P "$jobs" -I{} bash -c '
  set -- {}
  name=$1; label=$2; shift 2
  var=args_$name
  start=$SECONDS
  "$bin" --model "$model" --threads 1 "$@" --csv "$out/csv/${name}_${label}.csv" ${!var} > "$out/logs/${name}_${label}.log" 2>&1 ||
    echo "FAILED: $name $label" >> "$out/logs/times.txt"
  echo "$name $label: $((SECONDS - start)) s" >> "$out/logs/times.txt"'

# One CSV, in a fixed order.
echo "model,format,gk,gv,residual,metric,context,value,n" > "$out/accuracy.csv"
for n in perplexity passkey passkey8k generate; do
  for c in "${configs[@]}"; do
    f=$out/csv/${n}_${c%% *}.csv
    [ -f "$f" ] && tail -n +2 "$f" >> "$out/accuracy.csv"
  done
done
echo "wrote $out/accuracy.csv"
