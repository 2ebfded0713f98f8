// hearth bench: the image scenario's payload: the synthetic picture, its PNG encoding
// (decoded back with the vision layer's decoder), base64 and data: URLs, and the
// scenario's message.
#include <gtest/gtest.h>

#include <set>

#include "bench/image_payload.h"
#include "bench/prompts.h"
#include "core/error.h"
#include "vision/image.h"

namespace hearth::bench {
namespace {

TEST(BenchImage, PngDecodesBackToThePixels) {
  for (auto [w, h] : {std::pair{256, 256}, std::pair{37, 11}, std::pair{1, 1}, std::pair{1024, 1024}}) {
    const std::vector<uint8_t> px = synthetic_screenshot(7, w, h);
    ASSERT_EQ(px.size(), static_cast<size_t>(w) * h * 3);
    const std::string png = encode_png(px, w, h);
    EXPECT_EQ(image_media_type(png), "image/png");
    const vision::Image img = vision::decode_image(png, "test");
    EXPECT_EQ(img.width, w);
    EXPECT_EQ(img.height, h);
    EXPECT_EQ(img.rgb, px) << w << "x" << h;
  }
}

TEST(BenchImage, PictureIsDeterministicAndVariesWithTheSeed) {
  const auto a = synthetic_screenshot(1, 128, 96), b = synthetic_screenshot(1, 128, 96),
             c = synthetic_screenshot(2, 128, 96);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_EQ(encode_png(a, 128, 96), encode_png(b, 128, 96));
  // Not a flat picture: many distinct colours (gradient, panels, strokes).
  std::set<uint32_t> colours;
  for (size_t i = 0; i < a.size(); i += 3) colours.insert(a[i] << 16 | a[i + 1] << 8 | a[i + 2]);
  EXPECT_GT(colours.size(), 50u);
}

TEST(BenchImage, BadSizesAreRefused) {
  EXPECT_THROW(encode_png(std::vector<uint8_t>(10), 2, 2), Error);
  EXPECT_THROW(encode_png({}, 0, 0), Error);
  EXPECT_THROW(synthetic_screenshot(1, 0, 5), Error);
}

TEST(BenchImage, Base64MatchesRfc4648Vectors) {
  EXPECT_EQ(base64_encode(""), "");
  EXPECT_EQ(base64_encode("f"), "Zg==");
  EXPECT_EQ(base64_encode("fo"), "Zm8=");
  EXPECT_EQ(base64_encode("foo"), "Zm9v");
  EXPECT_EQ(base64_encode("foob"), "Zm9vYg==");
  EXPECT_EQ(base64_encode("fooba"), "Zm9vYmE=");
  EXPECT_EQ(base64_encode("foobar"), "Zm9vYmFy");
  EXPECT_EQ(base64_encode(std::string("\xff\xfe\x00", 3)), "//4A");
}

TEST(BenchImage, MediaTypesBySignature) {
  EXPECT_EQ(image_media_type(std::string("\xff\xd8\xff\xe0", 4)), "image/jpeg");
  using namespace std::string_literals;
  EXPECT_EQ(image_media_type("RIFF\x10\x00\x00\x00WEBPVP8 "s), "image/webp");
  EXPECT_EQ(image_media_type("GIF89a...."), "image/gif");
  EXPECT_EQ(image_media_type("GIF87a...."), "image/gif");
  EXPECT_EQ(image_media_type("RIFF\x10\x00\x00\x00WAVE"s), "");
  EXPECT_EQ(image_media_type("%PDF-1.7"), "");
  EXPECT_EQ(image_media_type("\x89PN"), "");  // cut short
  EXPECT_EQ(image_data_url("hello"), "");
  EXPECT_EQ(image_data_url("GIF89a"), "data:image/gif;base64,R0lGODlh");
}

TEST(BenchImage, MessageHasTheQuestionThenTheImage) {
  const nlohmann::json m = image_messages(5, 50, "data:image/png;base64,AAAA");
  ASSERT_EQ(m.size(), 1u);
  const auto& parts = m[0]["content"];
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0]["type"], "text");
  const std::string q = parts[0]["text"];
  size_t words = 0;
  for (size_t i = 0; i < q.size(); ++i)
    if (q[i] != ' ' && q[i] != '\n' && (i == 0 || q[i - 1] == ' ' || q[i - 1] == '\n')) ++words;
  EXPECT_GE(words, 45u);
  EXPECT_LE(words, 55u);
  EXPECT_EQ(parts[1]["image_url"]["url"], "data:image/png;base64,AAAA");
  EXPECT_NE(image_messages(6, 50, "x")[0]["content"][0]["text"], q);
}

}  // namespace
}  // namespace hearth::bench
