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
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "convert/hf_import.h"
#include "core/error.h"
#include "convert/hf_vision.h"
#include "model/causal_lm.h"
#include "model/mrope_positions.h"
#include "model/vision_encoder.h"

namespace {

namespace model = hearth::model;
namespace vision = hearth::vision;
using json = nlohmann::json;
const std::string kDir = std::string(HEARTH_SOURCE_DIR) + "/tests/data/qwen35/";

json read_json(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << path;
  return json::parse(f);
}

vision::Patches read_patches(const std::string& key, const json& img) {
  vision::Patches p;
  const auto grid = img.at("grid_thw").get<std::vector<int>>();
  p.grid_t = grid[0];
  p.grid_h = grid[1];
  p.grid_w = grid[2];
  p.patch_floats = 3 * 2 * 16 * 16;
  p.data.resize(static_cast<size_t>(p.n_patches() * p.patch_floats));
  std::ifstream f(kDir + "vision_moe_pixels_" + key + ".f32", std::ios::binary);
  f.read(reinterpret_cast<char*>(p.data.data()), static_cast<std::streamsize>(p.data.size() * 4));
  EXPECT_EQ(f.gcount(), static_cast<std::streamsize>(p.data.size() * 4)) << key;
  return p;
}

// max |got - want| / max |want| over an image's embedding rows.
double embed_error(const float* got, const json& want) {
  double err = 0, big = 0;
  int64_t i = 0;
  for (const auto& row : want)
    for (const auto& v : row) {
      const double w = v.get<double>();
      big = std::max(big, std::abs(w));
      err = std::max(err, std::abs(static_cast<double>(got[i++]) - w));
    }
  return err / std::max(big, 1e-12);
}

struct Fixture {
  json rec = read_json(kDir + "vision_moe.json");
  std::map<std::string, vision::Patches> patches;
  Fixture() {
    for (const auto& [k, img] : rec.at("images").items()) patches[k] = read_patches(k, img);
  }
};

// The embeddings of images `keys` (in order) from `enc`, checked against the reference.
std::vector<float> encode_checked(model::VisionEncoder& enc, Fixture& fx, const std::vector<std::string>& keys,
                                  double* worst) {
  std::vector<const vision::Patches*> ps;
  for (const auto& k : keys) ps.push_back(&fx.patches.at(k));
  std::vector<float> out = enc.encode(ps);
  int64_t off = 0;
  for (const auto& k : keys) {
    const json& want = fx.rec.at("images").at(k).at("embeds");
    const double e = embed_error(out.data() + off, want);
    *worst = std::max(*worst, e);
    EXPECT_LE(e, 1e-4) << "image " << k;
    off += static_cast<int64_t>(want.size() * want[0].size());
  }
  EXPECT_EQ(off, static_cast<int64_t>(out.size()));
  return out;
}

TEST(VisionEncoder, EmbeddingsMatchTransformers) {
  Fixture fx;
  hearth::cpu::CpuBackend be(2);
  const auto proj = hearth::convert::open_projector(kDir + "vision_moe");
  ASSERT_TRUE(proj.has_value());
  model::VisionEncoder enc(*proj, be);
  EXPECT_EQ(enc.hparams().n_out, 64);
  EXPECT_EQ(enc.hparams().pre.min_pixels, 4096);
  EXPECT_EQ(enc.hparams().pre.max_pixels, 16384);
  double worst = 0;
  encode_checked(enc, fx, {"a"}, &worst);
  encode_checked(enc, fx, {"b"}, &worst);
  encode_checked(enc, fx, {"a", "b"}, &worst);  // two images of different sizes in one call
  std::cout << "vision tower vs transformers (HF folder): max relative |diff| " << worst << "\n";

  // The same through a projector GGUF on disk (what `hearth convert` writes beside the model).
  const auto out = std::filesystem::temp_directory_path() / "hearth_vision_mmproj.gguf";
  hearth::convert::hf_folder_to_projector(kDir + "vision_moe", hearth::convert::ConvertOptions{.quiet = true})
      .write_file(out.string());
  const hearth::gguf::File file = hearth::gguf::File::open(out.string());
  EXPECT_TRUE(model::is_qwen3vl_projector(file));
  model::VisionEncoder enc2(file, be);
  double worst2 = 0;
  encode_checked(enc2, fx, {"b", "a"}, &worst2);
  std::filesystem::remove(out);
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

// One prompt's media: positions plus the image rows' embeddings (kept alive by `embd`).
model::SeqMedia prompt_media(const json& pr, const json& images, const std::vector<float>& embd) {
  const auto ids = pr.at("ids").get<std::vector<int32_t>>();
  std::vector<model::ImageGrid> grids;
  model::SeqMedia media;
  int64_t off = 0;
  size_t img = 0;
  for (size_t r = 0; r < ids.size();) {
    if (ids[r] != 250) {
      ++r;
      continue;
    }
    const auto g = images.at(pr.at("images")[img++].get<std::string>()).at("grid_thw");
    model::ImageGrid ig{static_cast<int64_t>(r), 1, g[1].get<int64_t>() / 2, g[2].get<int64_t>() / 2};
    grids.push_back(ig);
    media.spans.push_back({ig.first_row, ig.n_tokens(), embd.data() + off * 64});
    off += ig.n_tokens();
    r += static_cast<size_t>(ig.n_tokens());
  }
  model::qwen_vl_positions(static_cast<int64_t>(ids.size()), grids, media);
  return media;
}

TEST(VisionLanguageModel, PromptLogitsAndGreedyMatchTransformers) {
  Fixture fx;
  hearth::cpu::CpuBackend be(2);
  const hearth::gguf::File file = hearth::convert::open_model(kDir + "vision_moe");
  const auto lm = model::load_causal_lm(file, be);
  ASSERT_TRUE(lm->takes_images());
  const auto proj = hearth::convert::open_projector(kDir + "vision_moe");
  ASSERT_TRUE(proj.has_value());
  model::VisionEncoder enc(*proj, be);
  const int64_t V = lm->hparams().n_vocab;
  double worst = 0;
  for (const auto& pr : fx.rec.at("prompts")) {
    const auto ids = pr.at("ids").get<std::vector<int32_t>>();
    std::vector<std::string> keys = pr.at("images").get<std::vector<std::string>>();
    double ew = 0;
    const std::vector<float> embd = encode_checked(enc, fx, keys, &ew);
    const model::SeqMedia media = prompt_media(pr, fx.rec.at("images"), embd);
    model::KvCache cache(be, lm->hparams(), 256, hearth::ops::KvType::F32);
    std::vector<float> logits;
    lm->forward(cache, ids, true, logits, {}, {}, &media);
    const auto at = pr.at("logit_positions").get<std::vector<int64_t>>();
    double big = 0, err = 0;
    for (size_t i = 0; i < at.size(); ++i) {
      const auto& want = pr.at("prompt_logits")[i];
      for (int64_t v = 0; v < V; ++v) {
        big = std::max(big, std::abs(want[v].get<double>()));
        err = std::max(err, std::abs(logits[at[i] * V + v] - want[v].get<double>()));
      }
    }
    EXPECT_LE(err / big, 1e-3) << pr.at("label");
    worst = std::max(worst, err / big);

    // Chunked: the prompt in pieces of 7 rows (cutting through the images) on one cache.
    model::KvCache c2(be, lm->hparams(), 256, hearth::ops::KvType::F32);
    std::vector<float> chunked, part;
    for (size_t s = 0; s < ids.size(); s += 7) {
      const std::vector<int32_t> piece(ids.begin() + s, ids.begin() + std::min(ids.size(), s + 7));
      lm->forward(c2, piece, true, part, {}, {}, &media);
      chunked.insert(chunked.end(), part.begin(), part.end());
    }
    double cd = 0;
    for (size_t i = 0; i < logits.size(); ++i) cd = std::max(cd, std::abs(static_cast<double>(logits[i] - chunked[i])));
    EXPECT_LE(cd, 1e-3 * big) << pr.at("label") << ": chunked prefill";

    // Greedy continuation through the cache (rows after the prompt: text positions).
    const auto want_gen = pr.at("greedy").get<std::vector<int32_t>>();
    const auto margins = pr.at("greedy_margins").get<std::vector<double>>();
    std::vector<float> lg(logits.end() - V, logits.end());
    for (size_t i = 0; i < want_gen.size(); ++i) {
      const int32_t got = static_cast<int32_t>(std::max_element(lg.begin(), lg.end()) - lg.begin());
      if (got != want_gen[i]) {
        EXPECT_LT(margins[i], 2e-3) << pr.at("label") << ": greedy step " << i << " got " << got << ", want "
                                    << want_gen[i] << " (reference margin " << margins[i] << ")";
        break;  // past a near-tie the continuations are different sequences
      }
      lm->forward(cache, {got}, false, lg, {}, {}, &media);
    }
  }
  std::cout << "Qwen3.5-MoE with images vs transformers: max |logit diff| / max |logit| " << worst << "\n";
}

}  // namespace
