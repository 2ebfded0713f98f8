// decode_image, the bicubic resize, smart_resize and preprocess against the fixtures of
// scripts/gen_vision_fixtures.py (tests/data/vision, see its README.md): PIL's decoded
// pixels, PIL's BICUBIC resize, transformers' smart_resize and the pixel_values /
// image_grid_thw of its Qwen2VLImageProcessorPil. All comparisons are exact. Then the
// ways bad data is refused: truncated files, garbage, empty and huge images, unknown formats.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "vision/image.h"
#include "vision/image_resize.h"

namespace hearth::vision {
namespace {

const std::string kDir = std::string(HEARTH_SOURCE_DIR) + "/tests/data/vision/";

std::string read_file(const std::string& name) {
  std::ifstream f(kDir + name, std::ios::binary);
  EXPECT_TRUE(f.good()) << "missing fixture " << kDir + name;
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

const nlohmann::json& manifest() {
  static const nlohmann::json m = nlohmann::json::parse(read_file("manifest.json"));
  return m;
}

// The number of differing bytes and the first one, for a readable failure.
::testing::AssertionResult same_pixels(const std::vector<uint8_t>& got, const std::string& want) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  }
  size_t diffs = 0, first = 0;
  int worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const int d = std::abs(int(got[i]) - int(uint8_t(want[i])));
    if (d != 0 && diffs++ == 0) first = i;
    worst = std::max(worst, d);
  }
  if (diffs == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << diffs << " bytes differ (largest by " << worst << "), first at byte " << first << ": "
         << int(got[first]) << " != " << int(uint8_t(want[first]));
}

TEST(VisionDecode, EveryFixtureDecodesToPilPixels) {
  ASSERT_GE(manifest()["images"].size(), 20u);
  for (const auto& img : manifest()["images"]) {
    const std::string name = img["file"];
    SCOPED_TRACE(name);
    const Image got = decode_image(read_file(name), name);
    EXPECT_EQ(got.width, img["width"].get<int>());
    EXPECT_EQ(got.height, img["height"].get<int>());
    EXPECT_TRUE(same_pixels(got.rgb, read_file(name + ".rgb")));
  }
}

TEST(VisionResize, MatchesPilBicubic) {
  ASSERT_FALSE(manifest()["resizes"].empty());
  for (const auto& r : manifest()["resizes"]) {
    SCOPED_TRACE(r["file"].get<std::string>());
    const Image src = decode_image(read_file(r["image"]), r["image"]);
    const Image got = resize_bicubic(src, r["width"], r["height"]);
    EXPECT_EQ(got.width, r["width"].get<int>());
    EXPECT_EQ(got.height, r["height"].get<int>());
    EXPECT_TRUE(same_pixels(got.rgb, read_file(r["file"])));
  }
}

TEST(VisionSmartResize, MatchesTransformers) {
  ASSERT_FALSE(manifest()["smart_resize"].empty());
  for (const auto& s : manifest()["smart_resize"]) {
    SCOPED_TRACE(s.dump());
    PreprocessConfig cfg;
    cfg.patch_size = s["factor"];
    cfg.merge_size = 1;
    cfg.min_pixels = s["min_pixels"];
    cfg.max_pixels = s["max_pixels"];
    int32_t h = 0, w = 0;
    if (s["result"].is_null()) {
      try {
        smart_resize(s["height"], s["width"], cfg, h, w);
        ADD_FAILURE() << "no error";
      } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::kInvalidInput);
        EXPECT_NE(std::string(e.what()).find("aspect ratio"), std::string::npos) << e.what();
      }
      continue;
    }
    smart_resize(s["height"], s["width"], cfg, h, w);
    EXPECT_EQ(h, s["result"][0].get<int>());
    EXPECT_EQ(w, s["result"][1].get<int>());
  }
  PreprocessConfig cfg;
  int32_t h = 0, w = 0;
  EXPECT_THROW(smart_resize(0, 10, cfg, h, w), Error);
}

TEST(VisionPreprocess, MatchesTransformersProcessor) {
  ASSERT_GE(manifest()["cases"].size(), 6u);
  for (const auto& c : manifest()["cases"]) {
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    PreprocessConfig cfg;
    cfg.patch_size = c["patch_size"];
    cfg.merge_size = c["merge_size"];
    cfg.temporal_patch_size = c["temporal_patch_size"];
    cfg.min_pixels = c["min_pixels"];
    cfg.max_pixels = c["max_pixels"];
    for (int i = 0; i < 3; ++i) {
      cfg.image_mean[i] = c["image_mean"][i].get<float>();
      cfg.image_std[i] = c["image_std"][i].get<float>();
    }
    const Patches p = preprocess(decode_image(read_file(c["image"]), c["image"]), cfg);
    EXPECT_EQ(p.grid_t, c["grid_thw"][0].get<int>());
    EXPECT_EQ(p.grid_h, c["grid_thw"][1].get<int>());
    EXPECT_EQ(p.grid_w, c["grid_thw"][2].get<int>());
    EXPECT_EQ(p.n_patches(), c["shape"][0].get<int64_t>());
    EXPECT_EQ(p.patch_floats, c["shape"][1].get<int>());
    const std::string want = read_file(name + ".f32");
    ASSERT_EQ(p.data.size() * 4, want.size());
    size_t diffs = 0, first = 0;
    for (size_t i = 0; i < p.data.size(); ++i) {
      float w;
      std::memcpy(&w, want.data() + 4 * i, 4);  // little-endian, as the machines this runs on
      if (std::memcmp(&w, &p.data[i], 4) != 0 && diffs++ == 0) first = i;
    }
    EXPECT_EQ(diffs, 0u) << "first at float " << first;
  }
}

// --- bad data ----------------------------------------------------------------------

ErrorKind kind_of(const std::string& bytes, std::string* message = nullptr,
                  int64_t max_pixels = 64LL << 20) {
  DecodeLimits limits;
  limits.max_pixels = max_pixels;
  try {
    decode_image(bytes, "messages[1].content[0]", limits);
  } catch (const Error& e) {
    if (message != nullptr) *message = e.what();
    return e.kind();
  }
  ADD_FAILURE() << "decoded without an error";
  return ErrorKind::kInternal;
}

TEST(VisionDecodeErrors, TruncatedFilesAreInvalidInput) {
  // Cut inside the header and inside the first frame's pixel data (a cut after it, say
  // in a PNG's IEND or a GIF's second frame, still gives the whole first image).
  for (const char* name : {"rgb_64x48.png", "interlaced_51x23.png", "palette_33x200.png",
                           "baseline_64x48.jpg", "progressive_100x70.jpg", "cmyk_40x30.jpg",
                           "lossy_100x70.webp", "lossless_alpha_64x48.webp", "animated_40x32.webp",
                           "interlaced_60x45.gif", "animated_48x36.gif"}) {
    const std::string data = read_file(name);
    for (size_t cut : {size_t{12}, size_t{20}, size_t{40}, data.size() / 5, data.size() / 3}) {
      SCOPED_TRACE(std::string(name) + " cut at " + std::to_string(cut));
      std::string message;
      EXPECT_EQ(kind_of(data.substr(0, cut), &message), ErrorKind::kInvalidInput);
      EXPECT_EQ(message.rfind("[image] messages[1].content[0]: ", 0), 0u) << message;
      if (std::string(name).find(".webp") == std::string::npos) {
        EXPECT_NE(message.find("truncated at byte " + std::to_string(cut)), std::string::npos)
            << message;
      }
    }
  }
}

TEST(VisionDecodeErrors, GarbageAfterASignatureIsRefused) {
  std::mt19937 rng(7);
  const std::string sigs[] = {std::string("\x89PNG\r\n\x1a\n", 8), "\xff\xd8\xff", "GIF89a",
                              std::string("RIFF\x40\0\0\0WEBPVP8 ", 16)};
  for (const std::string& sig : sigs) {
    for (int trial = 0; trial < 20; ++trial) {
      std::string data = sig;
      const int n = 1 + int(rng() % 400);
      for (int i = 0; i < n; ++i) data.push_back(char(rng() & 0xFF));
      std::string message;
      const ErrorKind k = kind_of(data, &message);
      EXPECT_TRUE(k == ErrorKind::kInvalidInput || k == ErrorKind::kResource) << message;
    }
  }
  // Random changes to real files: an error or an image, never a crash.
  for (const char* name :
       {"rgb_64x48.png", "progressive_100x70.jpg", "lossy_100x70.webp", "animated_48x36.gif"}) {
    const std::string data = read_file(name);
    for (int trial = 0; trial < 50; ++trial) {
      std::string bad = data;
      for (int i = 0; i < 4; ++i) bad[16 + rng() % (bad.size() - 16)] = char(rng() & 0xFF);
      try {
        const Image img = decode_image(bad, name);
        EXPECT_EQ(img.rgb.size(), size_t(img.width) * img.height * 3);
      } catch (const Error& e) {
        EXPECT_NE(e.kind(), ErrorKind::kInternal) << e.what();
      }
    }
  }
}

TEST(VisionDecodeErrors, UnknownFormatNamesItsFirstBytes) {
  std::string message;
  EXPECT_EQ(kind_of(std::string("BM\x36\0\0\0\0\0\0\0", 10), &message), ErrorKind::kUnsupported);
  EXPECT_NE(message.find("42 4d 36 00"), std::string::npos) << message;
  EXPECT_NE(message.find("messages[1].content[0]"), std::string::npos) << message;
  EXPECT_EQ(kind_of("", &message), ErrorKind::kInvalidInput);
  EXPECT_EQ(kind_of("\x89PN", &message), ErrorKind::kUnsupported);
}

uint32_t crc32(const std::string& s) {
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : s) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return ~c;
}

void put_be32(std::string& s, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) s[at + i] = char(v >> (24 - 8 * i));
}

// rgb_64x48.png with its IHDR saying width x height (CRC fixed so libpng reads on).
std::string png_with_size(uint32_t width, uint32_t height) {
  std::string png = read_file("rgb_64x48.png");
  put_be32(png, 16, width);
  put_be32(png, 20, height);
  put_be32(png, 29, crc32(png.substr(12, 17)));
  return png;
}

// baseline_64x48.jpg with its frame header (SOF0) saying width x height.
std::string jpeg_with_size(uint16_t width, uint16_t height) {
  std::string jpg = read_file("baseline_64x48.jpg");
  const size_t sof = jpg.find("\xff\xc0");
  EXPECT_NE(sof, std::string::npos);
  jpg[sof + 5] = char(height >> 8), jpg[sof + 6] = char(height & 0xFF);
  jpg[sof + 7] = char(width >> 8), jpg[sof + 8] = char(width & 0xFF);
  return jpg;
}

TEST(VisionDecodeErrors, HugeDeclaredSizesAreRefusedFromTheHeader) {
  // Decoding any of these would need gigabytes: the limit has to stop them first.
  std::string message;
  EXPECT_EQ(kind_of(png_with_size(100000, 100000), &message), ErrorKind::kResource);
  EXPECT_NE(message.find("100000x100000"), std::string::npos) << message;
  EXPECT_EQ(kind_of(jpeg_with_size(65000, 65000), &message), ErrorKind::kResource);
  std::string gif = read_file("animated_48x36.gif");
  gif[6] = gif[7] = gif[8] = gif[9] = char(0xFF);  // logical screen 65535 x 65535
  EXPECT_EQ(kind_of(gif, &message), ErrorKind::kResource);
  std::string webp = read_file("animated_40x32.webp");  // VP8X: canvas width-1, height-1 at 24, 27
  ASSERT_EQ(webp.substr(12, 4), "VP8X");
  for (size_t at : {size_t{24}, size_t{27}})
    webp[at] = char(0xFF), webp[at + 1] = char(0x3F), webp[at + 2] = 0;
  EXPECT_EQ(kind_of(webp, &message), ErrorKind::kResource);
  // And a plain limit: 64 x 48 is above 3000 pixels.
  EXPECT_EQ(kind_of(read_file("rgb_64x48.png"), &message, 3000), ErrorKind::kResource);
  EXPECT_NE(message.find("3000"), std::string::npos) << message;
  EXPECT_EQ(kind_of(read_file("lossy_100x70.webp"), &message, 3000), ErrorKind::kResource);
  EXPECT_EQ(kind_of(read_file("interlaced_60x45.gif"), &message, 2000), ErrorKind::kResource);
  EXPECT_EQ(kind_of(read_file("progressive_100x70.jpg"), &message, 2000), ErrorKind::kResource);
}

TEST(VisionDecodeErrors, EmptyImagesAreInvalidInput) {
  EXPECT_EQ(kind_of(png_with_size(0, 48)), ErrorKind::kInvalidInput);
  EXPECT_EQ(kind_of(jpeg_with_size(64, 0)), ErrorKind::kInvalidInput);
  std::string gif = read_file("animated_48x36.gif");
  gif[6] = gif[7] = 0;  // screen width 0
  EXPECT_EQ(kind_of(gif), ErrorKind::kInvalidInput);
}

TEST(VisionPreprocess, RefusesABrokenImageOrConfig) {
  Image img;
  img.width = 4;
  img.height = 4;
  img.rgb.resize(10);
  EXPECT_THROW(preprocess(img, PreprocessConfig{}), Error);
  img.rgb.assign(48, 0);
  PreprocessConfig cfg;
  cfg.merge_size = 0;
  EXPECT_THROW(preprocess(img, cfg), Error);
  Image wide;
  wide.width = 1000;
  wide.height = 4;
  wide.rgb.assign(size_t(1000) * 4 * 3, 7);
  try {
    preprocess(wide, PreprocessConfig{});
    ADD_FAILURE() << "no error for an aspect ratio of 250";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidInput);
  }
}

}  // namespace
}  // namespace hearth::vision
