// The Qwen2-VL image processor (transformers' Qwen2VLImageProcessorPil, the one on PIL):
// smart_resize, PIL's bicubic resize of the 8-bit image, rescale (computed in double and
// rounded to float32, as numpy does it there), normalise in float32, and the patch order of
// its patchify with the frame repeated temporal_patch_size times.
#include <cmath>
#include <limits>

#include "core/error.h"
#include "vision/image.h"
#include "vision/image_resize.h"

namespace hearth::vision {

void smart_resize(int32_t height, int32_t width, const PreprocessConfig& cfg, int32_t& out_h,
                  int32_t& out_w) {
  if (height <= 0 || width <= 0) {
    fail(ErrorKind::kInvalidInput, "image",
         "image has no pixels (" + std::to_string(width) + "x" + std::to_string(height) + ")");
  }
  const int64_t factor = int64_t{cfg.patch_size} * cfg.merge_size;
  if (factor <= 0)
    fail(ErrorKind::kInvalidInput, "image", "patch_size * merge_size must be positive");
  const double h = height, w = width, f = double(factor);
  const double ratio = std::max(h, w) / std::min(h, w);
  if (ratio > 200) {
    fail(ErrorKind::kInvalidInput, "image",
         "image of " + std::to_string(width) + "x" + std::to_string(height) +
             " has an aspect ratio above 200 (the processor's limit)");
  }
  // Python's round() rounds halves to even, as nearbyint does in the default mode.
  double h_bar = std::nearbyint(h / f) * f;
  double w_bar = std::nearbyint(w / f) * f;
  if (h_bar * w_bar > double(cfg.max_pixels)) {
    const double beta = std::sqrt((h * w) / double(cfg.max_pixels));
    h_bar = std::max(f, std::floor(h / beta / f) * f);
    w_bar = std::max(f, std::floor(w / beta / f) * f);
  } else if (h_bar * w_bar < double(cfg.min_pixels)) {
    const double beta = std::sqrt(double(cfg.min_pixels) / (h * w));
    h_bar = std::ceil(h * beta / f) * f;
    w_bar = std::ceil(w * beta / f) * f;
  }
  if (h_bar < f || w_bar < f || h_bar > (1 << 20) || w_bar > (1 << 20)) {
    fail(ErrorKind::kInvalidInput, "image",
         "image of " + std::to_string(width) + "x" + std::to_string(height) +
             " resizes to an unusable " + std::to_string(int64_t(w_bar)) + "x" +
             std::to_string(int64_t(h_bar)) + " with these pixel bounds");
  }
  out_h = static_cast<int32_t>(h_bar);
  out_w = static_cast<int32_t>(w_bar);
}

Patches preprocess(const Image& image, const PreprocessConfig& cfg) {
  if (image.width <= 0 || image.height <= 0 ||
      image.rgb.size() != size_t(image.width) * image.height * 3) {
    fail(ErrorKind::kInvalidInput, "image", "image buffer does not match its size");
  }
  if (cfg.patch_size <= 0 || cfg.merge_size <= 0 || cfg.temporal_patch_size <= 0) {
    fail(ErrorKind::kInvalidInput, "image",
         "patch_size, merge_size and temporal_patch_size must be positive");
  }
  int32_t rh = 0, rw = 0;
  smart_resize(image.height, image.width, cfg, rh, rw);
  const Image resized =
      (rh == image.height && rw == image.width) ? image : resize_bicubic(image, rw, rh);

  // Channel-planar floats: rescaled in double, rounded to float32, then (x - mean) / std.
  const int P = cfg.patch_size, M = cfg.merge_size, T = cfg.temporal_patch_size;
  const size_t plane = size_t(rw) * rh;
  std::vector<float> chw(plane * 3);
  for (int c = 0; c < 3; ++c) {
    float table[256];
    for (int v = 0; v < 256; ++v) {
      const float x = static_cast<float>(double(v) * cfg.rescale_factor);
      table[v] = (x - cfg.image_mean[c]) / cfg.image_std[c];
    }
    for (size_t i = 0; i < plane; ++i) chw[c * plane + i] = table[resized.rgb[3 * i + c]];
  }

  // (gh/M, gw/M, M, M) patches, each (C, T, P, P).
  Patches out;
  out.grid_t = 1;
  out.grid_h = rh / P;
  out.grid_w = rw / P;
  out.patch_floats = 3 * T * P * P;
  out.data.resize(size_t(out.n_patches()) * out.patch_floats);
  float* dst = out.data.data();
  for (int bh = 0; bh < out.grid_h / M; ++bh) {
    for (int bw = 0; bw < out.grid_w / M; ++bw) {
      for (int mh = 0; mh < M; ++mh) {
        for (int mw = 0; mw < M; ++mw) {
          const size_t y0 = size_t(bh * M + mh) * P, x0 = size_t(bw * M + mw) * P;
          for (int c = 0; c < 3; ++c) {
            for (int t = 0; t < T; ++t) {
              for (int py = 0; py < P; ++py) {
                const float* src = &chw[c * plane + (y0 + py) * rw + x0];
                for (int px = 0; px < P; ++px) *dst++ = src[px];
              }
            }
          }
        }
      }
    }
  }
  return out;
}

}  // namespace hearth::vision
