#!/usr/bin/env bash
# The CUDA back-end's checks on a GPU machine, from binaries built elsewhere (this
# script builds nothing). Run from the folder holding what scripts/cuda_device_pack.sh
# put there:
#   hearth, backend_parity_test (or bin.tar.gz holding them), cuda_quant_test (optional), make_random_gguf.py,
#   tok.gguf (tokenizer metadata), prompt512.txt, data/qwen35/ (fixtures), lib/ (shared
#   libraries the machine may lack)
# Usage: cuda_device_check.sh [parity] [bench SHAPE...] [profile SHAPE...] [serve SHAPE...] [load SHAPE...]
#        [invariance SHAPE...]
#   (default: parity bench llama3-8b qwen35-9b)
#   bench: hearth run --device cuda, 128 tokens after a 512-token prompt (random-weight
#          GGUF of that shape, generated once into $MODELS_DIR);
#   profile: the same with --tune cuda.op_timing=device (32 tokens): time per op ($PROFILE_MODE=host:
#            the host's time inside each op, nothing synchronised);
#   serve: hearth serve --device cuda, one chat completion through the HTTP API;
#   load: hearth bench against hearth serve --device cuda, 1/16/64 concurrent streams of a
#         512-token prompt + 128 tokens ($LOAD_CONCURRENCY overrides the list);
#   invariance: benchmarks/batch_invariance.py against hearth serve --device cuda (greedy answers
#         alone vs in a batch of 24 with sampled ones).
# $HEARTH_ARGS: more options for every hearth run / serve above (e.g. --deterministic).
# Writes logs to $OUT (or ./out) and prints a summary last.
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
    bench | profile | serve | load | invariance) mode=$s ;;
    *)
      [ -n "$mode" ] || { echo "unknown step $s"; continue; }
      f="$models/$s.gguf"
      [ -f "$f" ] || python3 "$here/make_random_gguf.py" --shape "$s" --tokenizer "$here/tok.gguf" "$f" 2>&1 | tee -a "$out/gen.txt"
      if [ "$mode" = profile ]; then
        "$here/hearth" run -m "$f" --device cuda --raw -f "$here/prompt512.txt" -n "${PROFILE_TOKENS:-32}" --temp 0 \
          --ctx 2048 --tune "cuda.wait_timing=1,cuda.op_timing=${PROFILE_MODE:-device}" ${HEARTH_ARGS:-} >"$out/profile-$s.txt" 2>&1
        say "profile $s (512 prompt + ${PROFILE_TOKENS:-32} tokens, cuda.op_timing=${PROFILE_MODE:-device}): rc=$?"
        grep -E -A14 'op timing|CUDA waits' "$out/profile-$s.txt" | sed 's/^/  /' >>"$summary"
        continue
      fi
      if [ "$mode" = load ]; then
        "$here/hearth" bench --launch "h=$here/hearth serve -m $f --device cuda --max-seqs 64 --kv-cache-bytes 8G ${HEARTH_ARGS:-}" \
          --scenario concurrency --concurrency "${LOAD_CONCURRENCY:-1,16,64}" --reps 1 --max-tokens 128 --lengths 512 \
          --out "$out/load-$s" >"$out/load-$s.txt" 2>&1
        say "load $s (hearth bench, concurrency ${LOAD_CONCURRENCY:-1,16,64}): rc=$?"
        grep -E 'concurrency|aggregate|tok/s|failed' "$out/load-$s.txt" | tail -20 | sed 's/^/  /' >>"$summary"
        grep -A12 -iE '^#+ .*concurrency' "$out/load-$s/report.md" | head -30 | sed 's/^/  /' >>"$summary"
        continue
      fi
      if [ "$mode" = invariance ]; then
        "$here/hearth" serve -m "$f" --device cuda --port 18081 --max-seqs 32 --kv-cache-bytes 4G ${HEARTH_ARGS:-} >"$out/inv-serve-$s.txt" 2>&1 &
        pid=$!
        for _ in $(seq 60); do grep -q listening "$out/inv-serve-$s.txt" && break; sleep 1; done
        python3 "$here/batch_invariance.py" --port 18081 >"$out/invariance-$s.txt" 2>&1
        say "invariance $s: rc=$? $(grep -E 'equal to alone' "$out/invariance-$s.txt" | tr '\n' ' ')"
        kill $pid; wait $pid 2>/dev/null
        continue
      fi
      if [ "$mode" = serve ]; then
        "$here/hearth" serve -m "$f" --device cuda --port 18080 --max-seqs 4 --kv-cache-bytes 1G ${HEARTH_ARGS:-} >"$out/serve-$s.txt" 2>&1 &
        pid=$!
        for _ in $(seq 60); do grep -q listening "$out/serve-$s.txt" && break; sleep 1; done
        resp=$(python3 -c 'import json,urllib.request as u; r=u.urlopen(u.Request("http://127.0.0.1:18080/v1/chat/completions", data=json.dumps({"messages":[{"role":"user","content":"hello there"}],"max_tokens":16,"temperature":0}).encode(), headers={"Content-Type":"application/json"}), timeout=60); d=json.load(r); print(d["usage"], repr(d["choices"][0]["message"]["content"][:60]))' 2>&1)
        say "serve $s --device cuda: $(grep -E 'loaded on|serving' "$out/serve-$s.txt" | tr '\n' ' ') -> $resp"
        kill $pid; wait $pid 2>/dev/null
        continue
      fi
      # Decode speed: 128 tokens after the 512-token prompt, greedy; prefill speed of the prompt
      # (after hearth's warm-up at load). $CUDA_LOADING_MODES: "LAZY" (as a user runs it) and/or
      # "EAGER" (CUDA_MODULE_LOADING=EAGER: every kernel loaded at start-up).
      for load in ${CUDA_LOADING_MODES:-LAZY}; do
        CUDA_MODULE_LOADING=$load "$here/hearth" run -m "$f" --device cuda --raw \
          -f "$here/prompt512.txt" -n 128 --temp 0 --ctx 2048 --tune cuda.wait_timing=1 ${HEARTH_ARGS:-} >"$out/run-$s-$load.txt" 2>&1
        say "run $s --device cuda ($load module loading): rc=$? $(grep -E '^(Prompt|Generation|Peak)|loaded on|warmed up|CUDA waits|CUDA graphs' "$out/run-$s-$load.txt" | tr '\n' ' ')"
      done
      ;;
  esac
done
echo "---- summary"
cat "$summary"
