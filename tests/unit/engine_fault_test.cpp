// Faults stay with their request: the fault-injection spec parser, and ServeEngine on
// the real default model with one of several concurrent requests faulted (NaN logits,
// a throwing sampler / stop matcher / grammar mask, a failed admission allocation): that
// request ends with "error" and its blocks go back, the others produce exactly the tokens
// they produce without it. An engine fault ends every request and stats().failure says why.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "core/error.h"
#include "engine/fault_inject.h"
#include "engine/request.h"
#include "engine/serve_engine.h"
#include "format/gguf.h"
#include "model/llama_model.h"
#include "tokenizer/tokenizer.h"

using namespace std::chrono_literals;
using hearth::engine::Delta;
using hearth::engine::EngineConfig;
using hearth::engine::FaultKind;
using hearth::engine::Final;
using hearth::engine::GenRequest;
using hearth::engine::RequestChannel;
using hearth::engine::ServeEngine;

TEST(FaultSpec, ParsesRules) {
  const auto rules = hearth::engine::parse_fault_spec("nan:AAA@3,sampler:B,engine:C@0,mask:x:y@12");
  ASSERT_EQ(rules.size(), 4u);
  EXPECT_EQ(rules[0].kind, FaultKind::kNan);
  EXPECT_EQ(rules[0].marker, "AAA");
  EXPECT_EQ(rules[0].at_token, 3);
  EXPECT_EQ(rules[1].kind, FaultKind::kSampler);
  EXPECT_EQ(rules[1].at_token, 0);
  EXPECT_EQ(rules[2].kind, FaultKind::kEngine);
  EXPECT_EQ(rules[3].marker, "x:y");  // only the first ':' separates the kind
  EXPECT_EQ(rules[3].at_token, 12);
  EXPECT_EQ(hearth::engine::match_fault(rules, "say B now")->kind, FaultKind::kSampler);
  EXPECT_FALSE(hearth::engine::match_fault(rules, "nothing here").has_value());
}

TEST(FaultSpec, RejectsBadRules) {
  for (const char* bad :
       {"", "nan", "boom:X", "nan:", "nan:X@", "nan:X@-1", "nan:X@1z", "nan:X,", "nan:@3"}) {
    try {
      hearth::engine::parse_fault_spec(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const hearth::Error& e) {
      EXPECT_NE(std::string(e.what()).find("fault-inject"), std::string::npos) << e.what();
    }
  }
}

namespace {

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
  Final fin;
  bool done = false;
};

std::vector<Outcome> collect(const std::vector<std::shared_ptr<RequestChannel>>& chans) {
  std::vector<Outcome> out(chans.size());
  size_t n_done = 0;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (n_done < chans.size() && std::chrono::steady_clock::now() < deadline) {
    for (size_t i = 0; i < chans.size(); ++i) {
      if (out[i].done) continue;
      std::vector<Delta> ds;
      std::optional<Final> fin;
      chans[i]->wait(ds, fin, 5ms);
      for (const Delta& d : ds) {
        for (const auto& t : d.tokens) out[i].tokens.push_back(t.token);
      }
      if (fin) {
        out[i].fin = *fin;
        out[i].done = true;
        ++n_done;
      }
    }
  }
  EXPECT_EQ(n_done, chans.size()) << "requests did not finish in time";
  return out;
}

class EngineFaultTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* p = std::getenv("HEARTH_DEFAULT_MODEL");
    if (p != nullptr && *p != '\0') loaded_ = std::make_unique<Loaded>(p);
  }
  static void TearDownTestSuite() { loaded_.reset(); }
  void SetUp() override {
    if (!loaded_) GTEST_SKIP() << "HEARTH_DEFAULT_MODEL is not set";
  }

  static EngineConfig config(const std::string& faults) {
    EngineConfig c;
    c.n_ctx = 256;
    c.n_blocks = 64;
    c.block_size = 16;
    c.max_seqs = 4;
    c.max_queue = 16;
    if (!faults.empty()) c.faults = hearth::engine::parse_fault_spec(faults);
    return c;
  }

  static GenRequest greedy(const std::string& text, int32_t max_tokens = 12) {
    GenRequest r;
    r.prompt = loaded_->tok.encode(text);
    r.max_tokens = max_tokens;
    r.sampler.temperature = 0.0f;
    return r;
  }

  // Runs the requests together (submitted before the engine starts) and returns their
  // outcomes; `engine_out` receives the engine's statistics once every request is done.
  static std::vector<Outcome> run(const std::string& faults, std::vector<GenRequest> reqs,
                                  hearth::engine::EngineStats* stats_out = nullptr,
                                  ServeEngine::Admit* late_admit = nullptr) {
    ServeEngine engine(loaded_->model, loaded_->tok, config(faults));
    std::vector<std::shared_ptr<RequestChannel>> chans;
    for (auto& r : reqs) {
      chans.push_back(std::make_shared<RequestChannel>());
      EXPECT_EQ(engine.submit(std::move(r), chans.back()), ServeEngine::Admit::kOk);
    }
    engine.start();
    std::vector<Outcome> outs = collect(chans);
    for (int k = 0; k < 200 && (engine.stats().running != 0 || engine.stats().kv_blocks_used != 0);
         ++k) {
      std::this_thread::sleep_for(5ms);
    }
    if (stats_out != nullptr) *stats_out = engine.stats();
    if (late_admit != nullptr) {
      for (int k = 0; k < 200 && engine.stats().running_loop; ++k) std::this_thread::sleep_for(5ms);
      *late_admit = engine.submit(greedy("too late"), std::make_shared<RequestChannel>());
    }
    return outs;
  }

  static std::vector<std::string> clean() {
    return {"The capital of France is", "def fibonacci(n):", "List three colors:"};
  }

  static std::unique_ptr<Loaded> loaded_;
};

std::unique_ptr<Loaded> EngineFaultTest::loaded_;

}  // namespace

TEST_F(EngineFaultTest, OneFaultedSequenceEndsAloneAndOthersAreUnchanged) {
  std::vector<GenRequest> base;
  for (const auto& p : clean()) base.push_back(greedy(p));
  const std::vector<Outcome> ref = run("", std::move(base));
  for (const Outcome& o : ref) ASSERT_TRUE(o.fin.error.empty()) << o.fin.error;

  struct Case {
    const char* spec;
    const char* message;
    int32_t n_tokens;  // tokens the faulted request streamed before its error
  };
  for (const Case& c :
       {Case{"nan:ZAP@4", "not finite", 4}, Case{"sampler:ZAP@2", "injected sampler fault", 2},
        Case{"stop:ZAP@3", "injected stop-matcher fault", 3},
        Case{"alloc:ZAP", "out of memory", 0}}) {
    SCOPED_TRACE(c.spec);
    std::vector<GenRequest> reqs;
    for (const auto& p : clean()) reqs.push_back(greedy(p));
    reqs.insert(reqs.begin() + 1, greedy("ZAP Once upon a time"));
    hearth::engine::EngineStats stats;
    std::vector<Outcome> outs = run(c.spec, std::move(reqs), &stats);
    ASSERT_EQ(outs.size(), 4u);
    EXPECT_EQ(outs[1].fin.finish_reason, "error");
    EXPECT_NE(outs[1].fin.error.find(c.message), std::string::npos) << outs[1].fin.error;
    EXPECT_EQ(static_cast<int32_t>(outs[1].tokens.size()), c.n_tokens);
    outs.erase(outs.begin() + 1);
    for (size_t i = 0; i < ref.size(); ++i) {
      EXPECT_EQ(outs[i].tokens, ref[i].tokens) << "request " << i;
      EXPECT_EQ(outs[i].fin.finish_reason, ref[i].fin.finish_reason);
    }
    EXPECT_EQ(stats.kv_blocks_used, 0);
    EXPECT_TRUE(stats.running_loop);
    EXPECT_TRUE(stats.failure.empty());
  }
}

TEST_F(EngineFaultTest, GrammarMaskFaultEndsOnlyItsSequence) {
  std::vector<GenRequest> base;
  for (const auto& p : clean()) base.push_back(greedy(p));
  const std::vector<Outcome> ref = run("", std::move(base));

  ServeEngine engine(loaded_->model, loaded_->tok, config("mask:ZAP@2"));
  std::vector<std::shared_ptr<RequestChannel>> chans;
  for (const auto& p : clean()) {
    chans.push_back(std::make_shared<RequestChannel>());
    ASSERT_EQ(engine.submit(greedy(p), chans.back()), ServeEngine::Admit::kOk);
  }
  GenRequest c = greedy("ZAP Give me a JSON object:");
  c.constraint = engine.compile_constraint(hearth::grammar::ConstraintSpec{});  // any JSON object
  chans.push_back(std::make_shared<RequestChannel>());
  ASSERT_EQ(engine.submit(std::move(c), chans.back()), ServeEngine::Admit::kOk);
  engine.start();
  const std::vector<Outcome> outs = collect(chans);
  EXPECT_EQ(outs[3].fin.finish_reason, "error");
  EXPECT_NE(outs[3].fin.error.find("injected mask fault"), std::string::npos) << outs[3].fin.error;
  EXPECT_EQ(outs[3].tokens.size(), 2u);
  for (size_t i = 0; i < ref.size(); ++i)
    EXPECT_EQ(outs[i].tokens, ref[i].tokens) << "request " << i;
}

TEST_F(EngineFaultTest, EngineFaultEndsEveryRequestAndSaysWhy) {
  std::vector<GenRequest> reqs;
  for (const auto& p : clean()) reqs.push_back(greedy(p, 40));
  reqs.push_back(greedy("ZAP hello", 40));
  hearth::engine::EngineStats stats;
  ServeEngine::Admit late = ServeEngine::Admit::kOk;
  const std::vector<Outcome> outs = run("engine:ZAP@3", std::move(reqs), &stats, &late);
  for (const Outcome& o : outs) {
    EXPECT_EQ(o.fin.finish_reason, "error");
    EXPECT_NE(o.fin.error.find("engine failure"), std::string::npos) << o.fin.error;
    EXPECT_EQ(o.tokens.size(), 3u);  // all ran together up to the faulted step
  }
  EXPECT_FALSE(stats.running_loop);
  EXPECT_NE(stats.failure.find("injected engine fault"), std::string::npos) << stats.failure;
  EXPECT_EQ(late, ServeEngine::Admit::kStopped);
}
