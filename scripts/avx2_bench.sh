#!/bin/bash
# Hearth's AVX2 kernels (cpu.isa=avx2) against llama.cpp built with AVX-512 off, on two
# cores, runs alternated (issue 43). Writes the raw output of every run to $OUT (default
# /tmp/avx2_bench) and stops starting new rounds after $BUDGET_S seconds (default 540).
#
#   PEER_TAR=llama.cpp.tar.xz TOK=tok.gguf BENCH_STEP=build/bench_step scripts/avx2_bench.sh
#
# Files: benchmarks/make_random_gguf.py --shape llama3-8b --layers 8, --shape qwen35-35b-a3b
# --layers 4 and --shape smollm2-135m (the default model's shape and type, Q4_1), generated
# here unless MODELS names a folder that holds them (llama3-8b-8.gguf, qwen35-a3b-4.gguf,
# smollm2.gguf). Hearth: bench_step FILE --threads 2 --batch 1 --steps 16 --reps 3 --prompt
# 256 --prefill 512 --tune cpu.isa=avx2; llama.cpp: llama-bench -t 2 -p 512 -n 0 -r 3 and
# -p 0 -n 32 -d 256 -r 3. Both pinned to the same two cores of different physical cores.
set -u
OUT=${OUT:-/tmp/avx2_bench}
BUDGET_S=${BUDGET_S:-540}
PEER_TAR=${PEER_TAR:-build-peer/llama.cpp.tar.xz}
TOK=${TOK:-build-peer/tok.gguf}
BENCH_STEP=${BENCH_STEP:-build/bench_step}
PY=${PY:-python3}
mkdir -p "$OUT"
start=$(date +%s)
lscpu | grep -E "Model name|Thread|^CPU\(s\)|L2|L3" > "$OUT/machine.txt"
grep -o 'avx512[a-z_]*' /proc/cpuinfo | sort -u | tr '\n' ' ' >> "$OUT/machine.txt"
CPUS=${CPUS:-$(lscpu -p=CPU,CORE | grep -v '^#' | sort -t, -k2,2n -u | head -2 | cut -d, -f1 | paste -sd,)}
echo "cpus $CPUS" >> "$OUT/machine.txt"

PEER=${PEER:-}
if [ -z "$PEER" ]; then
  mkdir -p /tmp/peer
  tar xJf "$PEER_TAR" -C /tmp/peer
  (cmake -S /tmp/peer/llama.cpp -B /tmp/peer/b -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DGGML_AVX=ON \
     -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF \
     -DGGML_CUDA=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF && ninja -C /tmp/peer/b llama-bench) > "$OUT/peer_build.log" 2>&1 &
  PEER=/tmp/peer/b/bin/llama-bench
fi
MODELS=${MODELS:-}
if [ -z "$MODELS" ]; then
  MODELS=/tmp/avx2_models
  mkdir -p "$MODELS"
  $PY benchmarks/make_random_gguf.py --shape llama3-8b --layers 8 --tokenizer "$TOK" "$MODELS/llama3-8b-8.gguf" &
  $PY benchmarks/make_random_gguf.py --shape qwen35-35b-a3b --layers 4 --tokenizer "$TOK" "$MODELS/qwen35-a3b-4.gguf" &
  $PY benchmarks/make_random_gguf.py --shape smollm2-135m --tokenizer "$TOK" "$MODELS/smollm2.gguf" &
fi
wait
tail -n 3 "$OUT/peer_build.log" 2>/dev/null
echo "setup done after $(( $(date +%s) - start )) s"

for round in 1 2 3; do
  for f in smollm2 llama3-8b-8 qwen35-a3b-4; do
    [ $(( $(date +%s) - start )) -gt "$BUDGET_S" ] && { echo "budget spent before round $round $f"; exit 0; }
    m="$MODELS/$f.gguf"
    echo "== round $round $f hearth $(date +%T)" | tee -a "$OUT/runs.txt"
    taskset -c "$CPUS" "$BENCH_STEP" "$m" --threads 2 --batch 1 --steps 16 --reps 3 --prompt 256 --prefill 512 \
      --tune cpu.isa=avx2 2>&1 | grep -E "backend|batch  1:|prefill" | tee -a "$OUT/runs.txt"
    echo "== round $round $f llama.cpp $(date +%T)" | tee -a "$OUT/runs.txt"
    taskset -c "$CPUS" "$PEER" -m "$m" -t 2 -p 512 -n 0 -r 3 -o md 2>&1 | grep -E "pp512|error" | tee -a "$OUT/runs.txt"
    taskset -c "$CPUS" "$PEER" -m "$m" -t 2 -p 0 -n 32 -d 256 -r 3 -o md 2>&1 | grep -E "tg32|error" | tee -a "$OUT/runs.txt"
  done
done
