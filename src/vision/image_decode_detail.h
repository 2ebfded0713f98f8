// Internals of decode_image shared by the per-format decoders (image_decode*.cpp):
// errors in the "[image] <what>: ..." form, the pixel limit checked from a header
// before anything is allocated, alpha over white, and EXIF orientation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "vision/image.h"

namespace hearth::vision::detail {

// Throws Error(kInvalidInput, "[image] <what>: <message>").
[[noreturn]] void fail_invalid(const std::string& what, const std::string& message);

// Throws for an empty image or one above limits.max_pixels; `format` names it ("PNG").
void check_dimensions(int64_t width, int64_t height, const std::string& what, const char* format,
                      const DecodeLimits& limits);

// One pixel channel of `c` with coverage `a` over white, rounded like Pillow's DIV255.
inline uint8_t over_white(uint32_t c, uint32_t a) {
  const uint32_t x = c * a + 255u * (255u - a) + 128u;
  return static_cast<uint8_t>((x + (x >> 8)) >> 8);
}

// RGBA rows (no padding) to the RGB of `out` (already sized), alpha over white.
void rgba_over_white(const uint8_t* rgba, size_t n_pixels, uint8_t* rgb);

// The Orientation tag (1..8) of an EXIF block that starts at its TIFF header ("II*\0" or
// "MM\0*"); 1 when the block is absent, malformed or has no valid tag.
int exif_orientation(const uint8_t* tiff, size_t size);

// The image turned upright for an EXIF orientation, like PIL's ImageOps.exif_transpose.
Image apply_orientation(Image image, int orientation);

Image decode_png(std::string_view bytes, const std::string& what, const DecodeLimits& limits);
Image decode_jpeg(std::string_view bytes, const std::string& what, const DecodeLimits& limits);
Image decode_webp(std::string_view bytes, const std::string& what, const DecodeLimits& limits);
Image decode_gif(std::string_view bytes, const std::string& what, const DecodeLimits& limits);

}  // namespace hearth::vision::detail
