// Qwen3.5 with images, against transformers (tests/data/qwen35/vision_moe*: a tiny random
// Qwen3.5-MoE with a 2-block vision tower and two images; scripts/gen_qwen35_vision_reference.py):
//   - the vision tower (model/vision_encoder.h, CPU back-end) from the HF folder's
//     model.visual.* (converted to a projector in memory) and from a projector GGUF written
//     to disk: merged embeddings of the processor's pixel values within 1e-4 of the largest;
//   - the 3-D mRoPE positions (model/mrope_positions.h) equal get_rope_index's;
//   - prompt logits with one and with two images within 1e-3 of the largest logit, and the
//     12-token greedy continuation identical (a divergence is accepted only at a step whose
//     reference top-1 / top-2 margin is below 2e-3, a near-tie);
//   - the same prompt split into chunks that cut an image gives the same logits.
#include <iterator>

#include "vision_fixture.h"

namespace {

using namespace vision_fixture;

TEST(VisionEncoder, EmbeddingsMatchTransformers) {
  hearth::cpu::CpuBackend be(2);
  std::cout << "vision tower vs transformers (CPU): max relative |diff| " << check_encoder(be) << "\n";
}

TEST(VisionEncoder, RefusesPatchesOfAnotherShape) {
  hearth::cpu::CpuBackend be(1);
  const auto proj = hearth::convert::open_projector(kDir + "vision_moe");
  ASSERT_TRUE(proj.has_value());
  model::VisionEncoder enc(*proj, be);
  vision::Patches p;
  p.grid_t = 1, p.grid_h = 3, p.grid_w = 4, p.patch_floats = 1536;  // 3 rows: not a multiple of 2
  p.data.assign(12 * 1536, 0.0f);
  EXPECT_THROW(enc.encode({&p}), hearth::Error);
}

// The server's stepped encoding (start, advance one unit at a time, result) gives the bits
// of encode(), for two images of different sizes in one job, and a job can stay open while
// another encoding runs to completion on the same encoder.
TEST(VisionEncoder, SteppedEncodingEqualsOneShot) {
  hearth::cpu::CpuBackend be(2);
  Fixture fx;
  const auto proj = hearth::convert::open_projector(kDir + "vision_moe");
  ASSERT_TRUE(proj.has_value());
  model::VisionEncoder enc(*proj, be);
  const std::vector<const vision::Patches*> both = {&fx.patches.at("a"), &fx.patches.at("b")};
  const std::vector<float> want = enc.encode(both);
  const std::vector<float> want_a = enc.encode({&fx.patches.at("a")});
  ASSERT_FALSE(want.empty());
  const auto job = enc.start(both);
  EXPECT_GE(enc.n_units(), 3);  // the fixture's 2 blocks and the merger
  int64_t steps = 0;
  while (!enc.advance(*job, 1)) {
    ++steps;
    // Other work on the same back-end between the steps (as the engine's decode steps are).
    EXPECT_EQ(enc.encode({&fx.patches.at("a")}), want_a);
  }
  EXPECT_EQ(steps + 1, enc.n_units());
  EXPECT_EQ(enc.result(*job), want);
  EXPECT_TRUE(enc.advance(*job, 1));  // a finished job stays finished
}

TEST(MropePositions, MatchGetRopeIndex) {
  Fixture fx;
  for (const auto& pr : fx.rec.at("prompts")) {
    const auto ids = pr.at("ids").get<std::vector<int32_t>>();
    std::vector<model::ImageGrid> grids;
    size_t img = 0;
    for (size_t r = 0; r < ids.size();) {
      if (ids[r] != 250) {
        ++r;
        continue;
      }
      const auto g = fx.rec.at("images").at(pr.at("images")[img++].get<std::string>()).at("grid_thw");
      model::ImageGrid ig{static_cast<int64_t>(r), g[0].get<int64_t>(), g[1].get<int64_t>() / 2, g[2].get<int64_t>() / 2};
      grids.push_back(ig);
      r += static_cast<size_t>(ig.n_tokens());
    }
    model::SeqMedia media;
    model::qwen_vl_positions(static_cast<int64_t>(ids.size()), grids, media);
    const auto want = pr.at("positions3").get<std::vector<std::vector<int32_t>>>();
    for (size_t r = 0; r < ids.size(); ++r)
      for (int a = 0; a < 3; ++a) ASSERT_EQ(media.pos3[r * 3 + a], want[a][r]) << "row " << r << " axis " << a;
  }
}


// The whole path from the PNG file: decode_image + preprocess with the settings the projector
// carries (from the folder's preprocessor_config.json) give the processor's pixel values.
TEST(VisionEncoder, PngThroughPreprocessGivesTheProcessorsPixels) {
  Fixture fx;
  hearth::cpu::CpuBackend be(1);
  const auto proj = hearth::convert::open_projector(kDir + "vision_moe");
  ASSERT_TRUE(proj.has_value());
  model::VisionEncoder enc(*proj, be);
  for (const auto& [key, want] : fx.patches) {
    std::ifstream f(kDir + "vision_moe_images/" + key + ".png", std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const vision::Patches got = vision::preprocess(vision::decode_image(bytes, key), enc.hparams().pre);
    ASSERT_EQ(got.grid_h, want.grid_h) << key;
    ASSERT_EQ(got.grid_w, want.grid_w) << key;
    ASSERT_EQ(got.data.size(), want.data.size()) << key;
    double worst = 0;
    for (size_t i = 0; i < got.data.size(); ++i) worst = std::max(worst, std::abs(double(got.data[i]) - want.data[i]));
    EXPECT_EQ(worst, 0.0) << key;
  }
}

TEST(VisionLanguageModel, PromptLogitsAndGreedyMatchTransformers) {
  hearth::cpu::CpuBackend be(2);
  std::cout << "Qwen3.5-MoE with images vs transformers (CPU): max |logit diff| / max |logit| "
            << check_lm_with_images(be) << "\n";
}

}  // namespace
