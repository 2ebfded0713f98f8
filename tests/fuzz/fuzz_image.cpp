// libFuzzer target for src/vision: decode_image on arbitrary bytes (PNG, JPEG, WebP, GIF
// and anything else), under a small pixel limit, then the Qwen2-VL preprocessing of what
// decoded, with small patch and pixel bounds so each input stays cheap. hearth::Error is
// the expected way to reject bad input; anything else (crash, sanitizer report, other
// exception, time-out, huge allocation) is a bug.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/error.h"
#include "vision/image.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hearth::vision;
  DecodeLimits limits;
  limits.max_pixels = 1 << 18;
  Image image;
  try {
    image = decode_image(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz", limits);
  } catch (const hearth::Error&) {
    return 0;
  }
  if (image.width <= 0 || image.height <= 0 || image.rgb.size() != size_t(image.width) * image.height * 3) {
    __builtin_trap();
  }
  PreprocessConfig cfg;
  cfg.patch_size = 4;
  cfg.merge_size = 2;
  cfg.temporal_patch_size = 2;
  cfg.min_pixels = 64;
  cfg.max_pixels = 4096;
  try {
    const Patches p = preprocess(image, cfg);
    if (p.data.size() != size_t(p.n_patches()) * p.patch_floats || p.grid_h % 2 != 0 || p.grid_w % 2 != 0) {
      __builtin_trap();
    }
  } catch (const hearth::Error&) {  // an aspect ratio above 200
  }
  return 0;
}
