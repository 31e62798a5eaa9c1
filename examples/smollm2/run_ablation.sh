#!/usr/bin/env bash
# run_ablation.sh BUILD OUT [perplexity|passkey] - the accuracy ablation of docs/ACCURACY.md
# ("Why INT2 loses the needle"): each technique alone and in the combinations that help, on the
# CPU decode path (simulated variants: ablation.hpp; rotation: rotation.hpp). Appends CSV rows
# (with a `variant` column) to OUT/ablation_<what>.csv and logs to OUT/logs/.
set -euo pipefail
build=${1:?usage: run_ablation.sh BUILD OUT [perplexity|passkey]}
out=${2:?usage: run_ablation.sh BUILD OUT [perplexity|passkey]}
what=${3:-perplexity}
here=$(cd "$(dirname "$0")" && pwd)
bin=$build/examples/smollm2/smollm2
model=${SMOLLM2_MODEL:-$("$here/fetch_model.sh")}
text=${SMOLLM2_TEXT:-$("$here/fetch_text.sh" persuasion)}
mkdir -p "$out/logs"

# label | format | flags
variants=(
  "none|none|"
  "int2|int2|"
  "int2_k_only|int2|--ablate-kv k"
  "int2_v_only|int2|--ablate-kv v"
  "int2_layers_0-11|int2|--ablate-layers 0-11"
  "int2_layers_12-29|int2|--ablate-layers 12-"
  "int2_sinks1|int2|--sim-sinks 1"
  "int2_sinks4|int2|--sim-sinks 4"
  "int2_kclip|int2|--sim-k-clip mse"
  "int2_sinks4_kclip|int2|--sim-sinks 4 --sim-k-clip mse"
  "int2_sinks4_kvclip|int2|--sim-sinks 4 --sim-k-clip mse --sim-v-clip mse"
  "int2_vlloyd|int2|--sim-v-levels lloydmax"
  "int2_ktoken|int2|--sim-k-axis token"
  "int2_rot|int2|--rotate on"
  "int2_rot_ktoken|int2|--rotate on --sim-k-axis token"
  "int2_rot_kclip|int2|--rotate on --sim-k-clip mse"
  "int2_rot_vlloyd|int2|--rotate on --sim-v-levels lloydmax"
  "int2_rot_sinks4|int2|--rotate on --sim-sinks 4"
  "int2_rot_sinks16|int2|--rotate on --sim-sinks 16"
  "int2_rot_sinks4_kvclip|int2|--rotate on --sim-sinks 4 --sim-k-clip mse --sim-v-clip mse"
  "int2_rot_sinks4_kclip|int2|--rotate on --sim-sinks 4 --sim-k-clip mse"
  "int2_rot_sinks4_vlloyd|int2|--rotate on --sim-sinks 4 --sim-v-levels lloydmax"
  "int2_rot_sinks4_kclip_vlloyd|int2|--rotate on --sim-sinks 4 --sim-k-clip mse --sim-v-levels lloydmax"
  "none_rot|none|--rotate on"
  "int4|int4|"
  "int4_rot|int4|--rotate on"
  "int4_sinks4|int4|--sim-sinks 4"
  "int4_rot_sinks4|int4|--rotate on --sim-sinks 4"
  "int4_rot_sinks4_kclip|int4|--rotate on --sim-sinks 4 --sim-k-clip mse"
  "k4v2|k4v2|"
  "k4v2_rot|k4v2|--rotate on"
  "k4v2_sinks4|k4v2|--sim-sinks 4"
  "k4v2_rot_sinks4|k4v2|--rotate on --sim-sinks 4"
  "k4v2_rot_sinks4_kclip|k4v2|--rotate on --sim-sinks 4 --sim-k-clip mse"
  "int2_gk16|int2|--gk 16"
  # 3-bit codes for one side (not a kvq format), groups chosen so the total stays within 3.25 bits
  "int2_rot_sinks4_k3g64|int2|--gk 64 --rotate on --sim-sinks 4 --sim-k-bits 3"
  "int2_rot_sinks4_k3_vg64|int2|--gv 64 --rotate on --sim-sinks 4 --sim-k-bits 3"
  "int2_rot_sinks4_v3g64|int2|--gv 64 --rotate on --sim-sinks 4 --sim-v-bits 3"
  "int2_rot_sinks4_k3g64_vg64|int2|--gk 64 --gv 64 --rotate on --sim-sinks 4 --sim-k-bits 3"
  # keys quantized before RoPE (and before the rotation)
  "int2_sinks4_kpre|int2|--sim-sinks 4 --sim-k-rope pre"
  "int2_rot_sinks4_kpre|int2|--rotate on --sim-sinks 4 --sim-k-rope pre"
  "int2_rot_sinks4_kpre_k3g64|int2|--gk 64 --rotate on --sim-sinks 4 --sim-k-rope pre --sim-k-bits 3"
)
only=${ONLY:-}         # comma-separated labels to run (default: all)
threads=${THREADS:-0}  # --threads of each run (0: all cores)
for v in "${variants[@]}"; do
  IFS='|' read -r label format flags <<<"$v"
  if [ -n "$only" ] && ! [[ ",$only," == *",$label,"* ]]; then continue; fi
  # shellcheck disable=SC2086
  case $what in
    perplexity)
      log=$out/logs/perplexity_$label.log
      "$bin" --model "$model" --format "$format" $flags --threads "$threads" --csv "$out/ablation_perplexity.csv" \
        perplexity --text "$text" --window 4096 --windows 4 >"$log" 2>&1 ;;
    passkey)
      log=$out/logs/passkey_$label.log
      "$bin" --model "$model" --format "$format" $flags --threads "$threads" --csv "$out/ablation_passkey.csv" \
        passkey --lengths ${LENGTHS:-1024,4096} --depths ${DEPTHS:-0.1,0.5,0.9} --trials ${TRIALS:-4} \
        --seed ${SEED:-3} >"$log" 2>&1 ;;
    *) echo "run_ablation.sh: unknown evaluation '$what'" >&2; exit 2 ;;
  esac
  echo "$label: $(tail -n1 "$log")"
done
