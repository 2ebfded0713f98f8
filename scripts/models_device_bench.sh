#!/usr/bin/env bash
# Model switching on a GPU machine (issue 38): two random-weight GGUFs of Qwen3.5-9B's
# published shape (Q4_K / Q6_K, about 5.5 GB each) in one folder, served by a server that
# keeps one loaded at a time; benchmarks/bench_switch.py alternates requests between them
# and times each first token (unload + load + prefill + one token). Hearth: `hearth serve
# --models-dir DIR --max-loaded 1 --device cuda`; llama.cpp: `llama-server --models-dir DIR
# --models-max 1 -ngl 99` (router mode; its binary from scripts/vision_device_bench.sh's
# peer-build step). Run from the repository root with .dev/ packed as for that script.
# Steps (arguments): make | hearth | peer | memory (default: all but memory). memory: hearth with a
# --max-device-memory budget that fits one of the two models, its device memory by nvidia-smi
# (benchmarks/device_memory_check.py). Logs and a summary under $OUT.
set -u
root=$(pwd)
out=${OUT:-$root/out}
work=/tmp/models-bench
mkdir -p "$out" "$work/models"
summary="$out/models_summary.txt"
say() { echo "$*" | tee -a "$summary"; }
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(make hearth peer)
dev=$root/.dev
[ -x "$dev/hearth" ] || tar -C "$dev" -xJf "$dev/bin.tar.xz"
export LD_LIBRARY_PATH="$dev/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
hearth=$dev/hearth
peer_bin=/tmp/vision-bench/peer/llama.cpp/build/bin

serve_and_time() {  # NAME PORT COMMAND...
  local name=$1 port=$2
  shift 2
  "$@" >"$out/switch_${name}_server.txt" 2>&1 &
  local pid=$!
  python3 "$root/benchmarks/bench_switch.py" "http://127.0.0.1:$port" qwen35-9b-a qwen35-9b-b --rounds 3 \
    >"$out/switch_${name}.json" 2>"$out/switch_${name}_client.txt"
  say "$name: rc=$? $(cat "$out/switch_${name}.json") $(tail -2 "$out/switch_${name}_client.txt" | tr '\n' ' ')"
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
  kill -KILL "$pid" 2>/dev/null
  pkill -x llama-server 2>/dev/null  # the router's children
  sleep 2
}

for s in "${steps[@]}"; do
  case $s in
    make)
      for m in a b; do
        seed=1; [ $m = b ] && seed=2
        python3 "$root/benchmarks/make_random_gguf.py" --shape qwen35-9b --seed $seed --tokenizer "$dev/tok.gguf" \
          "$work/models/qwen35-9b-$m.gguf" >"$out/make_$m.txt" 2>&1
      done
      say "made: $(ls -la "$work/models" | awk 'NR>1 {print $5, $9}' | tr '\n' ' ')"
      ;;
    hearth)
      serve_and_time hearth 18095 "$hearth" serve --models-dir "$work/models" --max-loaded 1 --device cuda --port 18095
      ;;
    memory)
      "$hearth" serve --models-dir "$work/models" --max-device-memory 12G --kv-cache-bytes 1G --device cuda \
        --port 18097 >"$out/memory_server.txt" 2>&1 &
      pid=$!
      python3 "$root/benchmarks/device_memory_check.py" http://127.0.0.1:18097 "$pid" qwen35-9b-a qwen35-9b-b \
        >"$out/memory.json" 2>"$out/memory_client.txt"
      say "memory: rc=$? $(cat "$out/memory.json") $(tail -2 "$out/memory_client.txt" | tr '\n' ' ')"
      kill -TERM "$pid" 2>/dev/null
      wait "$pid"
      say "memory server: exit $? $(grep -E 'unload|budget|loaded in' "$out/memory_server.txt" | tail -4 | tr '\n' ' ')"
      ;;
    peer)
      serve_and_time llama.cpp 18096 "$peer_bin/llama-server" --models-dir "$work/models" --models-max 1 -ngl 99 \
        -c 4096 --port 18096
      ;;
  esac
done
cat "$summary"
