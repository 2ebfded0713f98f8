#include "model/hparams.h"

#include <array>
#include <cstring>

#include "core/error.h"

namespace hearth::model {
namespace {

constexpr std::array kArchs = {
    ArchTraits{"llama", false, false, false},
    ArchTraits{"qwen2", true, false, false},
    ArchTraits{"qwen3", true, true, false},
    ArchTraits{"qwen3moe", true, true, true},
};

[[noreturn]] void bad(const gguf::File& f, const std::string& key, const std::string& what,
                      ErrorKind kind = ErrorKind::kInvalidInput) {
  fail(kind, "model", f.name() + ": " + key + ": " + what);
}

int64_t positive(const gguf::File& f, const std::string& key) {
  const int64_t v = f.get_int(key);
  if (v <= 0 || v > (int64_t{1} << 31)) bad(f, key, "must be a positive count, got " + std::to_string(v));
  return v;
}

}  // namespace

const ArchTraits* find_arch(const std::string& name) {
  for (const auto& a : kArchs) {
    if (name == a.name) return &a;
  }
  return nullptr;
}

Hparams read_hparams(const gguf::File& f) {
  Hparams hp;
  const std::string arch = f.get_string("general.architecture");
  const ArchTraits* traits = find_arch(arch);
  if (traits == nullptr) {
    bad(f, "general.architecture",
        "architecture '" + arch + "' is not supported (supported: llama, qwen2, qwen3, qwen3moe)",
        ErrorKind::kUnsupported);
  }
  hp.arch = *traits;
  const std::string p = arch + ".";
  hp.n_ctx_train = positive(f, p + "context_length");
  hp.n_embd = positive(f, p + "embedding_length");
  hp.n_layer = positive(f, p + "block_count");
  hp.n_head = positive(f, p + "attention.head_count");
  hp.n_head_kv = f.find_int(p + "attention.head_count_kv").value_or(hp.n_head);
  if (hp.n_head_kv <= 0 || hp.n_head % hp.n_head_kv != 0) {
    bad(f, p + "attention.head_count_kv",
        "must divide the head count " + std::to_string(hp.n_head) + ", got " + std::to_string(hp.n_head_kv));
  }
  hp.head_dim = f.find_int(p + "attention.key_length").value_or(hp.n_embd / hp.n_head);
  const int64_t v_dim = f.find_int(p + "attention.value_length").value_or(hp.head_dim);
  if (hp.head_dim <= 0 || hp.head_dim > 1024 || v_dim != hp.head_dim) {
    bad(f, p + "attention.key_length", "unsupported head size " + std::to_string(hp.head_dim) + "/" +
                                           std::to_string(v_dim), ErrorKind::kUnsupported);
  }
  hp.n_ff = f.find_int(p + "feed_forward_length").value_or(0);
  hp.rms_eps = static_cast<float>(f.get_float(p + "attention.layer_norm_rms_epsilon"));
  hp.rope_freq_base = static_cast<float>(f.find_float(p + "rope.freq_base").value_or(10000.0));
  hp.n_rot = f.find_int(p + "rope.dimension_count").value_or(hp.head_dim);
  if (hp.n_rot <= 0 || hp.n_rot > hp.head_dim || hp.n_rot % 2 != 0) {
    bad(f, p + "rope.dimension_count", "must be even and at most the head size, got " + std::to_string(hp.n_rot));
  }
  const std::string scaling = f.find_string(p + "rope.scaling.type").value_or("none");
  if (scaling == "linear") {
    const double factor = f.get_float(p + "rope.scaling.factor");
    if (!(factor > 0.0)) bad(f, p + "rope.scaling.factor", "must be positive");
    hp.rope_freq_scale = static_cast<float>(1.0 / factor);
  } else if (scaling != "none") {
    bad(f, p + "rope.scaling.type", "RoPE scaling '" + scaling + "' is not supported yet (only none and linear)",
        ErrorKind::kUnsupported);
  } else if (auto factor = f.find_float(p + "rope.scaling.factor"); factor && *factor != 1.0 && *factor != 0.0) {
    bad(f, p + "rope.scaling.factor", "a scaling factor without a scaling type is ambiguous; refusing it",
        ErrorKind::kUnsupported);
  }
  if (hp.arch.moe) {
    hp.n_expert = positive(f, p + "expert_count");
    hp.n_expert_used = positive(f, p + "expert_used_count");
    if (hp.n_expert_used > hp.n_expert) {
      bad(f, p + "expert_used_count", "is larger than expert_count " + std::to_string(hp.n_expert));
    }
    hp.n_ff_exp = positive(f, p + "expert_feed_forward_length");
    hp.expert_weights_norm = f.find_bool(p + "expert_weights_norm").value_or(true);
  }
  return hp;
}

}  // namespace hearth::model
