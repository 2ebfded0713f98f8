// The tiny Qwen3.5-MoE-with-vision fixture (tests/data/qwen35/vision_moe*, written by
// scripts/gen_qwen35_vision_reference.py with transformers 5.17) and the checks against it,
// for any back-end: model_vision_test.cpp runs them on the CPU, tests/cuda on the GPU.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
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

namespace vision_fixture {

namespace model = hearth::model;
namespace vision = hearth::vision;
using json = nlohmann::json;
// The fixtures: under $HEARTH_SOURCE_DIR when set (a binary carried to another machine).
inline const std::string kDir =
    std::string(std::getenv("HEARTH_SOURCE_DIR") ? std::getenv("HEARTH_SOURCE_DIR") : HEARTH_SOURCE_DIR) +
    "/tests/data/qwen35/";

inline json read_json(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << path;
  return json::parse(f);
}

inline vision::Patches read_patches(const std::string& key, const json& img) {
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
inline double embed_error(const float* got, const json& want) {
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
inline std::vector<float> encode_checked(model::VisionEncoder& enc, Fixture& fx, const std::vector<std::string>& keys,
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

// The vision tower on `be` (HF folder, then a projector GGUF on disk) against transformers;
// returns the worst relative error.
inline double check_encoder(hearth::ops::Backend& be) {
  Fixture fx;
  const auto proj = hearth::convert::open_projector(kDir + "vision_moe");
  if (!proj) {
    ADD_FAILURE() << "no projector";
    return 1;
  }
  model::VisionEncoder enc(*proj, be);
  EXPECT_EQ(enc.hparams().n_out, 64);
  EXPECT_EQ(enc.hparams().pre.min_pixels, 4096);
  EXPECT_EQ(enc.hparams().pre.max_pixels, 16384);
  double worst = 0;
  encode_checked(enc, fx, {"a"}, &worst);
  encode_checked(enc, fx, {"b"}, &worst);
  encode_checked(enc, fx, {"a", "b"}, &worst);  // two images of different sizes in one call

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
  return std::max(worst, worst2);
}

// One prompt's media: positions plus the image rows' embeddings (kept alive by `embd`).
inline model::SeqMedia prompt_media(const json& pr, const json& images, const std::vector<float>& embd) {
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

// Prompt logits with images, a chunked prefill and the greedy continuation on `be` against
// transformers; returns the worst max |logit diff| / max |logit|.
inline double check_lm_with_images(hearth::ops::Backend& be) {
  Fixture fx;
  const hearth::gguf::File file = hearth::convert::open_model(kDir + "vision_moe");
  const auto lm = model::load_causal_lm(file, be);
  EXPECT_TRUE(lm->takes_images());
  const auto proj = hearth::convert::open_projector(kDir + "vision_moe");
  if (!proj) {
    ADD_FAILURE() << "no projector";
    return 1;
  }
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
  return worst;
}

}  // namespace vision_fixture
