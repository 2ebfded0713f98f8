#!/usr/bin/env bash
# Quick-start command 2: build and run every test.
#   1. unit tests (GoogleTest, via ctest) on the release build
#   2. end-to-end tests (pytest) that run the real hearth binary on real files
#   3. the unit tests again under AddressSanitizer + UndefinedBehaviorSanitizer
#   4. a short libFuzzer run on the GGUF reader over the kept corpus
# HEARTH_TEST_QUICK=1 skips 3 and 4.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

hearth_install_deps
export HEARTH_DEFAULT_MODEL=$(hearth_default_model)
export HEARTH_BIN=$PWD/build/hearth

hearth_build release
hearth_log "unit tests"
ctest --test-dir build --output-on-failure -j2
hearth_log "reference agreement (from the unit tests' output)"
grep -hE "matched: ([a-z0-9]+ )?[0-9]+ / [0-9]+|identical: [0-9]+ / [0-9]+" build/Testing/Temporary/LastTest.log | sort -u

hearth_log "end-to-end tests"
${PYTHON:-python3} -m pytest -q tests/e2e

if [ "${HEARTH_TEST_QUICK:-0}" != "1" ]; then
  hearth_build asan
  hearth_log "unit tests under ASan+UBSan"
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan --output-on-failure -j2 -L unit

  hearth_build fuzz fuzz_gguf
  hearth_log "fuzzing the GGUF reader (${HEARTH_FUZZ_SECONDS:-30}s)"
  scratch=$(mktemp -d)
  trap 'rm -rf "$scratch"' EXIT
  ./build-fuzz/tests/fuzz/fuzz_gguf -max_total_time="${HEARTH_FUZZ_SECONDS:-30}" -rss_limit_mb=2048 \
    -artifact_prefix="$scratch/" "$scratch" tests/fuzz/corpus/gguf 2>&1 | tail -n 3
fi
hearth_log "all tests passed"
