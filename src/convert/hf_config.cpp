#include "convert/hf_config.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace hearth::convert {
namespace {

using nlohmann::json;

[[noreturn]] void bad(const HfConfig& c, const std::string& field, const std::string& msg,
                      ErrorKind kind = ErrorKind::kInvalidInput) {
  fail(kind, "convert", c.path + ": field '" + field + "': " + msg);
}

bool has(const json& j, const char* k) { return j.contains(k) && !j[k].is_null(); }

int64_t get_int(const HfConfig& c, const char* k) {
  if (!has(c.text, k)) bad(c, k, "missing", ErrorKind::kNotFound);
  if (!c.text[k].is_number_integer()) bad(c, k, "not an integer");
  const int64_t v = c.text[k].get<int64_t>();
  if (v <= 0) bad(c, k, "must be positive, got " + std::to_string(v));
  return v;
}
int64_t opt_int(const HfConfig& c, const char* k, int64_t def) { return has(c.text, k) ? get_int(c, k) : def; }
bool opt_bool(const HfConfig& c, const char* k, bool def) {
  if (!has(c.text, k)) return def;
  if (!c.text[k].is_boolean()) bad(c, k, "not true or false");
  return c.text[k].get<bool>();
}
double opt_num(const HfConfig& c, const json& j, const char* k, double def) {
  if (!has(j, k)) return def;
  if (!j[k].is_number()) bad(c, k, "not a number");
  return j[k].get<double>();
}

}  // namespace

HfConfig read_hf_config(const std::string& dir) {
  HfConfig c;
  c.path = dir + "/config.json";
  std::ifstream in(c.path, std::ios::binary);
  if (!in) fail(ErrorKind::kNotFound, "convert", c.path + ": cannot open (an HF model folder needs config.json)");
  std::stringstream ss;
  ss << in.rdbuf();
  json top;
  try {
    top = json::parse(ss.str());
  } catch (const json::exception& e) {
    fail(ErrorKind::kInvalidInput, "convert", c.path + ": not valid JSON: " + e.what());
  }
  if (!top.is_object()) fail(ErrorKind::kInvalidInput, "convert", c.path + ": not a JSON object");
  if (!top.contains("model_type") || !top["model_type"].is_string()) bad(c, "model_type", "missing or not a string", ErrorKind::kNotFound);
  c.model_type = top["model_type"].get<std::string>();
  c.text = top;
  if (top.contains("text_config") && top["text_config"].is_object()) {
    for (auto& [k, v] : top["text_config"].items()) c.text[k] = v;
  }
  c.has_vision = top.contains("vision_config") && !top["vision_config"].is_null();

  const std::string& mt = c.model_type;
  if (mt == "llama") c.family = Family::kLlama, c.arch = "llama";
  else if (mt == "qwen2") c.family = Family::kQwen2, c.arch = "qwen2";
  else if (mt == "qwen3") c.family = Family::kQwen3, c.arch = "qwen3";
  else if (mt == "qwen3_5" || mt == "qwen3_5_text") c.family = Family::kQwen35, c.arch = "qwen35";
  else if (mt == "qwen3_5_moe" || mt == "qwen3_5_moe_text") c.family = Family::kQwen35Moe, c.arch = "qwen35moe";
  else if (mt == "qwen3_next") c.family = Family::kQwen3Next, c.arch = "qwen3next";
  else
    bad(c, "model_type",
        "'" + mt + "' is not supported (supported: llama, qwen2, qwen3, qwen3_5, qwen3_5_text, qwen3_5_moe, "
        "qwen3_5_moe_text, qwen3_next)",
        ErrorKind::kUnsupported);

  c.hidden = get_int(c, "hidden_size");
  c.n_layer = get_int(c, "num_hidden_layers");
  c.n_head = get_int(c, "num_attention_heads");
  c.n_head_kv = opt_int(c, "num_key_value_heads", c.n_head);
  c.vocab = get_int(c, "vocab_size");
  c.head_dim = opt_int(c, "head_dim", 0);
  if (c.head_dim == 0) {
    if (c.hidden % c.n_head != 0) bad(c, "num_attention_heads", "does not divide hidden_size and there is no head_dim");
    c.head_dim = c.hidden / c.n_head;
  }
  if (c.n_head % c.n_head_kv != 0) bad(c, "num_key_value_heads", "must divide num_attention_heads");
  c.ff = opt_int(c, "intermediate_size", 0);
  c.n_ctx = opt_int(c, "max_position_embeddings", 0);
  c.rms_eps = opt_num(c, c.text, "rms_norm_eps", 1e-6);
  const json rope = has(c.text, "rope_parameters") ? c.text["rope_parameters"] : json::object();
  c.rope_theta = opt_num(c, rope, "rope_theta", opt_num(c, c.text, "rope_theta", 10000.0));
  c.partial_rotary = opt_num(c, rope, "partial_rotary_factor",
                             opt_num(c, c.text, "partial_rotary_factor", c.hybrid() ? 0.25 : 1.0));
  c.tied = opt_bool(c, "tie_word_embeddings", c.tied);
  if (c.family != Family::kQwen35Moe && c.family != Family::kQwen3Next && c.ff == 0)
    bad(c, "intermediate_size", "missing", ErrorKind::kNotFound);

  if (c.hybrid()) {
    c.lin_k_heads = get_int(c, "linear_num_key_heads");
    c.lin_v_heads = get_int(c, "linear_num_value_heads");
    c.lin_k_dim = get_int(c, "linear_key_head_dim");
    c.lin_v_dim = get_int(c, "linear_value_head_dim");
    c.conv_kernel = get_int(c, "linear_conv_kernel_dim");
    if (c.lin_v_heads % c.lin_k_heads != 0) bad(c, "linear_num_value_heads", "must be a multiple of linear_num_key_heads");
    int64_t interval = opt_int(c, "full_attention_interval", 0);
    if (has(c.text, "layer_types")) {
      const json& lt = c.text["layer_types"];
      if (!lt.is_array() || static_cast<int64_t>(lt.size()) != c.n_layer)
        bad(c, "layer_types", "must be an array of num_hidden_layers (" + std::to_string(c.n_layer) + ") strings");
      for (size_t i = 0; i < lt.size(); ++i) {
        const std::string t = lt[i].is_string() ? lt[i].get<std::string>() : "";
        if (t == "linear_attention") c.recurrent.push_back(true);
        else if (t == "full_attention") c.recurrent.push_back(false);
        else bad(c, "layer_types", "entry " + std::to_string(i) + " is not 'linear_attention' or 'full_attention'");
      }
      if (interval == 0) {  // the smallest period n with layer i full iff (i+1)%n == 0, if any
        for (int64_t n = 1; n <= c.n_layer + 1 && interval == 0; ++n) {
          bool ok = true;
          for (int64_t i = 0; i < c.n_layer && ok; ++i) ok = c.recurrent[i] == ((i + 1) % n != 0);
          if (ok) interval = n;
        }
        if (interval == 0) interval = 4;
      }
    } else {
      if (interval == 0) interval = 4;
      for (int64_t i = 0; i < c.n_layer; ++i) c.recurrent.push_back((i + 1) % interval != 0);
    }
    c.full_attention_interval = interval;
    for (int64_t i = 0; i < c.n_layer; ++i)
      if (c.recurrent[i] != ((i + 1) % interval != 0)) c.recurrent_is_interval = false;
    if (c.family != Family::kQwen3Next) {
      c.mrope_sections = {11, 11, 10, 0};
      if (has(rope, "mrope_section")) {
        const json& ms = rope["mrope_section"];
        if (!ms.is_array() || ms.size() > 4) bad(c, "rope_parameters.mrope_section", "must be an array of at most 4 integers");
        c.mrope_sections.assign(4, 0);
        for (size_t i = 0; i < ms.size(); ++i) {
          if (!ms[i].is_number_integer() || ms[i].get<int64_t>() < 0 || ms[i].get<int64_t>() > 1024) {
            bad(c, "rope_parameters.mrope_section", "entry " + std::to_string(i) + " is not an integer in 0..1024");
          }
          c.mrope_sections[i] = ms[i].get<int32_t>();
        }
      }
    }
  }
  if (c.moe()) {
    c.n_expert = get_int(c, "num_experts");
    c.n_expert_used = get_int(c, "num_experts_per_tok");
    c.expert_ff = get_int(c, "moe_intermediate_size");
    c.shared_ff = opt_int(c, "shared_expert_intermediate_size", 0);
    if (c.family == Family::kQwen3Next) {
      if (opt_int(c, "decoder_sparse_step", 1) != 1)
        bad(c, "decoder_sparse_step", "only 1 (every layer MoE) is supported", ErrorKind::kUnsupported);
      if (has(c.text, "mlp_only_layers") &&
          (!c.text["mlp_only_layers"].is_array() || !c.text["mlp_only_layers"].empty()))
        bad(c, "mlp_only_layers", "dense layers in a Qwen3-Next model are not supported", ErrorKind::kUnsupported);
    }
  }
  return c;
}

void write_hparams(const HfConfig& c, gguf::Writer& w) {
  const std::string p = c.arch + ".";
  auto u32 = [&](const std::string& k, int64_t v) { w.set_u32(p + k, static_cast<uint32_t>(v)); };
  w.set_string("general.architecture", c.arch);
  if (c.family == Family::kLlama) u32("vocab_size", c.vocab);
  if (c.n_ctx > 0) u32("context_length", c.n_ctx);
  u32("embedding_length", c.hidden);
  if (c.ff > 0) u32("feed_forward_length", c.ff);
  u32("block_count", c.n_layer + c.n_mtp);
  if (c.n_mtp > 0) u32("nextn_predict_layers", c.n_mtp);
  u32("attention.head_count", c.n_head);
  u32("attention.head_count_kv", c.n_head_kv);
  w.set_f32(p + "rope.freq_base", static_cast<float>(c.rope_theta));
  w.set_f32(p + "attention.layer_norm_rms_epsilon", static_cast<float>(c.rms_eps));
  if (c.text.contains("head_dim") && !c.text["head_dim"].is_null()) {
    u32("attention.key_length", c.head_dim);
    u32("attention.value_length", c.head_dim);
  }
  if (c.family == Family::kLlama) u32("rope.dimension_count", c.head_dim);
  if (c.moe()) {
    u32("expert_count", c.n_expert);
    u32("expert_used_count", c.n_expert_used);
    u32("expert_feed_forward_length", c.expert_ff);
    if (c.shared_ff > 0) u32("expert_shared_feed_forward_length", c.shared_ff);
  }
  if (c.hybrid()) {
    u32("ssm.conv_kernel", c.conv_kernel);
    u32("ssm.state_size", c.lin_k_dim);
    u32("ssm.group_count", c.lin_k_heads);
    u32("ssm.time_step_rank", c.lin_v_heads);
    u32("ssm.inner_size", c.lin_v_dim * c.lin_v_heads);
    u32("full_attention_interval", c.full_attention_interval);
    u32("rope.dimension_count", static_cast<int64_t>(static_cast<double>(c.head_dim) * c.partial_rotary));
    if (!c.mrope_sections.empty()) w.set_array(p + "rope.dimension_sections", c.mrope_sections);
    if (!c.recurrent_is_interval) {
      std::vector<gguf::Value> flags;
      for (bool r : c.recurrent) flags.push_back(gguf::make_bool(r));
      w.set_value(p + "attention.recurrent_layers", gguf::make_array(gguf::ValueType::BOOL, std::move(flags)));
    }
  }
}

}  // namespace hearth::convert
