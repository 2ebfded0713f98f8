// Images as the vision models take them: decoding an encoded file (PNG, JPEG, WebP,
// GIF's first frame) into 8-bit RGB, and the Qwen2-VL image processor's steps (resize
// to multiples of patch x merge within the pixel bounds, bicubic like PIL, rescale,
// normalise, temporal patch) that turn it into the patches the vision tower embeds.
// Nothing here knows about models, back-ends or HTTP.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hearth::vision {

// 8-bit RGB, rows top to bottom, 3 bytes per pixel, no padding.
struct Image {
  int32_t width = 0;
  int32_t height = 0;
  std::vector<uint8_t> rgb;  // width * height * 3
};

struct DecodeLimits {
  int64_t max_pixels = 64LL << 20;  // width * height above this: Error(kResource) before decoding
};

// Decodes PNG, JPEG, WebP or GIF (the first frame), told apart by their signatures; alpha
// (and PNG / GIF transparency) is composited over white, grey and palette images are
// expanded, 16-bit samples keep their high byte, the EXIF orientation is applied (as
// transformers' load_image does with ImageOps.exif_transpose). Throws Error
// (kInvalidInput: corrupt or truncated data, naming `what` (e.g. "messages[1].content[0]")
// and what is wrong; kUnsupported: not one of those formats; kResource: above the limits).
Image decode_image(std::string_view bytes, const std::string& what, const DecodeLimits& limits = {});

// The Qwen2-VL / Qwen3-VL image processor's settings (preprocessor_config.json).
struct PreprocessConfig {
  int32_t patch_size = 16;
  int32_t temporal_patch_size = 2;
  int32_t merge_size = 2;
  int64_t min_pixels = 65536;     // size.shortest_edge (or min_pixels)
  int64_t max_pixels = 16777216;  // size.longest_edge (or max_pixels)
  float image_mean[3] = {0.5f, 0.5f, 0.5f};
  float image_std[3] = {0.5f, 0.5f, 0.5f};
  double rescale_factor = 1.0 / 255.0;  // double: the processor multiplies in float64
};

// One image as patches: grid_t x grid_h x grid_w patches (grid_h, grid_w multiples of
// merge_size), in the processor's order (merge windows row-major, the merge_size x
// merge_size patches of a window one after another), each patch
// channels x temporal_patch_size x patch_size x patch_size floats (C, T, P, P order).
struct Patches {
  int32_t grid_t = 0, grid_h = 0, grid_w = 0;
  int32_t patch_floats = 0;  // 3 * temporal_patch_size * patch_size^2
  std::vector<float> data;   // grid_t * grid_h * grid_w * patch_floats
  int64_t n_patches() const { return int64_t{grid_t} * grid_h * grid_w; }
};

// smart_resize: the (height, width) an image is resized to. Throws Error(kInvalidInput)
// for an aspect ratio above 200 or an empty image.
void smart_resize(int32_t height, int32_t width, const PreprocessConfig& cfg, int32_t& out_h, int32_t& out_w);

// The processor's whole pipeline for a still image (repeated temporal_patch_size times).
Patches preprocess(const Image& image, const PreprocessConfig& cfg);

}  // namespace hearth::vision
