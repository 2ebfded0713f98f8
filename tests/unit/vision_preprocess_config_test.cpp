// parse_preprocess_config against what transformers' Qwen2VLImageProcessorPil.from_dict
// resolves the same preprocessor_config.json contents to (tests/data/vision/manifest.json,
// written by scripts/gen_vision_fixtures.py), and the settings it refuses.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "vision/preprocess_config.h"

namespace hearth::vision {
namespace {

nlohmann::json manifest() {
  std::ifstream f(std::string(HEARTH_SOURCE_DIR) + "/tests/data/vision/manifest.json");
  return nlohmann::json::parse(
      std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()));
}

TEST(VisionPreprocessConfig, MatchesTransformersResolution) {
  const nlohmann::json configs = manifest()["configs"];
  ASSERT_GE(configs.size(), 5u);
  for (const auto& c : configs) {
    SCOPED_TRACE(c["json"].dump());
    const PreprocessConfig cfg = parse_preprocess_config(c["json"], "preprocessor_config.json");
    const auto& r = c["resolved"];
    EXPECT_EQ(cfg.patch_size, r["patch_size"].get<int>());
    EXPECT_EQ(cfg.temporal_patch_size, r["temporal_patch_size"].get<int>());
    EXPECT_EQ(cfg.merge_size, r["merge_size"].get<int>());
    EXPECT_EQ(cfg.min_pixels, r["min_pixels"].get<int64_t>());
    EXPECT_EQ(cfg.max_pixels, r["max_pixels"].get<int64_t>());
    // Without rescaling the factor is 1; without normalising, mean 0 and std 1.
    EXPECT_EQ(cfg.rescale_factor,
              r["do_rescale"].get<bool>() ? r["rescale_factor"].get<double>() : 1.0);
    for (int i = 0; i < 3; ++i) {
      const bool norm = r["do_normalize"];
      EXPECT_EQ(cfg.image_mean[i], norm ? r["image_mean"][i].get<float>() : 0.0f);
      EXPECT_EQ(cfg.image_std[i], norm ? r["image_std"][i].get<float>() : 1.0f);
    }
  }
}

// The kind and message of the error for `j`, which must name the file and `field`.
void expect_refused(const nlohmann::json& j, ErrorKind kind, const std::string& field) {
  SCOPED_TRACE(j.dump());
  try {
    parse_preprocess_config(j, "models/x/preprocessor_config.json");
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    const std::string m = e.what();
    EXPECT_NE(m.find("models/x/preprocessor_config.json"), std::string::npos) << m;
    EXPECT_NE(m.find("'" + field + "'"), std::string::npos) << m;
  }
}

TEST(VisionPreprocessConfig, RefusesWhatItCannotHonour) {
  using nlohmann::json;
  expect_refused(json{{"patch_size", "16"}}, ErrorKind::kInvalidInput, "patch_size");
  expect_refused(json{{"patch_size", 0}}, ErrorKind::kInvalidInput, "patch_size");
  expect_refused(json{{"merge_size", 2.5}}, ErrorKind::kInvalidInput, "merge_size");
  expect_refused(json{{"temporal_patch_size", -1}}, ErrorKind::kInvalidInput,
                 "temporal_patch_size");
  expect_refused(json{{"size", {{"shortest_edge", "big"}}}}, ErrorKind::kInvalidInput,
                 "size.shortest_edge");
  expect_refused(json{{"size", 5}}, ErrorKind::kInvalidInput, "size");
  expect_refused(json{{"size", {{"height", 224}, {"width", 224}}}}, ErrorKind::kUnsupported,
                 "size");
  expect_refused(json{{"min_pixels", 5000}, {"max_pixels", 4000}}, ErrorKind::kInvalidInput,
                 "size");
  expect_refused(json{{"image_mean", {0.5, 0.5}}}, ErrorKind::kInvalidInput, "image_mean");
  expect_refused(json{{"image_std", {0.5, "x", 0.5}}}, ErrorKind::kInvalidInput, "image_std[1]");
  expect_refused(json{{"image_std", {0.5, 0.0, 0.5}}}, ErrorKind::kInvalidInput, "image_std[1]");
  expect_refused(json{{"rescale_factor", 0}}, ErrorKind::kInvalidInput, "rescale_factor");
  expect_refused(json{{"resample", 2}}, ErrorKind::kUnsupported, "resample");
  expect_refused(json{{"do_resize", false}}, ErrorKind::kUnsupported, "do_resize");
  expect_refused(json{{"do_resize", "yes"}}, ErrorKind::kInvalidInput, "do_resize");
  expect_refused(json{{"do_convert_rgb", false}}, ErrorKind::kUnsupported, "do_convert_rgb");
  expect_refused(json{{"image_processor_type", "SiglipImageProcessor"}}, ErrorKind::kUnsupported,
                 "image_processor_type");
  EXPECT_THROW(parse_preprocess_config(json::array(), "p.json"), Error);
}

TEST(VisionPreprocessConfig, AcceptsTheProcessorTypesOfTheQwenFamily) {
  for (const char* type :
       {"Qwen2VLImageProcessor", "Qwen2VLImageProcessorFast", "Qwen2VLImageProcessorPil"}) {
    const PreprocessConfig cfg = parse_preprocess_config(
        nlohmann::json{{"image_processor_type", type}, {"patch_size", 16}}, "p.json");
    EXPECT_EQ(cfg.patch_size, 16);
  }
  // 3136.0 is an integer written as a float.
  EXPECT_EQ(parse_preprocess_config(nlohmann::json{{"min_pixels", 3136.0}}, "p.json").min_pixels,
            3136);
}

}  // namespace
}  // namespace hearth::vision
