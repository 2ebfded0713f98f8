#!/usr/bin/env bash
# The CUDA back-end's checks on a GPU machine, from binaries built elsewhere (this
# script builds nothing). Run from the folder holding what scripts/cuda_device_pack.sh
# put there:
#   hearth, backend_parity_test, cuda_quant_test (optional), make_random_gguf.py,
#   tok.gguf (tokenizer metadata), prompt512.txt, data/qwen35/ (fixtures), lib/ (shared
#   libraries the machine may lack)
# Usage: cuda_device_check.sh [parity] [bench SHAPE...]   (default: parity bench llama3-8b qwen35-9b)
# Writes logs to $OUT (or ./out) and prints a summary last.
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$here/out}
mkdir -p "$out"
cublas_dir=$(python3 -c 'import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], "lib"))' 2>/dev/null)
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64:${cublas_dir}:${LD_LIBRARY_PATH:-}"
export HEARTH_SOURCE_DIR="$here/src"
models=${MODELS_DIR:-/tmp/hearth-models}
mkdir -p "$models"
summary="$out/summary.txt"
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }

steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(parity bench llama3-8b qwen35-9b)

nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version,clocks.max.sm --format=csv,noheader | sed 's/^/gpu: /' | tee -a "$summary"
"$here/hearth" info 2>&1 | tee "$out/info.txt" | grep -i cuda | sed 's/^/info: /' | tee -a "$summary"

mode=""
for s in "${steps[@]}"; do
  case "$s" in
    parity)
      if [ -x "$here/cuda_quant_test" ]; then
        (cd "$here" && ./cuda_quant_test >"$out/cuda_quant_test.txt" 2>&1; echo "rc=$?" >>"$out/cuda_quant_test.txt")
        say "cuda_quant_test: $(tail -1 "$out/cuda_quant_test.txt") $(grep -c FAIL "$out/cuda_quant_test.txt") FAIL lines"
      fi
      "$here/backend_parity_test" >"$out/parity.txt" 2>&1
      rc=$?
      say "backend_parity_test: rc=$rc; $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/parity.txt" | tr '\n' ' ')"
      grep -E '^(matmul|attention|gated_delta_net|model) ' "$out/parity.txt" | awk '{print "  " $0}' >>"$summary"
      grep -E '^\[  FAILED  \]' "$out/parity.txt" | head -20 | tee -a "$summary"
      ;;
    bench) mode=bench ;;
    *)
      [ "$mode" = bench ] || { echo "unknown step $s"; continue; }
      f="$models/$s.gguf"
      [ -f "$f" ] || python3 "$here/make_random_gguf.py" --shape "$s" --tokenizer "$here/tok.gguf" "$f" 2>&1 | tee -a "$out/gen.txt"
      # Decode speed: 128 tokens after the 512-token prompt, greedy; prefill speed of the prompt.
      for dev in cuda; do
        "$here/hearth" run -m "$f" --device "$dev" --raw -f "$here/prompt512.txt" -n 128 --temp 0 --ctx 2048 \
          >"$out/run-$s-$dev.txt" 2>&1
        say "run $s --device $dev: rc=$? $(grep -E '^(Prompt|Generation|Peak)|loaded on' "$out/run-$s-$dev.txt" | tr '\n' ' ')"
      done
      ;;
  esac
done
echo "---- summary"
cat "$summary"
