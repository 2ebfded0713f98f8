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
hearth_log "main job: hearth run on the default model with a sample prompt"
./build/hearth run -m models/default.gguf -p "What is the capital of France?" -n 64
