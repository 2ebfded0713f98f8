#!/usr/bin/env bash
# Quick-start command 1: install everything, build, fetch the default model, run the main job.
# Idempotent: a second run only rebuilds what changed.
# HEARTH_SETUP_CHECK=1: instead of serving until Ctrl-C, start the server, wait for /health,
# ask it one chat completion, check the answer and stop it (what CI runs on a clean clone).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

hearth_install_deps
# With the CUDA toolkit (nvcc) and an NVIDIA GPU visible (nvidia-smi lists one), the GPU build
# (build-cuda/, for this GPU's architecture; HEARTH_CUDA_ARCH overrides, e.g. "80;90a"); it runs on
# the CPU too. HEARTH_DEVICE=cpu keeps the CPU-only build.
bin=./build/hearth
nvcc_bin=$(command -v nvcc || { [ -x /usr/local/cuda/bin/nvcc ] && echo /usr/local/cuda/bin/nvcc; } || true)
if [ "${HEARTH_DEVICE:-auto}" != "cpu" ] && [ -n "$nvcc_bin" ] && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  hearth_log "CUDA toolkit ($nvcc_bin) and a GPU found: the CUDA build"
  export PATH="$PATH:$(dirname "$nvcc_bin")"
  export LD_LIBRARY_PATH="$(dirname "$nvcc_bin")/../lib64:${LD_LIBRARY_PATH:-}"
  if { [ -f build-cuda/build.ninja ] ||
       { hearth_log "configuring build-cuda (CUDA architectures: ${HEARTH_CUDA_ARCH:-native})" &&
         cmake --preset cuda -DCMAKE_CUDA_ARCHITECTURES="${HEARTH_CUDA_ARCH:-native}" >/dev/null; }; } &&
     hearth_log "building build-cuda hearth" && cmake --build build-cuda --target hearth &&
     ./build-cuda/hearth info >/dev/null 2>&1; then
    bin=./build-cuda/hearth
  else
    hearth_log "the CUDA build failed or does not start here (output above); using the CPU build"
  fi
fi
if [ "$bin" = ./build/hearth ]; then
  hearth_build release hearth
fi

hearth_log "the default model"
$bin inspect models/default.gguf
hearth_log "hearth run on the default model with a sample prompt"
$bin run -m models/default.gguf -p "Write a Python function that checks whether a number is prime." -n 96

port=${HEARTH_PORT:-8080}
if [ "${HEARTH_SETUP_CHECK:-0}" = "1" ]; then
  hearth_log "checking hearth serve: start, /health, one chat completion, stop"
  log=$(mktemp)
  $bin serve -m models/default.gguf --port "$port" >"$log" 2>&1 &
  pid=$!
  trap 'kill "$pid" 2>/dev/null || true; rm -f "$log"' EXIT
  for _ in $(seq 1 120); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
    kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; hearth_log "hearth serve exited before /health answered"; exit 1; }
    sleep 0.5
  done
  curl -sf "http://127.0.0.1:$port/health" >/dev/null || { cat "$log" >&2; hearth_log "/health never answered"; exit 1; }
  "$HEARTH_PY" - "$port" <<'PY'
import sys
from openai import OpenAI
client = OpenAI(base_url=f"http://127.0.0.1:{sys.argv[1]}/v1", api_key="none")
r = client.chat.completions.create(model="default", max_tokens=96, temperature=0,
    messages=[{"role": "user", "content": "Write a Python function that checks whether a number is prime."}])
text = r.choices[0].message.content
print(text)
assert r.choices[0].finish_reason in ("stop", "length") and "def " in text, "unexpected answer"
print(f"setup check passed: {r.usage.completion_tokens} tokens answered")
PY
  exit 0
fi

hearth_log "main job: hearth serve on the default model at http://127.0.0.1:$port (Ctrl-C stops it)"
cat >&2 <<EOT
Try it from another terminal:

curl -s http://127.0.0.1:$port/v1/chat/completions -H 'Content-Type: application/json' \\
  -d '{"messages": [{"role": "user", "content": "Write a Python function that checks whether a number is prime."}], "max_tokens": 96}'

.venv/bin/python - <<'PY'
from openai import OpenAI
client = OpenAI(base_url="http://127.0.0.1:$port/v1", api_key="none")
stream = client.chat.completions.create(model="SmolLM2-135M-Instruct.Q4_1", stream=True, max_tokens=200,
    messages=[{"role": "user", "content": "Write a short story about a cat who learns to fly."}])
for chunk in stream:
    if chunk.choices:
        print(chunk.choices[0].delta.content or "", end="", flush=True)
print()
PY

EOT
exec $bin serve -m models/default.gguf --port "$port"
