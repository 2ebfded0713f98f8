// Constrained decoding through ServeEngine on the real default model (SmolLM2-135M):
// the output follows the JSON schema with greedy and with temperature-1 sampling, ends
// "stop" when the grammar is complete, "length" when cut by max_tokens, and a
// constrained request batched with free ones leaves their tokens unchanged.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "core/error.h"
#include "engine/request.h"
#include "engine/serve_engine.h"
#include "format/gguf.h"
#include "model/llama_model.h"
#include "tokenizer/tokenizer.h"

using namespace std::chrono_literals;
using hearth::engine::Delta;
using hearth::engine::EngineConfig;
using hearth::engine::Final;
using hearth::engine::GenRequest;
using hearth::engine::RequestChannel;
using hearth::engine::ServeEngine;
using hearth::grammar::ConstraintKind;
using hearth::grammar::ConstraintSpec;
using Json = nlohmann::json;

namespace {

const char* kSchema = R"({"type":"object","properties":{
  "name":{"type":"string","maxLength":20},
  "age":{"type":"integer","minimum":0,"maximum":120},
  "city":{"type":"string","maxLength":20},
  "member":{"type":"boolean"}
},"required":["name","age","city","member"]})";

// Checks `text` against kSchema by hand (no JSON-schema library in C++).
void expect_valid_person(const std::string& text) {
  Json j;
  ASSERT_NO_THROW(j = Json::parse(text)) << text;
  ASSERT_TRUE(j.is_object()) << text;
  ASSERT_EQ(j.size(), 4u) << text;
  ASSERT_TRUE(j.at("name").is_string()) << text;
  ASSERT_TRUE(j.at("city").is_string()) << text;
  ASSERT_TRUE(j.at("member").is_boolean()) << text;
  ASSERT_TRUE(j.at("age").is_number_integer()) << text;
  EXPECT_GE(j.at("age").get<int64_t>(), 0) << text;
  EXPECT_LE(j.at("age").get<int64_t>(), 120) << text;
}

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

struct Outcome {
  std::vector<int32_t> tokens;
  std::string text;
  Final fin;
};

std::vector<Outcome> collect(const std::vector<std::shared_ptr<RequestChannel>>& chans) {
  std::vector<Outcome> out(chans.size());
  std::vector<bool> done(chans.size(), false);
  size_t n_done = 0;
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  while (n_done < chans.size() && std::chrono::steady_clock::now() < deadline) {
    for (size_t i = 0; i < chans.size(); ++i) {
      if (done[i]) continue;
      std::vector<Delta> ds;
      std::optional<Final> fin;
      chans[i]->wait(ds, fin, 5ms);
      for (Delta& d : ds) {
        out[i].text += d.text;
        for (const auto& t : d.tokens) out[i].tokens.push_back(t.token);
      }
      if (fin) {
        out[i].fin = *fin;
        done[i] = true;
        ++n_done;
      }
    }
  }
  EXPECT_EQ(n_done, chans.size()) << "requests did not finish in time";
  return out;
}

EngineConfig config() {
  EngineConfig c;
  c.n_ctx = 512;
  c.n_blocks = 128;
  c.block_size = 16;
  c.max_seqs = 4;
  c.max_queue = 16;
  return c;
}

class ConstrainedEngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* p = std::getenv("HEARTH_DEFAULT_MODEL");
    if (p == nullptr || *p == '\0') return;
    loaded_ = std::make_unique<Loaded>(p);
  }
  static void TearDownTestSuite() { loaded_.reset(); }
  void SetUp() override {
    if (!loaded_) GTEST_SKIP() << "HEARTH_DEFAULT_MODEL is not set";
  }
  static std::vector<int32_t> chat(const std::string& user) {
    return loaded_->tok.encode(
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n" + user +
        "<|im_end|>\n<|im_start|>assistant\n");
  }
  static GenRequest request(const std::string& user, int32_t max_tokens, float temperature,
                            uint64_t seed) {
    GenRequest r;
    r.prompt = chat(user);
    r.max_tokens = max_tokens;
    r.sampler.temperature = temperature;
    r.sampler.top_k = 0;
    r.sampler.top_p = 1.0f;
    r.sampler.min_p = 0.0f;
    r.sampler.seed = seed;
    return r;
  }
  static std::vector<Outcome> run(ServeEngine& engine, std::vector<GenRequest> reqs) {
    std::vector<std::shared_ptr<RequestChannel>> chans;
    for (auto& r : reqs) {
      chans.push_back(std::make_shared<RequestChannel>());
      EXPECT_EQ(engine.submit(std::move(r), chans.back()), ServeEngine::Admit::kOk);
    }
    return collect(chans);
  }
  static ConstraintSpec schema() {
    ConstraintSpec s;
    s.kind = ConstraintKind::kJsonSchema;
    s.text = kSchema;
    return s;
  }
  static inline std::unique_ptr<Loaded> loaded_;
};

TEST_F(ConstrainedEngineTest, GreedyOutputValidatesAndStopsWhenComplete) {
  ServeEngine engine(loaded_->model, loaded_->tok, config());
  engine.start();
  GenRequest r = request("Describe a person as JSON.", 200, 0.0f, 1);
  r.constraint = engine.compile_constraint(schema());
  const auto out = run(engine, {std::move(r)});
  EXPECT_EQ(out[0].fin.finish_reason, "stop") << out[0].text;
  expect_valid_person(out[0].text);
  // Ended on the grammar, not on a sampled end-of-text: no token after the final "}".
  EXPECT_EQ(out[0].fin.completion_tokens, static_cast<int32_t>(out[0].tokens.size()));
  EXPECT_EQ(out[0].text.back(), '}');
}

TEST_F(ConstrainedEngineTest, SampledOutputValidatesAtTemperatureOne) {
  ServeEngine engine(loaded_->model, loaded_->tok, config());
  engine.start();
  std::vector<GenRequest> reqs;
  auto c = engine.compile_constraint(schema());
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    GenRequest r = request("Give me a random person as JSON.", 300, 1.0f, seed);
    r.constraint = c;
    reqs.push_back(std::move(r));
  }
  const auto out = run(engine, std::move(reqs));
  int n_stop = 0;
  for (const Outcome& o : out) {
    if (o.fin.finish_reason == "stop") {
      ++n_stop;
      expect_valid_person(o.text);
    } else {
      EXPECT_EQ(o.fin.finish_reason, "length") << o.text;
    }
  }
  // maxLength bounds every string: all four finish well within 300 tokens.
  EXPECT_EQ(n_stop, 4);
}

TEST_F(ConstrainedEngineTest, JsonObjectParses) {
  ServeEngine engine(loaded_->model, loaded_->tok, config());
  engine.start();
  ConstraintSpec obj;
  obj.kind = ConstraintKind::kJsonObject;
  GenRequest r = request("Reply with a JSON object about cats.", 100, 0.0f, 1);
  r.constraint = engine.compile_constraint(obj);
  const auto out = run(engine, {std::move(r)});
  if (out[0].fin.finish_reason == "stop") {
    const Json j = Json::parse(out[0].text);
    EXPECT_TRUE(j.is_object());
  } else {
    EXPECT_EQ(out[0].fin.finish_reason, "length");
  }
  ASSERT_FALSE(out[0].text.empty());
  EXPECT_EQ(out[0].text[0], '{');
}

TEST_F(ConstrainedEngineTest, CutByMaxTokensIsLengthWithTheTextSoFar) {
  ServeEngine engine(loaded_->model, loaded_->tok, config());
  engine.start();
  GenRequest r = request("Describe a person as JSON.", 5, 0.0f, 1);
  r.constraint = engine.compile_constraint(schema());
  const auto out = run(engine, {std::move(r)});
  EXPECT_EQ(out[0].fin.finish_reason, "length");
  EXPECT_EQ(out[0].fin.completion_tokens, 5);
  EXPECT_EQ(out[0].text, loaded_->tok.decode(out[0].tokens, [] {
    hearth::tokenizer::DecodeOptions o;
    o.strip_space_prefix = false;
    return o;
  }()));
  EXPECT_EQ(out[0].text.rfind("{\"name\":", 0), 0u) << out[0].text;
}

TEST_F(ConstrainedEngineTest, FreeRequestsBatchedWithConstrainedOnesAreUnchanged) {
  const std::string q = "Write one sentence about the sea.";
  std::vector<int32_t> alone;
  {
    ServeEngine engine(loaded_->model, loaded_->tok, config());
    engine.start();
    alone = run(engine, {request(q, 24, 0.0f, 1)})[0].tokens;
  }
  ServeEngine engine(loaded_->model, loaded_->tok, config());
  engine.start();
  auto c = engine.compile_constraint(schema());
  std::vector<GenRequest> reqs;
  for (int i = 0; i < 3; ++i) {
    GenRequest r = request("Describe a person as JSON.", 120, i == 0 ? 0.0f : 1.0f, 10 + i);
    r.constraint = c;
    reqs.push_back(std::move(r));
  }
  reqs.push_back(request(q, 24, 0.0f, 1));
  const auto out = run(engine, std::move(reqs));
  EXPECT_EQ(out[3].tokens, alone);
  for (int i = 0; i < 3; ++i) {
    if (out[i].fin.finish_reason == "stop") expect_valid_person(out[i].text);
  }
}

TEST_F(ConstrainedEngineTest, CompileErrorsNameTheFeature) {
  ServeEngine engine(loaded_->model, loaded_->tok, config());
  ConstraintSpec bad;
  bad.kind = ConstraintKind::kJsonSchema;
  bad.text = R"({"type":"array","items":{"type":"integer"},"uniqueItems":true})";
  try {
    engine.compile_constraint(bad);
    ADD_FAILURE() << "no error";
  } catch (const hearth::Error& e) {
    EXPECT_NE(std::string(e.what()).find("uniqueItems"), std::string::npos) << e.what();
  }
}

}  // namespace
