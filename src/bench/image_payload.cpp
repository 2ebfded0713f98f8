#include "bench/image_payload.h"

#include <png.h>

#include <algorithm>
#include <csetjmp>

#include "bench/prompts.h"
#include "core/error.h"

namespace hearth::bench {

namespace {

void fill(std::vector<uint8_t>& px, int width, int x0, int y0, int x1, int y1, const uint8_t c[3]) {
  for (int y = y0; y < y1; ++y)
    for (int x = x0; x < x1; ++x) std::copy(c, c + 3, px.begin() + (static_cast<size_t>(y) * width + x) * 3);
}

struct PngSink {
  std::string out;
};

void png_write(png_structp png, png_bytep data, png_size_t n) {
  static_cast<PngSink*>(png_get_io_ptr(png))->out.append(reinterpret_cast<const char*>(data), n);
}

void png_error_fn(png_structp png, png_const_charp msg) {
  // Back to encode_png's setjmp; the message is kept in the error pointer's buffer.
  auto* m = static_cast<std::string*>(png_get_error_ptr(png));
  if (m != nullptr) *m = msg;
  png_longjmp(png, 1);
}

void png_warning_fn(png_structp, png_const_charp) {}

}  // namespace

std::vector<uint8_t> synthetic_screenshot(uint64_t seed, int width, int height) {
  if (width < 1 || height < 1)
    fail(ErrorKind::kInvalidInput, "image", "image size must be positive, got " + std::to_string(width) + "x" +
                                                std::to_string(height));
  std::vector<uint8_t> px(static_cast<size_t>(width) * height * 3);
  Rng rng(mix_seed(seed, 0x1AA6E));
  // A background gradient whose direction and colours come from the seed.
  const int r0 = static_cast<int>(rng.below(256)), g0 = static_cast<int>(rng.below(256)),
            b0 = static_cast<int>(rng.below(256));
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x) {
      uint8_t* p = &px[(static_cast<size_t>(y) * width + x) * 3];
      p[0] = static_cast<uint8_t>((r0 + 96 * x / width) & 255);
      p[1] = static_cast<uint8_t>((g0 + 96 * y / height) & 255);
      p[2] = static_cast<uint8_t>((b0 + 48 * (x + y) / (width + height)) & 255);
    }
  // A title bar, then panels with rows of "words" (dark strokes of random lengths).
  const uint8_t bar[3] = {40, 44, 52}, panel[3] = {245, 245, 245}, ink[3] = {30, 30, 30};
  const int bar_h = std::max(1, height / 24);
  fill(px, width, 0, 0, width, bar_h, bar);
  const int panels = 1 + static_cast<int>(rng.below(4));
  for (int k = 0; k < panels; ++k) {
    const int x0 = static_cast<int>(rng.below(static_cast<size_t>(std::max(1, width * 2 / 3))));
    const int y0 = bar_h + static_cast<int>(rng.below(static_cast<size_t>(std::max(1, (height - bar_h) * 2 / 3))));
    const int x1 = std::min(width, x0 + 1 + static_cast<int>(rng.below(static_cast<size_t>(width / 2 + 1))));
    const int y1 = std::min(height, y0 + 1 + static_cast<int>(rng.below(static_cast<size_t>(height / 2 + 1))));
    fill(px, width, x0, y0, x1, y1, panel);
    const int line_h = std::max(2, height / 64);
    for (int y = y0 + line_h; y + line_h / 2 < y1; y += 2 * line_h) {
      int x = x0 + line_h;
      while (x < x1 - line_h) {
        const int w = std::min(x1 - line_h, x + line_h * (1 + static_cast<int>(rng.below(6))));
        fill(px, width, x, y, w, y + std::max(1, line_h / 2), ink);
        x = w + line_h;
      }
    }
  }
  return px;
}

std::string encode_png(const std::vector<uint8_t>& rgb, int width, int height) {
  if (width < 1 || height < 1 || rgb.size() != static_cast<size_t>(width) * height * 3)
    fail(ErrorKind::kInvalidInput, "png",
         "pixels do not match " + std::to_string(width) + "x" + std::to_string(height) + " RGB (" +
             std::to_string(rgb.size()) + " bytes)");
  std::string message;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &message, png_error_fn, png_warning_fn);
  if (png == nullptr) fail(ErrorKind::kInternal, "png", "png_create_write_struct failed");
  png_infop info = png_create_info_struct(png);
  if (info == nullptr) {
    png_destroy_write_struct(&png, nullptr);
    fail(ErrorKind::kInternal, "png", "png_create_info_struct failed");
  }
  PngSink sink;
  std::vector<png_bytep> rows(static_cast<size_t>(height));
  for (int y = 0; y < height; ++y)
    rows[static_cast<size_t>(y)] = const_cast<png_bytep>(rgb.data() + static_cast<size_t>(y) * width * 3);
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    fail(ErrorKind::kInternal, "png", "libpng: " + message);
  }
  png_set_write_fn(png, &sink, png_write, nullptr);
  png_set_IHDR(png, info, static_cast<png_uint_32>(width), static_cast<png_uint_32>(height), 8, PNG_COLOR_TYPE_RGB,
               PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_set_compression_level(png, 6);
  png_write_info(png, info);
  png_write_image(png, rows.data());
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return std::move(sink.out);
}

std::string base64_encode(std::string_view bytes) {
  static const char* const kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t v = static_cast<uint32_t>(static_cast<uint8_t>(bytes[i])) << 16 |
                       static_cast<uint32_t>(static_cast<uint8_t>(bytes[i + 1])) << 8 |
                       static_cast<uint8_t>(bytes[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += kAlphabet[(v >> s) & 63];
  }
  if (const size_t rest = bytes.size() - i; rest > 0) {
    uint32_t v = static_cast<uint32_t>(static_cast<uint8_t>(bytes[i])) << 16;
    if (rest == 2) v |= static_cast<uint32_t>(static_cast<uint8_t>(bytes[i + 1])) << 8;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += rest == 2 ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::string image_media_type(std::string_view b) {
  const auto starts = [&](std::string_view sig, size_t at = 0) { return b.size() >= at + sig.size() && b.substr(at, sig.size()) == sig; };
  if (starts("\x89PNG\r\n\x1a\n")) return "image/png";
  if (starts("\xff\xd8\xff")) return "image/jpeg";
  if (starts("RIFF") && starts("WEBP", 8)) return "image/webp";
  if (starts("GIF87a") || starts("GIF89a")) return "image/gif";
  return "";
}

std::string image_data_url(std::string_view bytes) {
  const std::string type = image_media_type(bytes);
  if (type.empty()) return "";
  return "data:" + type + ";base64," + base64_encode(bytes);
}

}  // namespace hearth::bench
