#!/usr/bin/env bash
# Issue 42: the engine's own decode step (bench_step --batch 64,128) against 64 and 128 streams
# through `hearth serve` (hearth bench --scenario concurrency), with the server's account of each
# group's steps (forward vs host ms per step, the decode steps' rate, the group's wall time split
# into decode steps / prompt steps / no step: docs/bench/serve-host.md). Alternates, repetition
# by repetition: bench_step, serve with rows finished on the engine thread
# (--tune engine.parallel_finish=off, the old path), serve with them finished on the sampling
# threads (=on; the default on a GPU).
# Usage: scripts/serve_host_check.sh BUILD_DIR MODEL [cpu|cuda] [REPS]
#   e.g. scripts/serve_host_check.sh build-cuda /models/9b.gguf cuda 3
# Environment: THREADS (--threads of both), CONCURRENCY (64,128), MAX_SEQS (128), MAX_TOKENS (128),
# LENGTH (100: prompt tokens), BENCH_PROMPT (200: bench_step's context, about the streams' mean one:
# a chat prompt of LENGTH tokens is ~140 with the template, plus half of MAX_TOKENS), PORT (18470),
# OUT (serve-host-HHMMSS), SERVE_ARGS (more serve options).
set -euo pipefail
build=${1:?usage: serve_host_check.sh BUILD_DIR MODEL [cpu|cuda] [REPS]}
model=${2:?usage: serve_host_check.sh BUILD_DIR MODEL [cpu|cuda] [REPS]}
device=${3:-cpu}
reps=${4:-3}
conc=${CONCURRENCY:-64,128}
max_seqs=${MAX_SEQS:-128}
max_tokens=${MAX_TOKENS:-128}
length=${LENGTH:-100}
port=${PORT:-18470}
out=${OUT:-serve-host-$(date +%H%M%S)}
threads=()
if [ -n "${THREADS:-}" ]; then threads=(--threads "$THREADS"); fi
build=$(cd "$build" && pwd)
mkdir -p "$out"
load() { cut -d' ' -f1-3 /proc/loadavg; }
for r in $(seq 1 "$reps"); do
  echo "== rep $r: bench_step --batch $conc --prompt ${BENCH_PROMPT:-200} (load $(load))"
  "$build/bench_step" "$model" --device "$device" --batch "$conc" --reps 3 --prompt "${BENCH_PROMPT:-200}" \
    "${threads[@]}" 2>&1 | grep -E '^ *batch|^backend'
  for v in off on; do
    tune="--tune engine.parallel_finish=$v"
    echo "== rep $r: serve, engine.parallel_finish=$v (load $(load))"
    "$build/hearth" bench \
      --launch "h=$build/hearth serve -m $model --device $device --max-seqs $max_seqs --port $port ${threads[*]} $tune ${SERVE_ARGS:-}" \
      --scenario concurrency --concurrency "$conc" --reps 1 --max-tokens "$max_tokens" --lengths "$length" \
      --out "$out/$v-$r" 2>&1 | grep -E '^h '
  done
done
echo "reports: $out/*/report.md"
