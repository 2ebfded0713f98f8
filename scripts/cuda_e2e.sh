#!/usr/bin/env bash
# The end-to-end API tests (tests/e2e: OpenAI and Anthropic endpoints, tools, structured
# output, faults, hostile input) against `hearth serve` on a GPU machine: every server the
# tests start takes the GPU by default (the tests that need the CPU's pace pin --device cpu).
# Usage: scripts/cuda_e2e.sh HEARTH_BINARY DEFAULT_MODEL [deterministic]
#   deterministic: every server and the `run` reference get --deterministic (greedy results
#   batch-invariant; without it the tests that compare a request alone and in a batch differ
#   at near-ties, as the default GPU mode allows).
# Needs python3 with pytest, openai, anthropic, requests, jsonschema, numpy (PYTHONPATH may
# name a folder holding them) and the shared test data ($HEARTH_SHARED_DIR, default ../shared).
set -u
repo=$(cd "$(dirname "$0")/.." && pwd)
bin=$1 model=$2 mode=${3:-default}
extra=""
[ "$mode" = deterministic ] && extra="--deterministic"
cd "$repo"
HEARTH_BIN=$bin HEARTH_DEFAULT_MODEL=$model HEARTH_E2E_SERVE_ARGS="$extra" HEARTH_E2E_RUN_ARGS="$extra" \
  python3 -m pytest -q -p no:cacheprovider tests/e2e/test_serve.py tests/e2e/test_anthropic.py \
  tests/e2e/test_structured.py tests/e2e/test_faults.py tests/e2e/test_tools.py tests/e2e/test_hostile.py
