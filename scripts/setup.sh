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

hearth_log "main job: the default model and a sample prompt"
./build/hearth inspect models/default.gguf
prompt='{"messages": [{"role": "user", "content": "What is the capital of France?"}], "add_generation_prompt": true}'
printf '%s' "$prompt" > build/sample-conversation.json
./build/hearth template -m models/default.gguf --input build/sample-conversation.json > build/sample-prompt.txt
hearth_log "chat-templated prompt:"
cat build/sample-prompt.txt
hearth_log "its token ids:"
./build/hearth tokenize -m models/default.gguf --file build/sample-prompt.txt
