#!/usr/bin/env bash
# The step-description checks of issue 42 ("the shape") on a GPU machine, from binaries
# built elsewhere (this script builds nothing). Run from the folder that
# scripts/cuda_device_pack.sh filled (backend_parity_test or bin.tar.gz holding it,
# src/tests/data/qwen35/ with the hybrid fixtures, lib/).
#   Usage: shape_device_check.sh        (writes $OUT, default ./out; summary printed last)
# What proves success (summary.txt):
#   - every filter below ends "[  PASSED  ] N tests." with no "[  FAILED  ]" or "[  SKIPPED ]"
#     line (N: ops 1, steps 5, hybrid 4), and the last line reads "shape_device_check: ALL PASSED";
#   - "step description qwen35 dense fixture: ... worst replayed step staged 0 arrays
#     through the ring" (the hybrid model's Gated DeltaNet layers read their sequences'
#     state slots from the step arena: 0 arrays per replayed step, like llama and qwen3moe);
#   - "same-shape steps over other sequences <model>: N of 24 steps replayed" with N >= 18
#     for llama, qwen3moe and the qwen35 dense fixture (replays over other positions, KV
#     slots, block tables and state slots, and other output rows, gave the eager logits bit
#     for bit);
#   - "graphs ... replayed" / "batched graphs ..." lines as before (DecodeStepsAsGraphs: the
#     host-routed qwen35 moe fixture 0 replayed), and "vision rope graph steps: ... replayed"
#     at least 1 (a described step's pos3 read from its arena).
# If "steps" fails with a build of the branch head but passes with one of the commit
# before "CUDA graphs keyed by the step" (per-op signatures), the keying misses something
# a step's launches depend on: the failing test names the model and step.
set -u
here=$(cd "$(dirname "$0")" && pwd)
for a in "$here"/bin.tar.gz "$here"/bin.tar.xz; do
  if [ -f "$a" ]; then tar -C "$here" -xf "$a"; fi
done
out=${OUT:-$here/out}
mkdir -p "$out"
cublas_dir=$(python3 -c 'import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], "lib"))' 2>/dev/null)
export LD_LIBRARY_PATH="$here/lib:/usr/local/cuda/lib64:${cublas_dir}:${LD_LIBRARY_PATH:-}"
export HEARTH_SOURCE_DIR="$here/src"
summary="$out/summary.txt"
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | sed 's/^/gpu: /' | tee -a "$summary"

# name:filter. ops: the Gated DeltaNet ops with sequences in state slots unlike their order;
# steps: the replay tests (stage counts, fresh data over other sequences, graphs vs eager);
# hybrid: the Qwen3.5 fixtures against transformers and the CPU, and the q8_0 KV runs.
runs=(
  "ops:CudaParity.GatedDeltaNet*"
  "steps:CudaParity.ReplayedDecodeStepsStageNothingPerOp:CudaParity.SameShapeStepsOverOtherSequencesReplayFreshData:CudaParity.DecodeStepsAsGraphs:CudaParity.BatchedDecodeStepsAsGraphs:CudaParity.VisionRopeMultiInGraphSteps"
  "hybrid:Qwen35/HybridFixture.*:CudaParity.KvQ8OnCuda"
)
fail=0
for r in "${runs[@]}"; do
  name=${r%%:*}
  filter=${r#*:}
  "$here/backend_parity_test" --gtest_filter="$filter" >"$out/shape-$name.txt" 2>&1
  rc=$?
  [ $rc -eq 0 ] || fail=1
  # A skipped test (no GPU found) proves nothing.
  if grep -q '^\[  SKIPPED \]' "$out/shape-$name.txt"; then fail=1; fi
  say "$name ($filter): rc=$rc; $(grep -E '^\[  PASSED  \]|^\[  (FAILED|SKIPPED) \] [0-9]+ test' "$out/shape-$name.txt" | tr '\n' ' ')"
  grep -E '^(step description|same-shape steps|graphs|batched graphs|vision rope graph|gated_delta_net|model|kv q8_0) ' \
    "$out/shape-$name.txt" | sed 's/^/  /' | tee -a "$summary"
  grep -E '^\[  FAILED  \]|Failure|Expected|Which is' "$out/shape-$name.txt" | head -20 | sed 's/^/  /' | tee -a "$summary"
done
say "shape_device_check: $([ $fail -eq 0 ] && echo ALL PASSED || echo FAILURES, see $out/shape-*.txt)"
exit $fail
