#include "convert/hf_tensors.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/half.h"

namespace hearth::convert {
namespace fs = std::filesystem;
using safetensors::DType;

namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string o = "[";
  for (size_t i = 0; i < s.size(); ++i) o += (i ? ", " : "") + std::to_string(s[i]);
  return o + "]";
}

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }
bool ends_with(const std::string& s, const std::string& p) {
  return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}

}  // namespace

std::vector<float> tensor_to_f32(const safetensors::File& file, const safetensors::TensorInfo& t) {
  const int64_t n = t.numel();
  std::vector<float> out(static_cast<size_t>(n));
  switch (t.dtype) {
    case DType::kF32:
      std::memcpy(out.data(), t.data, static_cast<size_t>(n) * 4);
      break;
    case DType::kF16:
    case DType::kBF16: {
      std::vector<uint16_t> tmp(static_cast<size_t>(n));
      std::memcpy(tmp.data(), t.data, static_cast<size_t>(n) * 2);
      if (t.dtype == DType::kF16) f16_to_f32_row(tmp.data(), out.data(), n);
      else bf16_to_f32_row(tmp.data(), out.data(), n);
      break;
    }
    case DType::kF64:
      for (int64_t i = 0; i < n; ++i) {
        double d;
        std::memcpy(&d, t.data + 8 * i, 8);
        out[static_cast<size_t>(i)] = static_cast<float>(d);
      }
      break;
    default:
      fail(ErrorKind::kUnsupported, "convert",
           file.label() + ": tensor '" + t.name + "' has dtype " + safetensors::dtype_name(t.dtype) +
               "; only F32, F16, BF16 and F64 weights can be converted");
  }
  return out;
}

HfCheckpoint::HfCheckpoint(const std::string& dir) : dir_(dir) {
  std::vector<std::string> paths;
  const std::string index = dir + "/model.safetensors.index.json";
  if (fs::exists(index)) {
    std::ifstream in(index, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(ss.str());
    } catch (const nlohmann::json::exception& e) {
      fail(ErrorKind::kInvalidInput, "convert", index + ": not valid JSON: " + e.what());
    }
    if (!j.contains("weight_map") || !j["weight_map"].is_object())
      fail(ErrorKind::kInvalidInput, "convert", index + ": no \"weight_map\" object");
    std::set<std::string> shards;
    for (auto& [k, v] : j["weight_map"].items()) {
      if (!v.is_string()) fail(ErrorKind::kInvalidInput, "convert", index + ": weight_map['" + k + "'] is not a file name");
      shards.insert(v.get<std::string>());
    }
    for (const auto& s : shards) paths.push_back(dir + "/" + s);
  } else {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().extension() == ".safetensors") paths.push_back(e.path().string());
    std::sort(paths.begin(), paths.end());
  }
  if (paths.empty()) fail(ErrorKind::kNotFound, "convert", dir + ": no *.safetensors weights in the folder");
  for (const auto& p : paths) {
    files_.push_back(std::make_unique<safetensors::File>(safetensors::File::open(p)));
    const safetensors::File* f = files_.back().get();
    for (const auto& t : f->tensors()) {
      if (!tensors_.emplace(t.name, Entry{f, &t}).second)
        fail(ErrorKind::kInvalidInput, "convert", p + ": tensor '" + t.name + "' also appears in another shard");
    }
  }
}

std::vector<int64_t> tiled_v_order(int64_t n_k, int64_t r, int64_t head_dim) {
  // new head position t*n_k + g holds old head g*r + t.
  std::vector<int64_t> perm(static_cast<size_t>(n_k * r * head_dim));
  for (int64_t g = 0; g < n_k; ++g)
    for (int64_t t = 0; t < r; ++t)
      for (int64_t d = 0; d < head_dim; ++d)
        perm[static_cast<size_t>((t * n_k + g) * head_dim + d)] = (g * r + t) * head_dim + d;
  return perm;
}

namespace {

// HF rows [row0, row0 + perm.size()) of a [rows, cols] matrix permuted: new row i = old row perm[i].
void permute_rows(std::vector<float>& m, int64_t cols, int64_t row0, const std::vector<int64_t>& perm) {
  std::vector<float> seg(perm.size() * static_cast<size_t>(cols));
  for (size_t i = 0; i < perm.size(); ++i)
    std::memcpy(&seg[i * cols], &m[(row0 + perm[i]) * cols], static_cast<size_t>(cols) * 4);
  std::memcpy(&m[row0 * cols], seg.data(), seg.size() * 4);
}
// Columns [0, perm.size()) of a [rows, cols] matrix permuted: new col j = old col perm[j].
void permute_cols(std::vector<float>& m, int64_t rows, int64_t cols, const std::vector<int64_t>& perm) {
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    float* p = &m[r * cols];
    for (int64_t j = 0; j < cols; ++j) row[j] = p[perm[j]];
    std::memcpy(p, row.data(), static_cast<size_t>(cols) * 4);
  }
}

class Converter {
 public:
  Converter(const HfConfig& c, const HfCheckpoint& k, const std::function<void(OutTensor&&)>& emit)
      : c_(c), k_(k), emit_(emit) {}

  ConvertLog run() {
    index_names();
    emit("token_embd.weight", need("embed_tokens.weight", {c_.vocab, c_.hidden}), {});
    for (int64_t i = 0; i < c_.n_layer; ++i) layer(i);
    mtp_blocks();
    emit("output_norm.weight", need("norm.weight", {c_.hidden}), {.plus_one = c_.hybrid()});
    if (!c_.tied) {
      emit("output.weight", need("lm_head.weight", {c_.vocab, c_.hidden}), {});
    } else {
      take("lm_head.weight");  // a tied checkpoint may still store it; llama.cpp drops it
    }
    for (const auto& [norm, src] : names_) {
      if (!used_.count(norm))
        fail(ErrorKind::kUnsupported, "convert",
             src.file->label() + ": tensor '" + src.info->name + "' is not part of a " + c_.arch +
                 " model as config.json describes it (unknown name; llama.cpp's converter would refuse it too)");
    }
    return log_;
  }

 private:
  struct Src {
    std::string norm;  // the name without its prefix
    const safetensors::File* file = nullptr;
    const safetensors::TensorInfo* info = nullptr;
    std::vector<int64_t> shape;
    std::vector<float> data;
    DType dtype = DType::kF32;
  };
  struct Opt {
    bool plus_one = false;
    bool force_f32 = false;
  };

  void index_names() {
    for (const auto& [name, e] : k_.tensors()) {
      std::string n = name;
      if (starts_with(n, "model.visual.") || starts_with(n, "visual.")) {
        ++log_.skipped_vision;
        continue;
      }
      if (starts_with(n, "mtp.") || starts_with(n, "model.mtp.")) {
        // Kept under their own name (converted by mtp_blocks); skipped where the
        // conversion has no MTP blocks (a family without them).
        if (c_.n_mtp > 0) names_.emplace(starts_with(n, "model.") ? n.substr(6) : n, e);
        continue;
      }
      if (ends_with(n, "rotary_emb.inv_freq")) continue;
      if (starts_with(n, "model.language_model.")) n = n.substr(21), prefix_ = "model.language_model.";
      else if (starts_with(n, "model.")) n = n.substr(6);
      names_.emplace(n, e);
    }
  }

  std::string full_name(const std::string& norm) const {
    return norm == "lm_head.weight" || starts_with(norm, "mtp.") ? norm : prefix_ + norm;
  }

  bool has(const std::string& norm) const { return names_.count(norm) != 0; }

  std::optional<Src> take(const std::string& norm) {
    auto it = names_.find(norm);
    if (it == names_.end()) return std::nullopt;
    used_.insert(norm);
    Src s;
    s.norm = norm;
    s.file = it->second.file;
    s.info = it->second.info;
    s.shape = s.info->shape;
    s.dtype = s.info->dtype;
    s.data = tensor_to_f32(*s.file, *s.info);
    return s;
  }

  Src need(const std::string& norm, const std::vector<int64_t>& shape) {
    auto s = take(norm);
    if (!s)
      fail(ErrorKind::kNotFound, "convert",
           k_.dir() + ": tensor '" + full_name(norm) + "' is missing (config.json describes a " + c_.arch +
               " model that has it)");
    check_shape(*s, shape);
    return std::move(*s);
  }

  void check_shape(const Src& s, std::vector<int64_t> want) {
    if (s.shape != want)
      fail(ErrorKind::kInvalidInput, "convert",
           s.file->label() + ": tensor '" + s.info->name + "' has shape " + shape_str(s.shape) +
               " but config.json implies " + shape_str(want));
  }

  void emit(const std::string& name, Src s, Opt o) {
    OutTensor t;
    t.name = name;
    t.src_dtype = s.dtype;
    // llama.cpp squeezes (drops size-1 dims) and reverses the HF shape for ggml order.
    for (auto it = s.shape.rbegin(); it != s.shape.rend(); ++it)
      if (*it != 1) t.shape.push_back(static_cast<uint64_t>(*it));
    if (t.shape.empty()) t.shape.push_back(1);
    if (o.plus_one)
      for (float& v : s.data) v += 1.0f;
    t.data = std::move(s.data);
    t.force_f32 = o.force_f32 || t.shape.size() <= 1 || ends_with(name, "_norm.weight") || !ends_with(name, ".weight") ||
                  ends_with(name, "ffn_gate_inp.weight") || ends_with(name, "ffn_gate_inp_shexp.weight") ||
                  ends_with(name, "ssm_conv1d.weight");
    emit_(std::move(t));
  }

  // A tensor built from others (qkvz split, expert stacks): its dtype is the first source's.
  void emit_raw(const std::string& name, std::vector<int64_t> hf_shape, std::vector<float> data, DType dt) {
    Src s;
    s.shape = std::move(hf_shape);
    s.data = std::move(data);
    s.dtype = dt;
    emit(name, std::move(s), {});
  }

  // The MTP blocks as llama.cpp writes them: block n_layer + i is a full-attention
  // decoder layer (mtp.layers.i.*) plus blk.N.nextn.{eh_proj, enorm, hnorm,
  // shared_head_norm} from mtp.fc and the three MTP norms (norms + 1, as every model norm).
  void mtp_blocks() {
    const int64_t H = c_.hidden;
    if (c_.n_mtp > 1)
      fail(ErrorKind::kUnsupported, "convert",
           k_.dir() + ": " + std::to_string(c_.n_mtp) + " multi-token-prediction layers (mtp.layers.*); Qwen3.5 has one, "
           "and only one is supported");
    for (int64_t i = 0; i < c_.n_mtp; ++i) {
      const std::string gg = "blk." + std::to_string(c_.n_layer + i) + ".";
      const size_t before = used_.size();
      layer(c_.n_layer + i, "mtp.layers." + std::to_string(i) + ".", false);
      if (i == 0) {
        emit(gg + "nextn.eh_proj.weight", need("mtp.fc.weight", {H, 2 * H}), {});
        emit(gg + "nextn.enorm.weight", need("mtp.pre_fc_norm_embedding.weight", {H}), {.plus_one = true});
        emit(gg + "nextn.hnorm.weight", need("mtp.pre_fc_norm_hidden.weight", {H}), {.plus_one = true});
        emit(gg + "nextn.shared_head_norm.weight", need("mtp.norm.weight", {H}), {.plus_one = true});
      }
      log_.mtp_tensors += used_.size() - before;
    }
  }

  void layer(int64_t i) { layer(i, "layers." + std::to_string(i) + ".", c_.hybrid() && c_.recurrent[i]); }
  void layer(int64_t i, const std::string& hf, bool recurrent) {
    const std::string gg = "blk." + std::to_string(i) + ".";
    const int64_t H = c_.hidden;
    emit(gg + "attn_norm.weight", need(hf + "input_layernorm.weight", {H}), {.plus_one = c_.hybrid()});
    if (recurrent) {
      linear_attn(hf + "linear_attn.", gg);
    } else {
      attention(hf + "self_attn.", gg);
    }
    emit(gg + (c_.hybrid() ? "post_attention_norm.weight" : "ffn_norm.weight"),
         need(hf + "post_attention_layernorm.weight", {H}), {.plus_one = c_.hybrid()});
    if (c_.moe()) moe(hf + "mlp.", gg);
    else dense_ffn(hf + "mlp.", gg);
  }

  void attention(const std::string& hf, const std::string& gg) {
    const int64_t H = c_.hidden, hd = c_.head_dim;
    const int64_t q_rows = c_.n_head * hd * (c_.hybrid() ? 2 : 1), kv_rows = c_.n_head_kv * hd;
    Src q = need(hf + "q_proj.weight", {q_rows, H});
    Src k = need(hf + "k_proj.weight", {kv_rows, H});
    if (c_.family == Family::kLlama) {  // llama.cpp's LlamaModel.permute for the non-NeoX rope
      llama_permute(q, c_.n_head);
      llama_permute(k, c_.n_head_kv);
    }
    emit(gg + "attn_q.weight", std::move(q), {});
    emit(gg + "attn_k.weight", std::move(k), {});
    emit(gg + "attn_v.weight", need(hf + "v_proj.weight", {kv_rows, H}), {});
    emit(gg + "attn_output.weight", need(hf + "o_proj.weight", {H, c_.n_head * hd}), {});
    for (const char* p : {"q", "k", "v"}) {
      if (auto b = take(hf + p + "_proj.bias")) {
        check_shape(*b, {std::string(p) == "q" ? q_rows : kv_rows});
        emit(gg + "attn_" + p + ".bias", std::move(*b), {});
      }
    }
    if (auto b = take(hf + "o_proj.bias")) {
      check_shape(*b, {H});
      emit(gg + "attn_output.bias", std::move(*b), {});
    }
    const bool norms = c_.hybrid() || c_.family == Family::kQwen3;
    if (norms) {
      emit(gg + "attn_q_norm.weight", need(hf + "q_norm.weight", {hd}), {.plus_one = c_.hybrid()});
      emit(gg + "attn_k_norm.weight", need(hf + "k_norm.weight", {hd}), {.plus_one = c_.hybrid()});
    }
  }

  void llama_permute(Src& s, int64_t n_head) {
    const int64_t rows = s.shape[0], cols = s.shape[1], hd = rows / n_head, half = hd / 2;
    std::vector<int64_t> perm(static_cast<size_t>(rows));
    for (int64_t h = 0; h < n_head; ++h)
      for (int64_t i = 0; i < half; ++i)
        for (int64_t j = 0; j < 2; ++j) perm[h * hd + i * 2 + j] = h * hd + j * half + i;
    permute_rows(s.data, cols, 0, perm);
  }

  void linear_attn(const std::string& hf, const std::string& gg) {
    const int64_t H = c_.hidden, Hk = c_.lin_k_heads, Hv = c_.lin_v_heads, dk = c_.lin_k_dim, dv = c_.lin_v_dim;
    const int64_t r = Hv / Hk, key_dim = Hk * dk, value_dim = Hv * dv, conv_dim = 2 * key_dim + value_dim;
    const bool reorder = c_.family != Family::kQwen3Next && Hk != Hv;
    const auto pv = tiled_v_order(Hk, r, dv), p1 = tiled_v_order(Hk, r, 1);

    if (c_.family == Family::kQwen3Next) {
      // in_proj_qkvz rows per k-head g: [q(dk), k(dk), v(r*dv), z(r*dv)] -> [Q | K | V] and Z.
      Src s = need(hf + "in_proj_qkvz.weight", {conv_dim + value_dim, H});
      const int64_t per = 2 * dk + 2 * r * dv;
      std::vector<float> qkv(static_cast<size_t>(conv_dim * H)), z(static_cast<size_t>(value_dim * H));
      auto copy_rows = [&](std::vector<float>& dst, int64_t dst_row, int64_t src_row, int64_t n) {
        std::memcpy(&dst[dst_row * H], &s.data[src_row * H], static_cast<size_t>(n * H) * 4);
      };
      for (int64_t g = 0; g < Hk; ++g) {
        const int64_t base = g * per;
        copy_rows(qkv, g * dk, base, dk);
        copy_rows(qkv, key_dim + g * dk, base + dk, dk);
        copy_rows(qkv, 2 * key_dim + g * r * dv, base + 2 * dk, r * dv);
        copy_rows(z, g * r * dv, base + 2 * dk + r * dv, r * dv);
      }
      emit_raw(gg + "attn_qkv.weight", {conv_dim, H}, std::move(qkv), s.dtype);
      emit_raw(gg + "attn_gate.weight", {value_dim, H}, std::move(z), s.dtype);
      emit(gg + "ssm_ba.weight", need(hf + "in_proj_ba.weight", {2 * Hv, H}), {});
    } else {
      Src qkv = need(hf + "in_proj_qkv.weight", {conv_dim, H});
      if (reorder) permute_rows(qkv.data, H, 2 * key_dim, pv);
      emit(gg + "attn_qkv.weight", std::move(qkv), {});
      Src z = need(hf + "in_proj_z.weight", {value_dim, H});
      if (reorder) permute_rows(z.data, H, 0, pv);
      emit(gg + "attn_gate.weight", std::move(z), {});
      Src b = need(hf + "in_proj_b.weight", {Hv, H});
      Src a = need(hf + "in_proj_a.weight", {Hv, H});
      if (reorder) permute_rows(b.data, H, 0, p1), permute_rows(a.data, H, 0, p1);
      emit(gg + "ssm_beta.weight", std::move(b), {});
      emit(gg + "ssm_alpha.weight", std::move(a), {});
    }
    Src conv = need(hf + "conv1d.weight", {conv_dim, 1, c_.conv_kernel});
    if (reorder) permute_rows(conv.data, c_.conv_kernel, 2 * key_dim, pv);
    emit(gg + "ssm_conv1d.weight", std::move(conv), {});
    Src dt = need(hf + "dt_bias", {Hv});
    if (reorder) permute_rows(dt.data, 1, 0, p1);
    emit(gg + "ssm_dt.bias", std::move(dt), {});
    Src a_log = need(hf + "A_log", {Hv});
    for (float& v : a_log.data) v = -std::exp(v);
    if (reorder) permute_rows(a_log.data, 1, 0, p1);
    emit(gg + "ssm_a", std::move(a_log), {});
    emit(gg + "ssm_norm.weight", need(hf + "norm.weight", {dv}), {});
    Src out = need(hf + "out_proj.weight", {H, value_dim});
    if (reorder) permute_cols(out.data, H, value_dim, pv);
    emit(gg + "ssm_out.weight", std::move(out), {});
  }

  void dense_ffn(const std::string& hf, const std::string& gg) {
    const int64_t H = c_.hidden, F = c_.ff;
    emit(gg + "ffn_gate.weight", need(hf + "gate_proj.weight", {F, H}), {});
    emit(gg + "ffn_up.weight", need(hf + "up_proj.weight", {F, H}), {});
    emit(gg + "ffn_down.weight", need(hf + "down_proj.weight", {H, F}), {});
  }

  void moe(const std::string& hf, const std::string& gg) {
    const int64_t H = c_.hidden, E = c_.n_expert, F = c_.expert_ff;
    emit(gg + "ffn_gate_inp.weight", need(hf + "gate.weight", {E, H}), {});
    const std::string fused_gu = has(hf + "experts.gate_up_proj") ? hf + "experts.gate_up_proj"
                                 : has(hf + "experts.gate_up_proj.weight") ? hf + "experts.gate_up_proj.weight"
                                                                            : "";
    if (!fused_gu.empty()) {
      Src gu = need(fused_gu, {E, 2 * F, H});
      std::vector<float> gate(static_cast<size_t>(E * F * H)), up(gate.size());
      for (int64_t e = 0; e < E; ++e) {
        std::memcpy(&gate[e * F * H], &gu.data[e * 2 * F * H], static_cast<size_t>(F * H) * 4);
        std::memcpy(&up[e * F * H], &gu.data[(e * 2 * F + F) * H], static_cast<size_t>(F * H) * 4);
      }
      emit_raw(gg + "ffn_gate_exps.weight", {E, F, H}, std::move(gate), gu.dtype);
      emit_raw(gg + "ffn_up_exps.weight", {E, F, H}, std::move(up), gu.dtype);
      const std::string down = has(hf + "experts.down_proj") ? hf + "experts.down_proj" : hf + "experts.down_proj.weight";
      Src d = need(down, {E, H, F});
      emit(gg + "ffn_down_exps.weight", std::move(d), {});
    } else {
      for (const char* w : {"gate_proj", "up_proj", "down_proj"}) {
        const bool down = std::string(w) == "down_proj";
        const std::vector<int64_t> shape = down ? std::vector<int64_t>{H, F} : std::vector<int64_t>{F, H};
        std::vector<float> all;
        all.reserve(static_cast<size_t>(E * F * H));
        DType dt = DType::kF32;
        for (int64_t e = 0; e < E; ++e) {
          Src s = need(hf + "experts." + std::to_string(e) + "." + w + ".weight", shape);
          if (e == 0) dt = s.dtype;
          all.insert(all.end(), s.data.begin(), s.data.end());
        }
        const std::string name = down ? "ffn_down_exps.weight" : std::string(w) == "gate_proj" ? "ffn_gate_exps.weight" : "ffn_up_exps.weight";
        emit_raw(gg + name, {E, shape[0], shape[1]}, std::move(all), dt);
      }
    }
    if (c_.shared_ff > 0) {
      const int64_t Fs = c_.shared_ff;
      emit(gg + "ffn_gate_inp_shexp.weight", need(hf + "shared_expert_gate.weight", {1, H}), {});
      emit(gg + "ffn_gate_shexp.weight", need(hf + "shared_expert.gate_proj.weight", {Fs, H}), {});
      emit(gg + "ffn_up_shexp.weight", need(hf + "shared_expert.up_proj.weight", {Fs, H}), {});
      emit(gg + "ffn_down_shexp.weight", need(hf + "shared_expert.down_proj.weight", {H, Fs}), {});
    }
  }

  const HfConfig& c_;
  const HfCheckpoint& k_;
  const std::function<void(OutTensor&&)>& emit_;
  std::map<std::string, HfCheckpoint::Entry> names_;
  std::set<std::string> used_;
  std::string prefix_ = "model.";
  ConvertLog log_;
};

}  // namespace

int64_t count_mtp_layers(const HfConfig& cfg, const HfCheckpoint& ckpt) {
  if (!cfg.hybrid()) return 0;
  int64_t n = 0;
  for (const auto& [name, e] : ckpt.tensors()) {
    std::string_view s = name;
    if (s.starts_with("model.")) s.remove_prefix(6);
    if (!s.starts_with("mtp.layers.")) continue;
    s.remove_prefix(11);
    int64_t i = 0;
    size_t k = 0;
    for (; k < s.size() && k < 4 && s[k] >= '0' && s[k] <= '9'; ++k) i = i * 10 + (s[k] - '0');
    if (k > 0 && k < s.size() && s[k] == '.') n = std::max(n, i + 1);
  }
  return n;
}

ConvertLog convert_tensors(const HfConfig& cfg, const HfCheckpoint& ckpt, const std::function<void(OutTensor&&)>& emit) {
  return Converter(cfg, ckpt, emit).run();
}

}  // namespace hearth::convert
