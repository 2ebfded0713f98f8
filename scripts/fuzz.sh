#!/usr/bin/env bash
# Longer fuzzing by hand (not part of test.sh): scripts/fuzz.sh TARGET SECONDS [JOBS]
# TARGET: gguf, template, tokenizer, request, hf or image. Builds build-fuzz/ (clang), runs
# fuzz_TARGET for SECONDS with JOBS parallel processes (default 1) on a scratch corpus
# seeded from tests/fuzz/corpus/TARGET, and prints the CPU time spent and any crash.
# A crash file it reports belongs in tests/fuzz/corpus/TARGET as regress-NAME, with a unit
# test, and a line in docs/FUZZING.md; record the hours there too.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
target=${1:?usage: scripts/fuzz.sh TARGET SECONDS [JOBS]}
seconds=${2:?usage: scripts/fuzz.sh TARGET SECONDS [JOBS]}
jobs=${3:-1}
hearth_build fuzz "fuzz_$target"
scratch=${HEARTH_FUZZ_SCRATCH:-$(mktemp -d)}
mkdir -p "$scratch/corpus" "$scratch/artifacts"
hearth_log "fuzz_$target: ${seconds}s x $jobs job(s); scratch $scratch"
start=$(date +%s)
set +e
root=$PWD
# With -jobs, libFuzzer writes fuzz-N.log into the current folder: run from the scratch one.
# The CPU time actually spent (user + system of the fuzzer processes), not wall time x jobs:
# on a shared machine a fuzzer may get a fraction of a core.
TIMEFORMAT='%U %S'
{ time (cd "$scratch" && UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 "$root/build-fuzz/tests/fuzz/fuzz_$target" \
  -max_total_time="$seconds" -jobs="$jobs" -workers="$jobs" -rss_limit_mb=2048 -timeout=10 \
  -print_final_stats=1 -artifact_prefix="$scratch/artifacts/" "$scratch/corpus" "$root/tests/fuzz/corpus/$target" \
  >"$scratch/fuzz.log" 2>&1) ; } 2>"$scratch/cpu-time.txt"
rc=$?
set -e
took=$(( $(date +%s) - start ))
cpu=$(awk '{printf "%d", $1 + $2}' "$scratch/cpu-time.txt")
hearth_log "fuzz_$target ran ${took}s of wall time, ${cpu} CPU-seconds (exit $rc)"
if ls "$scratch"/artifacts/* >/dev/null 2>&1; then
  hearth_log "findings:"; ls -l "$scratch"/artifacts/
  exit 1
fi
