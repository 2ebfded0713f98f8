// What the speculative-decoding tests share: the default model ($HEARTH_DEFAULT_MODEL)
// loaded once per test binary on a one-thread CPU back-end, and a ServeEngine run of
// requests submitted together before it starts (each one's tokens, text and Final).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "engine/request.h"
#include "engine/serve_engine.h"
#include "format/gguf.h"
#include "model/llama_model.h"
#include "tokenizer/tokenizer.h"

namespace spec_test {

struct Loaded {
  hearth::gguf::File file;
  hearth::cpu::CpuBackend backend{1};
  hearth::model::LlamaModel model;
  hearth::tokenizer::Tokenizer tok;
  explicit Loaded(const std::string& path)
      : file(hearth::gguf::File::open(path)),
        model(file, backend),
        tok(hearth::tokenizer::Tokenizer::from_gguf(file)) {}
};

// nullptr when HEARTH_DEFAULT_MODEL is not set (the tests then skip).
inline std::unique_ptr<Loaded>& loaded() {
  static std::unique_ptr<Loaded> l = [] {
    const char* p = std::getenv("HEARTH_DEFAULT_MODEL");
    return p != nullptr && *p != '\0' ? std::make_unique<Loaded>(p) : nullptr;
  }();
  return l;
}

struct Outcome {
  std::vector<int32_t> tokens;
  std::string text;
  hearth::engine::Final fin;
};

// Runs the requests through a ServeEngine on the loaded model; `stats` gets the engine's
// counters once its blocks are released.
inline std::vector<Outcome> serve(const hearth::engine::EngineConfig& cfg,
                                  const std::vector<hearth::engine::GenRequest>& reqs,
                                  hearth::engine::EngineStats& stats,
                                  std::chrono::seconds limit = std::chrono::seconds(180)) {
  namespace engine = hearth::engine;
  Loaded& m = *loaded();
  engine::ServeEngine eng(m.model, m.tok, cfg);
  std::vector<std::shared_ptr<engine::RequestChannel>> chans;
  for (const auto& r : reqs) {
    chans.push_back(std::make_shared<engine::RequestChannel>());
    EXPECT_EQ(eng.submit(r, chans.back()), engine::ServeEngine::Admit::kOk);
  }
  eng.start();
  std::vector<Outcome> out(reqs.size());
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (size_t i = 0; i < chans.size(); ++i) {
    for (;;) {
      std::vector<engine::Delta> ds;
      std::optional<engine::Final> fin;
      chans[i]->wait(ds, fin, std::chrono::milliseconds(20));
      for (auto& d : ds) {
        out[i].text += d.text;
        for (const auto& t : d.tokens) out[i].tokens.push_back(t.token);
      }
      if (fin) {
        out[i].fin = *fin;
        break;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        ADD_FAILURE() << "request " << i << " did not finish";
        break;
      }
    }
  }
  for (int k = 0; k < 200 && eng.stats().kv_blocks_used != 0; ++k) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  stats = eng.stats();
  return out;
}

}  // namespace spec_test
