#include "model/hparams.h"

#include <array>
#include <cstring>

#include "core/error.h"

namespace hearth::model {
namespace {

constexpr std::array kArchs = {
    ArchTraits{"llama", false, false, false, false},
    ArchTraits{"qwen2", true, false, false, false},
    ArchTraits{"qwen3", true, true, false, false},
    ArchTraits{"qwen3moe", true, true, true, false},
    ArchTraits{"qwen35", true, true, false, true},
    ArchTraits{"qwen35moe", true, true, true, true},
    ArchTraits{"qwen3next", true, true, true, true},
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

// Gated DeltaNet shape and the layer pattern of qwen35 / qwen35moe / qwen3next (llama.cpp's
// keys: ssm.* and full_attention_interval, or the per-layer attention.recurrent_layers).
void read_hybrid(const gguf::File& f, const std::string& p, Hparams& hp) {
  ops::GdnShape& g = hp.gdn;
  g.conv_kernel = positive(f, p + "ssm.conv_kernel");
  g.d_k = positive(f, p + "ssm.state_size");
  g.n_k_heads = positive(f, p + "ssm.group_count");
  g.n_v_heads = positive(f, p + "ssm.time_step_rank");
  const int64_t inner = positive(f, p + "ssm.inner_size");
  if (g.n_v_heads % g.n_k_heads != 0) {
    bad(f, p + "ssm.time_step_rank", "value heads (" + std::to_string(g.n_v_heads) +
                                         ") must be a multiple of the key heads (ssm.group_count " +
                                         std::to_string(g.n_k_heads) + ")");
  }
  if (inner % g.n_v_heads != 0) {
    bad(f, p + "ssm.inner_size", std::to_string(inner) + " is not a multiple of the value heads " +
                                     std::to_string(g.n_v_heads));
  }
  g.d_v = inner / g.n_v_heads;
  g.v_tiled = hp.arch.name != std::string("qwen3next");  // llama.cpp reorders qwen35* value heads
  g.l2_eps = hp.rms_eps;
  hp.recurrent.assign(static_cast<size_t>(hp.n_layer), 0);
  if (const gguf::Value* v = f.find(p + "attention.recurrent_layers")) {
    const auto& arr = v->as_array(p + "attention.recurrent_layers");
    // (one entry per block, the MTP blocks' included, or per layer of the model)
    const auto n = static_cast<int64_t>(arr.size());
    if (n != hp.n_layer && n != hp.n_layer + hp.n_nextn) {
      bad(f, p + "attention.recurrent_layers", "has " + std::to_string(arr.size()) + " entries for " +
                                                   std::to_string(hp.n_layer) + " layers");
    }
    for (int64_t i = 0; i < hp.n_layer; ++i) {
      hp.recurrent[static_cast<size_t>(i)] = arr[static_cast<size_t>(i)].as_bool(p + "attention.recurrent_layers") ? 1 : 0;
    }
  } else {
    const int64_t every = f.find_int(p + "full_attention_interval").value_or(4);
    if (every <= 0) bad(f, p + "full_attention_interval", "must be positive, got " + std::to_string(every));
    for (int64_t l = 0; l < hp.n_layer; ++l) hp.recurrent[static_cast<size_t>(l)] = (l + 1) % every != 0 ? 1 : 0;
  }
  if (hp.arch.moe) {
    hp.n_ff_shexp = f.find_int(p + "expert_shared_feed_forward_length").value_or(0);
    if (hp.arch.name != std::string("qwen3next")) hp.expert_weights_norm = true;  // Qwen3.5 always renormalises
  }
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
        "architecture '" + arch + "' is not supported (supported: llama, qwen2, qwen3, qwen3moe, qwen35, qwen35moe, "
        "qwen3next)",
        ErrorKind::kUnsupported);
  }
  hp.arch = *traits;
  const std::string p = arch + ".";
  hp.n_ctx_train = positive(f, p + "context_length");
  hp.n_embd = positive(f, p + "embedding_length");
  hp.n_layer = positive(f, p + "block_count");
  if (const auto nextn = f.find_int(p + "nextn_predict_layers")) {
    if (*nextn < 0 || *nextn >= hp.n_layer) {
      bad(f, p + "nextn_predict_layers", "must be at least 0 and less than block_count " + std::to_string(hp.n_layer) +
                                             ", got " + std::to_string(*nextn));
    }
    hp.n_nextn = *nextn;
    hp.n_layer -= hp.n_nextn;  // the MTP blocks follow the model's layers
  }
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
  if (const gguf::Value* secs = f.find(p + "rope.dimension_sections")) {
    const auto& arr = secs->as_array(p + "rope.dimension_sections");
    int64_t sum = 0;
    for (size_t i = 0; i < arr.size() && i < 3; ++i) {
      hp.rope_sections[i] = static_cast<int32_t>(arr[i].as_int(p + "rope.dimension_sections"));
      if (hp.rope_sections[i] < 0) bad(f, p + "rope.dimension_sections", "must not be negative");
      sum += hp.rope_sections[i];
    }
    if (sum * 2 > hp.n_rot) bad(f, p + "rope.dimension_sections", "cover more than the rotated dimensions");
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
  if (hp.arch.hybrid) read_hybrid(f, p, hp);
  return hp;
}

int64_t Hparams::n_kv_layers() const {
  int64_t n = mtp_kv ? 1 : 0;
  for (int64_t l = 0; l < n_layer; ++l) n += is_recurrent(l) ? 0 : 1;
  return n;
}

int64_t Hparams::n_recurrent_layers() const {
  int64_t n = 0;
  for (int64_t l = 0; l < n_layer; ++l) n += is_recurrent(l) ? 1 : 0;
  return n;
}

int64_t Hparams::kv_index(int64_t l) const {
  if (is_recurrent(l)) return -1;
  int64_t i = 0;
  for (int64_t j = 0; j < l; ++j) i += is_recurrent(j) ? 0 : 1;
  return i;
}

}  // namespace hearth::model
