#!/usr/bin/env bash
# Vision on a GPU machine (issue 37): the CUDA parity tests of the vision operations and of
# the tiny Qwen3.5-with-vision fixture, then the time to encode a 1024 x 1024 image with a
# random-weight vision tower of Qwen3.5-9B's published shape (27 blocks of 1152, 16 heads,
# 4304 FFN, 48 x 48 position table, merger to 4096) in Hearth (CUDA, and the CPU on all
# cores) and in llama.cpp (llama-mtmd-cli with the same image, the projector converted by
# llama.cpp's own convert_hf_to_gguf.py --mmproj from the same random folder).
# Run from the repository root on the device machine, with:
#   .dev/bin.tar.xz        hearth + backend_parity_test (scripts/cuda_device_pack.sh, recompressed with xz),
#                          with lib/ (shared libraries the machine lacks) and shared-data/ (Qwen3 tokenizer, template)
#   .dev/src/tests/data    the fixtures
#   .peer/llama.cpp.tar.xz llama.cpp's source (the tree vendored in llama-cpp-python 0.3.36)
# Steps (arguments): parity | prepare | hearth-cuda | hearth-cpu | peer-build | peer-wait | peer | ttft
#   (default: all but ttft, in order; peer-build may run in the background under setsid, peer-wait waits
#   for it; ttft: `hearth bench --scenario image` through hearth serve and llama-server --mmproj)
# Writes logs under $OUT and a summary in $OUT/vision_summary.txt.
set -u
root=$(pwd)
out=${OUT:-$root/out}
work=/tmp/vision-bench
mkdir -p "$out" "$work"
summary="$out/vision_summary.txt"
say() { echo "$*" | tee -a "$summary"; }
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(parity prepare hearth-cuda hearth-cpu peer-build peer)
dev=${HEARTH_DEV_DIR:-$root/.dev}  # HEARTH_DEV_DIR: another packed folder (e.g. a CPU-only build)
[ -x "$dev/hearth" ] || tar -C "$dev" -xJf "$dev/bin.tar.xz"
export LD_LIBRARY_PATH="$dev/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export HEARTH_SOURCE_DIR="$dev/src"
hearth=$dev/hearth
folder=$work/qwen35-9b-vision
question="Describe this picture in detail: the colours, the shapes, the text if there is any, and what kind of scene or diagram it might be. Then say what a person would most likely use such an image for, in two or three sentences, and whether anything in it looks unusual or out of place."

for s in "${steps[@]}"; do
  case $s in
    parity)
      "$dev/backend_parity_test" --gtest_filter='*Vision*:*Rope*' >"$out/parity_vision.txt" 2>&1
      say "parity (vision ops + vision model + rope): rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$out/parity_vision.txt" | tr '\n' ' ')"
      grep -E "^(model vision|model Qwen3.5-MoE with images|attention_full|layer_norm|gelu|rope)" "$out/parity_vision.txt" | head -20 | tee -a "$summary"
      grep -E '^\[  FAILED  \]' "$out/parity_vision.txt" | head | tee -a "$summary"
      ;;
    prepare)
      python3 "$root/benchmarks/make_qwen35_model.py" "$folder" --shared "$dev/shared-data" --hidden 4096 --layers 4 \
        --intermediate 1024 --heads 16 --kv-heads 4 --head-dim 256 --linear-key-heads 16 --linear-value-heads 32 \
        --linear-key-dim 128 --linear-value-dim 128 --dtype bf16 --vision-depth 27 --vision-hidden 1152 \
        --vision-heads 16 --vision-ff 4304 --vision-pos-side 48 --min-pixels 65536 --max-pixels 16777216 \
        >"$out/prepare.txt" 2>&1 || { say "prepare failed"; tail -5 "$out/prepare.txt"; }
      python3 - "$work" <<'PY'
import sys, numpy as np
from PIL import Image
for i in range(3):
    g = np.random.default_rng(i)
    y, x = np.mgrid[0:1024, 0:1024]
    img = np.stack([x / 4, y / 4, 128 + 100 * np.sin((x + 3 * i) / 40 + y / 60)], -1) + g.normal(0, 20, (1024, 1024, 3))
    Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(f"{sys.argv[1]}/img{i}.png")
PY
      "$hearth" convert "$folder" -o "$work/hearth-9b-vision.f16.gguf" --type f16 >"$out/convert.txt" 2>&1
      say "prepared: $(tail -2 "$out/convert.txt" | tr '\n' ' ')"
      ;;
    hearth-cuda | hearth-cpu)
      for dv in ${s#hearth-}; do
        for i in 0 1 2; do
          args=(run -m "$work/hearth-9b-vision.f16.gguf" --device "$dv" --image "$work/img$i.png" -p "$question" -n 1)
          [ "$dv" = cpu ] && args+=(--threads "$(nproc)")
          "$hearth" "${args[@]}" >"$out/hearth_${dv}_$i.txt" 2>&1
          say "hearth $dv img$i: $(grep -E '^Images:|warmed up the vision' "$out/hearth_${dv}_$i.txt" | tr '\n' ' ')"
        done
      done
      ;;
    peer-build)
      mkdir -p "$work/peer" && tar -C "$work/peer" -xJf "$root/.peer/llama.cpp.tar.xz"
      (cd "$work/peer/llama.cpp" && cmake -B build -DGGML_CUDA=${PEER_CUDA:-ON} -DCMAKE_CUDA_ARCHITECTURES=90a -DGGML_NATIVE=ON \
         -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
         -DLLAMA_BUILD_EXAMPLES=OFF -DCMAKE_BUILD_TYPE=Release >"$work/peer_cmake.txt" 2>&1 &&
       cmake --build build -j "$(nproc)" --target llama-mtmd-cli llama-server >"$work/peer_build.txt" 2>&1)
      say "peer build: rc=$? $(ls "$work/peer/llama.cpp/build/bin/" 2>/dev/null | tr '\n' ' ')"
      ;;
    peer-wait)
      for _ in $(seq 1 ${PEER_WAIT_STEPS:-120}); do pgrep -f "target llama-mtmd-cli" >/dev/null || break; sleep 5; done
      cp "$work"/peer_*.txt "$out/" 2>/dev/null; say "peer build log: $(tail -2 "$work/peer_build.txt" 2>/dev/null | tr '\n' ' ')"
      ;;
    peer)
      bin=$work/peer/llama.cpp/build/bin
      (cd "$work/peer/llama.cpp" && PYTHONPATH=gguf-py python3 convert_hf_to_gguf.py "$folder" --mmproj --outtype f16 \
         --outfile "$work/llama-mmproj-9b-vision.f16.gguf" >"$out/peer_convert.txt" 2>&1)
      say "peer mmproj convert: rc=$? $(ls -la "$work"/llama-mmproj* 2>/dev/null | awk '{print $5, $9}')"
      mm=$work/llama-mmproj-9b-vision.f16.gguf
      [ -f "$mm" ] || mm=$work/mmproj-hearth-9b-vision.f16.gguf
      for dv in ${PEER_DEVICES:-gpu cpu}; do
        for i in 0 1 2; do
          ngl=99; [ "$dv" = cpu ] && ngl=0
          extra=(); [ "$dv" = cpu ] && extra=(--no-mmproj-offload -t "$(nproc)")
          "$bin/llama-mtmd-cli" -m "$work/hearth-9b-vision.f16.gguf" --mmproj "$mm" --image "$work/img$i.png" \
            -p "$question" -n 1 -ngl $ngl "${extra[@]}" --temp 0 >"$out/peer_${dv}_$i.txt" 2>&1
          say "llama.cpp $dv img$i: rc=$? $(grep -E 'encoding done|encoded in|image slice|decoded in' "$out/peer_${dv}_$i.txt" | head -4 | tr '\n' ' ')"
        done
      done
      ;;
    ttft)
      bin=$work/peer/llama.cpp/build/bin
      mm=$work/llama-mmproj-9b-vision.f16.gguf
      [ -f "$mm" ] || mm=$work/mmproj-hearth-9b-vision.f16.gguf
      "$hearth" bench --scenario image --reps 5 --max-tokens 16 --image-size 1024 --image-words 50 \
        --launch "hearth=$hearth serve -m $work/hearth-9b-vision.f16.gguf --device cuda --port 18090" \
        --target hearth=http://127.0.0.1:18090 \
        --launch "llama.cpp=$bin/llama-server -m $work/hearth-9b-vision.f16.gguf --mmproj $mm -ngl 99 -c 8192 --port 18091" \
        --target llama.cpp=http://127.0.0.1:18091 --out "$out/bench-image" >"$out/ttft.txt" 2>&1
      say "ttft: rc=$? $(grep -iE 'ttft|image' "$out/bench-image/report.md" 2>/dev/null | head -8 | tr '\n' ' ')"
      ;;
  esac
done
cat "$summary"
