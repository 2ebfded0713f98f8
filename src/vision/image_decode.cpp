// decode_image: the format told apart by its signature, then the per-format decoder
// (image_decode_png.cpp, image_decode_jpeg.cpp, image_decode_webp_gif.cpp); and the
// helpers they share. What the decoders match (PIL as transformers' load_image uses it:
// Image.open, ImageOps.exif_transpose, then RGB) and where they differ is written in
// tests/data/vision/README.md.
#include <cstdio>
#include <cstring>
#include <utility>

#include "core/error.h"
#include "vision/image.h"
#include "vision/image_decode_detail.h"

namespace hearth::vision {
namespace detail {

void fail_invalid(const std::string& what, const std::string& message) {
  fail(ErrorKind::kInvalidInput, "image", what + ": " + message);
}

void check_dimensions(int64_t width, int64_t height, const std::string& what, const char* format,
                      const DecodeLimits& limits) {
  if (width <= 0 || height <= 0) {
    fail_invalid(what, std::string(format) + " image has no pixels (" + std::to_string(width) +
                           "x" + std::to_string(height) + ")");
  }
  // Both fit in 32 bits in every format, so the product cannot overflow.
  if (width * height > limits.max_pixels) {
    fail(ErrorKind::kResource, "image",
         what + ": " + format + " image of " + std::to_string(width) + "x" +
             std::to_string(height) + " pixels is above the limit of " +
             std::to_string(limits.max_pixels) + " pixels");
  }
}

void rgba_over_white(const uint8_t* rgba, size_t n_pixels, uint8_t* rgb) {
  for (size_t i = 0; i < n_pixels; ++i) {
    const uint32_t a = rgba[4 * i + 3];
    for (int c = 0; c < 3; ++c) rgb[3 * i + c] = over_white(rgba[4 * i + c], a);
  }
}

int exif_orientation(const uint8_t* tiff, size_t size) {
  if (tiff == nullptr || size < 8) return 1;
  bool big;
  if (std::memcmp(tiff, "II*\0", 4) == 0) {
    big = false;
  } else if (std::memcmp(tiff, "MM\0*", 4) == 0) {
    big = true;
  } else {
    return 1;
  }
  auto u16 = [&](size_t at) -> uint32_t {
    return big ? (uint32_t{tiff[at]} << 8 | tiff[at + 1])
               : (uint32_t{tiff[at + 1]} << 8 | tiff[at]);
  };
  auto u32 = [&](size_t at) -> uint32_t {
    return big ? (u16(at) << 16 | u16(at + 2)) : (u16(at + 2) << 16 | u16(at));
  };
  const size_t ifd = u32(4);
  if (ifd > size || size - ifd < 2) return 1;
  const size_t count = u16(ifd);
  for (size_t i = 0; i < count; ++i) {
    const size_t entry = ifd + 2 + 12 * i;
    if (entry > size || size - entry < 12) return 1;
    if (u16(entry) != 0x0112) continue;
    // SHORT (3), one value, held in the first two bytes of the value field.
    if (u16(entry + 2) != 3 || u32(entry + 4) < 1) return 1;
    const uint32_t v = u16(entry + 8);
    return v >= 1 && v <= 8 ? static_cast<int>(v) : 1;
  }
  return 1;
}

Image apply_orientation(Image in, int orientation) {
  if (orientation <= 1 || orientation > 8) return in;
  const int32_t w = in.width, h = in.height;
  const bool swap = orientation >= 5;  // transpose, rotations by 90 and transverse
  Image out;
  out.width = swap ? h : w;
  out.height = swap ? w : h;
  out.rgb.resize(in.rgb.size());
  for (int32_t y = 0; y < out.height; ++y) {
    for (int32_t x = 0; x < out.width; ++x) {
      int32_t sx = x, sy = y;  // the source pixel of output (x, y)
      switch (orientation) {
        case 2:
          sx = w - 1 - x;
          break;  // mirrored left-right
        case 3:
          sx = w - 1 - x;
          sy = h - 1 - y;
          break;  // rotated 180
        case 4:
          sy = h - 1 - y;
          break;  // mirrored top-bottom
        case 5:
          sx = y;
          sy = x;
          break;  // transposed
        case 6:
          sx = y;
          sy = h - 1 - x;
          break;  // turned 90 clockwise to be upright
        case 7:
          sx = w - 1 - y;
          sy = h - 1 - x;
          break;  // transverse
        case 8:
          sx = w - 1 - y;
          sy = x;
          break;  // turned 90 counter-clockwise
      }
      std::memcpy(&out.rgb[(size_t(y) * out.width + x) * 3], &in.rgb[(size_t(sy) * w + sx) * 3], 3);
    }
  }
  return out;
}

}  // namespace detail

Image decode_image(std::string_view bytes, const std::string& what, const DecodeLimits& limits) {
  auto starts = [&](const char* sig, size_t at = 0) {
    const size_t n = std::strlen(sig);
    return bytes.size() >= at + n && std::memcmp(bytes.data() + at, sig, n) == 0;
  };
  if (bytes.empty()) detail::fail_invalid(what, "the image data is empty");
  if (starts("\x89PNG\r\n\x1a\n")) return detail::decode_png(bytes, what, limits);
  if (bytes.size() >= 3 && uint8_t(bytes[0]) == 0xFF && uint8_t(bytes[1]) == 0xD8 &&
      uint8_t(bytes[2]) == 0xFF) {
    return detail::decode_jpeg(bytes, what, limits);
  }
  if (starts("RIFF") && starts("WEBP", 8)) return detail::decode_webp(bytes, what, limits);
  if (starts("GIF87a") || starts("GIF89a")) return detail::decode_gif(bytes, what, limits);
  std::string head;
  for (size_t i = 0; i < bytes.size() && i < 8; ++i) {
    char hex[4];
    std::snprintf(hex, sizeof hex, "%s%02x", i ? " " : "", unsigned(uint8_t(bytes[i])));
    head += hex;
  }
  fail(ErrorKind::kUnsupported, "image",
       what + ": not a PNG, JPEG, WebP or GIF image (it starts with bytes " + head + ")");
}

}  // namespace hearth::vision
