#!/usr/bin/env bash
# Quick-start command 1: install everything, build, fetch the default model, run the main job.
# Idempotent: a second run only rebuilds what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

hearth_install_deps
hearth_build release hearth
model=$(hearth_default_model)
mkdir -p models
ln -sf "$model" models/default.gguf

hearth_log "the default model"
./build/hearth inspect models/default.gguf
hearth_log "hearth run on the default model with a sample prompt"
./build/hearth run -m models/default.gguf -p "What is the capital of France?" -n 32

port=${HEARTH_PORT:-8080}
hearth_log "main job: hearth serve on the default model at http://127.0.0.1:$port (Ctrl-C stops it)"
cat >&2 <<EOT
Try it from another terminal:

curl -s http://127.0.0.1:$port/v1/chat/completions -H 'Content-Type: application/json' \\
  -d '{"messages": [{"role": "user", "content": "What is the capital of France?"}], "max_tokens": 64}'

python3 - <<'PY'
from openai import OpenAI
client = OpenAI(base_url="http://127.0.0.1:$port/v1", api_key="none")
stream = client.chat.completions.create(model="SmolLM2-135M-Instruct.Q4_1", stream=True, max_tokens=64,
    messages=[{"role": "user", "content": "Write a haiku about a hearth."}])
for chunk in stream:
    if chunk.choices:
        print(chunk.choices[0].delta.content or "", end="", flush=True)
print()
PY

EOT
exec ./build/hearth serve -m models/default.gguf --port "$port"
