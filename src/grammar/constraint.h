// Constrained decoding on xgrammar's C++ core: a per-request constraint (a JSON schema,
// any JSON object, a structural tag, an EBNF grammar or a regex) compiled against the
// model's vocabulary, and a per-sequence matcher that gives the bitmask of the tokens
// allowed next and advances on each accepted token.
//
// JSON is always generated compact (separators "," and ":", no free whitespace): a small
// model could otherwise emit whitespace until max_tokens. Schemas are compiled in strict
// mode (no properties or items beyond those the schema names), so the output validates
// against the schema as given.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace hearth::grammar {

enum class ConstraintKind {
  kJsonSchema,     // text: a JSON schema (object or boolean)
  kJsonObject,     // any JSON object; text unused
  kStructuralTag,  // text: an xgrammar structural tag ({"type": "structural_tag", "format": {...}}
                   // or the format object alone); see tool_call_constraint.h
  kEbnf,           // text: an EBNF grammar with a rule "root"
  kRegex,          // text: a regular expression the whole output must match
};

// What a request asks its output to follow.
struct ConstraintSpec {
  ConstraintKind kind = ConstraintKind::kJsonObject;
  std::string text;
  // kJsonSchema: object schemas allow only the properties they name (xgrammar's strict
  // mode; what they name stays as given). false: extra properties as the schema allows.
  bool strict = true;
  // The cache key: the kind and the text.
  std::string key() const;
};

// A compiled constraint: immutable, shared by every request that asks for the same spec,
// safe to use from many threads. Opaque outside this layer.
class Constraint;

// Compiles specs against one vocabulary and keeps the most recently used compiled
// grammars (by spec text). Thread-safe: HTTP threads compile while the engine decodes.
class ConstraintCompiler {
 public:
  // `n_vocab`: the model's logits width (>= the tokenizer's token count; ids past the
  // tokenizer are never allowed). `stop_tokens`: the ids that end a generation (allowed
  // once the constraint is complete). Control / unknown / unused tokens are never allowed.
  ConstraintCompiler(const tokenizer::Tokenizer& tok, int32_t n_vocab,
                     std::vector<int32_t> stop_tokens, size_t max_cached = 64);
  ~ConstraintCompiler();
  ConstraintCompiler(const ConstraintCompiler&) = delete;
  ConstraintCompiler& operator=(const ConstraintCompiler&) = delete;

  // The compiled constraint for `spec`, from the cache or compiled now. Throws
  // Error(kInvalidInput) for a malformed schema / grammar and Error(kUnsupported) for a
  // schema keyword that cannot be enforced, the message naming it and where it is.
  std::shared_ptr<const Constraint> compile(const ConstraintSpec& spec);

  int32_t n_vocab() const { return n_vocab_; }
  size_t n_cached() const;
  uint64_t n_compiled() const;  // compilations done (cache misses), for tests and stats

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int32_t n_vocab_;
};

// Number of 32-bit words of a token bitmask over `n_vocab` tokens.
int32_t mask_words(int32_t n_vocab);

// The state of one sequence under a constraint. Not thread-safe; one per sequence (it
// may be used from a thread other than the one that made it, one at a time).
class ConstraintMatcher {
 public:
  explicit ConstraintMatcher(std::shared_ptr<const Constraint> constraint);
  ~ConstraintMatcher();
  ConstraintMatcher(ConstraintMatcher&&) noexcept;
  ConstraintMatcher& operator=(ConstraintMatcher&&) noexcept;

  // Writes the tokens allowed next into `mask` (mask_words(n_vocab) words; bit i%32 of
  // word i/32 set: token i allowed). Depends only on the tokens accepted so far.
  void fill_mask(std::span<uint32_t> mask);
  // Advances by `token`; false (and no change) when the token is not allowed.
  bool accept(int32_t token);
  // The output so far is a complete match (a stop token would be accepted now).
  bool completed() const;
  // A stop token was accepted: nothing more may follow.
  bool terminated() const;
  int32_t n_vocab() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Sets logits[i] to -infinity for every token the mask does not allow (and for every
// id past the mask's vocabulary).
void apply_mask(std::span<float> logits, std::span<const uint32_t> mask);

// True when the only tokens the mask allows are among `stop_tokens` (sorted): the
// constrained output is finished.
bool only_stop_allowed(std::span<const uint32_t> mask, std::span<const int32_t> stop_tokens,
                       int32_t n_vocab);

}  // namespace hearth::grammar
