#!/usr/bin/env bash
# The CPU back-end on a many-core machine (issue 17): decode steps (one and four
# sequences after a 754-token prompt) and prompt processing (512 tokens) of random-weight
# GGUFs of published shapes, timed by benchmarks/bench_step; and the same files by
# llama.cpp's llama-bench when $LLAMA_BENCH names one (a native build made by whoever
# runs this; nothing of it is part of Hearth).
# Run from a folder holding bench_step, make_random_gguf.py and tok.gguf (tokenizer metadata).
# Usage: cpu_device_check.sh SHAPE...   ($THREADS: default all cores; $REPS: 3; $MODELS_DIR; $OUT)
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$here/out}
models=${MODELS_DIR:-/tmp/hearth-models}
threads=${THREADS:-$(nproc)}
mkdir -p "$out" "$models"
summary="$out/cpu-summary.txt"
say() { echo "$*" | tee -a "$summary"; }
say "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2) x $(nproc); threads $threads"
for s in "$@"; do
  f="$models/$s.gguf"
  [ -f "$f" ] || python3 "$here/make_random_gguf.py" --shape "$s" --tokenizer "$here/tok.gguf" "$f" >>"$out/gen.txt" 2>&1
  # Freshly written files are still being flushed to disk: that write-back disturbed a run
  # (decode steps of 36-280 ms). Wait for it before timing anything.
  sync
  "$here/bench_step" "$f" --threads "$threads" --batch 1,4 --prompt 754 --steps 32 --reps "${REPS:-3}" --prefill 512 \
    >"$out/bench_step-$s.txt" 2>&1
  say "hearth $s (bench_step, rc=$?):"
  grep -E '^(batch|prefill|  +first)' "$out/bench_step-$s.txt" | sed 's/^/  /' | tee -a "$summary"
  if [ -n "${LLAMA_BENCH:-}" ]; then
    "$LLAMA_BENCH" -m "$f" -t "$threads" -p 512 -n 0 -r "${REPS:-3}" >"$out/llama-bench-$s.txt" 2>&1
    "$LLAMA_BENCH" -m "$f" -t "$threads" -p 0 -n 32 -d 754 -r "${REPS:-3}" >>"$out/llama-bench-$s.txt" 2>&1
    say "llama.cpp $s (llama-bench):"
    grep -E '\| +(pp|tg)[0-9]' "$out/llama-bench-$s.txt" | sed 's/^/  /' | tee -a "$summary"
  fi
done
