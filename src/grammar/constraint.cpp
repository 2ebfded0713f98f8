#include "grammar/constraint.h"

#include <xgrammar/xgrammar.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <list>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <unordered_map>
#include <utility>

#include "core/error.h"
#include "grammar/schema_check.h"

namespace hearth::grammar {

class Constraint {
 public:
  Constraint(xgrammar::CompiledGrammar compiled, int32_t n_vocab)
      : compiled_(std::move(compiled)), n_vocab_(n_vocab) {}
  const xgrammar::CompiledGrammar& compiled() const { return compiled_; }
  int32_t n_vocab() const { return n_vocab_; }

 private:
  xgrammar::CompiledGrammar compiled_;
  int32_t n_vocab_;
};

namespace {

// xgrammar's fatal errors read "[12:00:00] /path/file.cc:123: message\n"; the
// client needs the message only.
std::string clean_message(std::string msg) {
  if (!msg.empty() && msg[0] == '[') {
    for (const char* ext : {".cc:", ".h:"}) {
      const size_t at = msg.find(ext);
      if (at == std::string::npos) continue;
      const size_t colon = msg.find(": ", at + std::string_view(ext).size());
      if (colon != std::string::npos) msg.erase(0, colon + 2);
      break;
    }
  }
  while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
  return msg;
}

const char* kind_name(ConstraintKind kind) {
  switch (kind) {
    case ConstraintKind::kJsonSchema:
      return "json_schema";
    case ConstraintKind::kJsonObject:
      return "json_object";
    case ConstraintKind::kStructuralTag:
      return "structural_tag";
    case ConstraintKind::kEbnf:
      return "ebnf";
    case ConstraintKind::kRegex:
      return "regex";
  }
  return "?";
}

// The decoded bytes of every token as the engine emits them; "" marks a token that
// text never produces (control, unknown, unused), which xgrammar then never allows.
std::vector<std::string> decoded_vocab(const tokenizer::Tokenizer& tok) {
  const auto& tokens = tok.vocab().tokens;
  std::vector<std::string> out(tokens.size());
  constexpr uint32_t kNeverText =
      tokenizer::kAttrControl | tokenizer::kAttrUnknown | tokenizer::kAttrUnused;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if ((tokens[i].attr & kNeverText) != 0) continue;
    out[i] = tok.token_to_piece(static_cast<int32_t>(i));
  }
  return out;
}

const std::pair<std::string, std::string> kCompact{",", ":"};

}  // namespace

std::string ConstraintSpec::key() const {
  std::string k = kind_name(kind);
  k += strict ? "/strict\n" : "/loose\n";
  k += text;
  return k;
}

struct ConstraintCompiler::Impl {
  Impl(const tokenizer::Tokenizer& tok, int32_t n_vocab, std::vector<int32_t> stop_tokens,
       size_t max_cached_)
      : info(decoded_vocab(tok), xgrammar::VocabType::RAW, n_vocab, std::move(stop_tokens)),
        // Our cache (below) keeps compiled grammars; xgrammar's would hold a second copy.
        compiler(info, static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 4u)),
                 /*cache_enabled=*/false),
        max_cached(max_cached_) {}

  xgrammar::CompiledGrammar build(const ConstraintSpec& spec) {
    switch (spec.kind) {
      case ConstraintKind::kJsonSchema: {
        nlohmann::json schema;
        try {
          schema = nlohmann::json::parse(spec.text);
        } catch (const nlohmann::json::exception& e) {
          fail(ErrorKind::kInvalidInput, "json_schema",
               std::string("the schema is not valid JSON: ") + e.what());
        }
        check_schema_supported(schema);
        const std::string text =
            enforceable_schema(nlohmann::ordered_json::parse(spec.text)).dump();
        return compiler.CompileJSONSchema(text, /*any_whitespace=*/false, /*indent=*/std::nullopt,
                                          kCompact, spec.strict);
      }
      case ConstraintKind::kJsonObject:
        return compiler.CompileJSONSchema(R"({"type": "object"})", /*any_whitespace=*/false,
                                          std::nullopt, kCompact,
                                          /*strict_mode=*/false);
      case ConstraintKind::kStructuralTag: {
        nlohmann::json tag;
        try {
          tag = nlohmann::json::parse(spec.text);
        } catch (const nlohmann::json::exception& e) {
          fail(ErrorKind::kInvalidInput, "structural_tag",
               std::string("not valid JSON: ") + e.what());
        }
        if (!tag.is_object())
          fail(ErrorKind::kInvalidInput, "structural_tag", "must be a JSON object");
        if (tag.value("type", "") != "structural_tag") {
          tag = nlohmann::json{{"type", "structural_tag"}, {"format", std::move(tag)}};
        }
        return compiler.CompileStructuralTag(tag.dump());
      }
      case ConstraintKind::kEbnf:
        return compiler.CompileGrammar(spec.text, "root");
      case ConstraintKind::kRegex:
        return compiler.CompileRegex(spec.text);
    }
    fail(ErrorKind::kInternal, "grammar", "unknown constraint kind");
  }

  xgrammar::TokenizerInfo info;
  xgrammar::GrammarCompiler compiler;
  size_t max_cached;
  std::mutex mu;               // guards lru, cache
  std::list<std::string> lru;  // most recent first
  std::unordered_map<std::string,
                     std::pair<std::shared_ptr<const Constraint>, std::list<std::string>::iterator>>
      cache;
  std::atomic<uint64_t> n_compiled{0};
};

ConstraintCompiler::ConstraintCompiler(const tokenizer::Tokenizer& tok, int32_t n_vocab,
                                       std::vector<int32_t> stop_tokens, size_t max_cached)
    : n_vocab_(std::max(n_vocab, static_cast<int32_t>(tok.n_tokens()))) {
  std::sort(stop_tokens.begin(), stop_tokens.end());
  impl_ = std::make_unique<Impl>(tok, n_vocab_, std::move(stop_tokens),
                                 std::max<size_t>(1, max_cached));
}

ConstraintCompiler::~ConstraintCompiler() = default;

std::shared_ptr<const Constraint> ConstraintCompiler::compile(const ConstraintSpec& spec) {
  const std::string key = spec.key();
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    auto it = impl_->cache.find(key);
    if (it != impl_->cache.end()) {
      impl_->lru.splice(impl_->lru.begin(), impl_->lru, it->second.second);
      return it->second.first;
    }
  }
  // Compiled outside the lock: a large schema must not hold up other requests. Two
  // requests with the same new spec may both compile it; the first to finish is kept.
  std::shared_ptr<const Constraint> built;
  try {
    built = std::make_shared<const Constraint>(impl_->build(spec), n_vocab_);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail(ErrorKind::kInvalidInput, kind_name(spec.kind), clean_message(e.what()));
  }
  impl_->n_compiled.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto it = impl_->cache.find(key);
  if (it != impl_->cache.end()) return it->second.first;
  impl_->lru.push_front(key);
  impl_->cache.emplace(key, std::make_pair(built, impl_->lru.begin()));
  while (impl_->cache.size() > impl_->max_cached) {
    impl_->cache.erase(impl_->lru.back());
    impl_->lru.pop_back();
  }
  return built;
}

size_t ConstraintCompiler::n_cached() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->cache.size();
}

uint64_t ConstraintCompiler::n_compiled() const {
  return impl_->n_compiled.load(std::memory_order_relaxed);
}

int32_t mask_words(int32_t n_vocab) { return xgrammar::GetBitmaskSize(n_vocab); }

struct ConstraintMatcher::Impl {
  explicit Impl(std::shared_ptr<const Constraint> c)
      : constraint(std::move(c)), matcher(constraint->compiled()) {}
  std::shared_ptr<const Constraint> constraint;
  xgrammar::GrammarMatcher matcher;
};

ConstraintMatcher::ConstraintMatcher(std::shared_ptr<const Constraint> constraint) {
  if (!constraint) fail(ErrorKind::kInternal, "grammar", "a matcher needs a compiled constraint");
  impl_ = std::make_unique<Impl>(std::move(constraint));
}
ConstraintMatcher::~ConstraintMatcher() = default;
ConstraintMatcher::ConstraintMatcher(ConstraintMatcher&&) noexcept = default;
ConstraintMatcher& ConstraintMatcher::operator=(ConstraintMatcher&&) noexcept = default;

int32_t ConstraintMatcher::n_vocab() const { return impl_->constraint->n_vocab(); }

void ConstraintMatcher::fill_mask(std::span<uint32_t> mask) {
  const int32_t words = mask_words(n_vocab());
  if (mask.size() != static_cast<size_t>(words)) {
    fail(ErrorKind::kInternal, "grammar",
         "mask of " + std::to_string(mask.size()) + " words, expected " + std::to_string(words));
  }
  int64_t shape[1] = {words};
  DLTensor t{};
  t.data = mask.data();
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = 1;
  t.dtype = xgrammar::GetBitmaskDLType();
  t.shape = shape;
  t.strides = nullptr;
  t.byte_offset = 0;
  // Returns false when every token is allowed; the mask is filled either way.
  impl_->matcher.FillNextTokenBitmask(&t, 0);
}

bool ConstraintMatcher::accept(int32_t token) {
  if (token < 0 || token >= n_vocab()) return false;
  return impl_->matcher.AcceptToken(token);
}

bool ConstraintMatcher::completed() const { return impl_->matcher.IsCompleted(); }
bool ConstraintMatcher::terminated() const { return impl_->matcher.IsTerminated(); }

void apply_mask(std::span<float> logits, std::span<const uint32_t> mask) {
  constexpr float kNeg = -std::numeric_limits<float>::infinity();
  const size_t n = logits.size();
  const size_t covered = std::min(n, mask.size() * 32);
  for (size_t w = 0; w * 32 < covered; ++w) {
    const uint32_t bits = mask[w];
    if (bits == 0xffffffffu) continue;
    const size_t end = std::min(covered, w * 32 + 32);
    for (size_t i = w * 32; i < end; ++i) {
      if (((bits >> (i & 31)) & 1u) == 0) logits[i] = kNeg;
    }
  }
  for (size_t i = covered; i < n; ++i) logits[i] = kNeg;
}

bool only_stop_allowed(std::span<const uint32_t> mask, std::span<const int32_t> stop_tokens,
                       int32_t n_vocab) {
  const size_t words = std::min(mask.size(), (static_cast<size_t>(std::max(0, n_vocab)) + 31) / 32);
  bool any = false;
  for (size_t w = 0; w < words; ++w) {
    uint32_t bits = mask[w];
    if (w * 32 + 32 > static_cast<size_t>(n_vocab)) bits &= (1u << (n_vocab - w * 32)) - 1u;
    while (bits != 0) {
      const int bit = __builtin_ctz(bits);
      bits &= bits - 1;
      const auto id = static_cast<int32_t>(w * 32 + static_cast<size_t>(bit));
      if (!std::binary_search(stop_tokens.begin(), stop_tokens.end(), id)) return false;
      any = true;
    }
  }
  return any;
}

}  // namespace hearth::grammar
