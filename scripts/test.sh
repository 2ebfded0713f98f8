#!/usr/bin/env bash
# Quick-start command 2: build and run every test.
#   1. unit tests (GoogleTest, via ctest) on the release build
#   2. end-to-end tests (pytest) that run the real hearth binary on real files
#   3. the unit tests again under AddressSanitizer + UndefinedBehaviorSanitizer
#   4. short libFuzzer runs (GGUF reader, chat templates, tokenizers) over the kept corpora
#   5. the ARM64 cross build (Debian's aarch64 cross compiler; kernel, quantization and model
#      tests, not the HTTP suite) run under qemu-aarch64: all of them on an emulated CPU with
#      the dot-product and i8mm extensions (-cpu max), then the NEON kernel and fast-path
#      tests again on one without them (cortex-a53), so both dispatch paths run (the
#      float kernels' NEON table, kernel_table.h, needs no extension: both CPUs run it)
#   6. with HEARTH_TEST_CUDA=1 and the CUDA toolkit (nvcc): the CUDA back-end and its GPU tests
#      compiled for one architecture (sm_90a) and run (they skip without a GPU; on a GPU machine
#      scripts/cuda_device_check.sh runs them). Off by default until CI's time allows it.
# HEARTH_TEST_QUICK=1 skips 3 to 6; HEARTH_TEST_ARM=0 skips 5.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

hearth_install_deps test
export HEARTH_DEFAULT_MODEL=$(hearth_default_model)
export HEARTH_BIN=$PWD/build/hearth

hearth_build release
hearth_log "unit tests"
ctest --test-dir build --output-on-failure -j2
hearth_log "reference agreement (from the unit tests' output)"
grep -hE "matched: ([a-z0-9]+ )?[0-9]+ / [0-9]+|identical: [0-9]+ / [0-9]+|^f16 KV cache: |^hybrid [a-z]+ vs transformers" build/Testing/Temporary/LastTest.log | sort -u

hearth_log "end-to-end tests"
"$HEARTH_PY" -m pytest -q tests/e2e

if [ "${HEARTH_TEST_QUICK:-0}" != "1" ]; then
  hearth_build asan
  hearth_log "unit tests under ASan+UBSan"
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan --output-on-failure -j2 -L unit

  hearth_build fuzz fuzz_gguf fuzz_template fuzz_tokenizer fuzz_request fuzz_hf fuzz_image
  scratch=$(mktemp -d)
  trap 'rm -rf "$scratch"' EXIT
  # Each fuzzer: new inputs and crash files go to a scratch folder, the kept corpus is read only.
  # UBSan halts on the first report so that undefined behaviour fails the run like a crash.
  # A fixed seed keeps CI repeatable; HEARTH_FUZZ_SEED=0 (random) for longer hunts by hand.
  for part in gguf template tokenizer request hf image; do
    hearth_log "fuzzing $part (${HEARTH_FUZZ_SECONDS:-20}s)"
    mkdir -p "$scratch/$part"
    if ! UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ./build-fuzz/tests/fuzz/fuzz_$part \
        -max_total_time="${HEARTH_FUZZ_SECONDS:-20}" -seed="${HEARTH_FUZZ_SEED:-1}" -rss_limit_mb=2048 -timeout=10 \
        -artifact_prefix="$scratch/$part/" "$scratch/$part" "tests/fuzz/corpus/$part" >"$scratch/$part.log" 2>&1; then
      tail -n 40 "$scratch/$part.log" >&2
      hearth_log "fuzz_$part found a bug; its input is in the log above"
      exit 1
    fi
    tail -n 2 "$scratch/$part.log"
  done

  if [ "${HEARTH_TEST_ARM:-1}" != "0" ]; then
    hearth_build arm64-cross
    hearth_log "ARM64 unit tests under qemu-aarch64 -cpu max (NEON with dotprod, i8mm)"
    QEMU_CPU=max ctest --test-dir build-arm64 --output-on-failure -j2 -L arm
    grep -hE "identical: [0-9]+ / [0-9]+" build-arm64/Testing/Temporary/LastTest.log | sort -u
    hearth_log "ARM64 NEON kernels under qemu-aarch64 -cpu cortex-a53 (no dotprod: the plain NEON path)"
    QEMU_CPU=cortex-a53 ctest --test-dir build-arm64 --output-on-failure -j2 -L arm \
      -R "QuantDotNeon|QuantDot[.]|Packed[.]|FastPathMatchesReferenceKernels|CpuBackendOps|KernelTable"
    grep -hE "identical: [0-9]+ / [0-9]+" build-arm64/Testing/Temporary/LastTest.log | sort -u
  fi

  if [ "${HEARTH_TEST_CUDA:-0}" = "1" ] && { command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; }; then
    export PATH="$PATH:/usr/local/cuda/bin"
    if [ ! -f build-cuda/build.ninja ]; then
      hearth_log "configuring build-cuda (one architecture: sm_90a)"
      cmake --preset cuda -DCMAKE_CUDA_ARCHITECTURES=90a-real >/dev/null
    fi
    hearth_log "building build-cuda (the CUDA back-end and its GPU tests)"
    cmake --build build-cuda --target backend_parity_test cuda_quant_test
    hearth_log "GPU tests (skip without a GPU)"
    ctest --test-dir build-cuda --output-on-failure -L cuda
  else
    hearth_log "CUDA stage skipped (HEARTH_TEST_CUDA=1 and nvcc compile the CUDA back-end and its tests)"
  fi
fi
hearth_log "all tests passed"
