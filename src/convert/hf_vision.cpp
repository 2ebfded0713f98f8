#include "convert/hf_vision.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "convert/hf_tensors.h"
#include "core/error.h"
#include "quant/dequant_ref.h"
#include "vision/preprocess_config.h"

namespace hearth::convert {
namespace fs = std::filesystem;
using json = nlohmann::json;
using safetensors::DType;

namespace {

json read_json(const std::string& path, bool required) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (!required) return json();
    fail(ErrorKind::kNotFound, "convert", path + ": cannot open");
  }
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    json j = json::parse(ss.str());
    if (!j.is_object()) fail(ErrorKind::kInvalidInput, "convert", path + ": not a JSON object");
    return j;
  } catch (const json::exception& e) {
    fail(ErrorKind::kInvalidInput, "convert", path + ": not valid JSON: " + e.what());
  }
}

int64_t int_field(const json& obj, const std::string& path, const std::string& key, std::optional<int64_t> def) {
  if (!obj.contains(key) || obj[key].is_null()) {
    if (def) return *def;
    fail(ErrorKind::kInvalidInput, "convert", path + ": vision_config." + key + " is missing");
  }
  if (!obj[key].is_number_integer() || obj[key].get<int64_t>() <= 0)
    fail(ErrorKind::kInvalidInput, "convert", path + ": vision_config." + key + " must be a positive integer");
  return obj[key].get<int64_t>();
}

// The HF name (model.visual.* or visual.*) -> llama.cpp's projector name, or "" when unknown.
std::string projector_name(const std::string& hf) {
  std::string n = hf;
  if (n.rfind("model.visual.", 0) == 0) n = n.substr(13);
  else if (n.rfind("visual.", 0) == 0) n = n.substr(7);
  else return "";
  static const std::pair<const char*, const char*> fixed[] = {
      {"patch_embed.proj.bias", "v.patch_embd.bias"}, {"pos_embed.weight", "v.position_embd.weight"},
      {"merger.norm.weight", "v.post_ln.weight"},     {"merger.norm.bias", "v.post_ln.bias"},
      {"merger.linear_fc1.weight", "mm.0.weight"},    {"merger.linear_fc1.bias", "mm.0.bias"},
      {"merger.linear_fc2.weight", "mm.2.weight"},    {"merger.linear_fc2.bias", "mm.2.bias"}};
  for (const auto& [a, b] : fixed)
    if (n == a) return b;
  if (n.rfind("blocks.", 0) != 0) return "";
  const size_t dot = n.find('.', 7);
  if (dot == std::string::npos) return "";
  const std::string idx = n.substr(7, dot - 7), rest = n.substr(dot + 1);
  static const std::pair<const char*, const char*> parts[] = {
      {"norm1.", "ln1."},        {"norm2.", "ln2."},          {"attn.qkv.", "attn_qkv."},
      {"attn.proj.", "attn_out."}, {"mlp.linear_fc1.", "ffn_up."}, {"mlp.linear_fc2.", "ffn_down."}};
  for (const auto& [a, b] : parts) {
    const std::string pa = a;
    if (rest.rfind(pa, 0) == 0) return "v.blk." + idx + "." + b + rest.substr(pa.size());
  }
  return "";
}

std::vector<uint64_t> ggml_shape(const std::vector<int64_t>& torch_shape) {
  return std::vector<uint64_t>(torch_shape.rbegin(), torch_shape.rend());
}

}  // namespace

bool hf_has_vision(const std::string& dir) {
  if (!is_hf_folder(dir)) return false;
  const json cfg = read_json(dir + "/config.json", false);
  if (!cfg.is_object() || !cfg.contains("vision_config") || !cfg["vision_config"].is_object()) return false;
  const HfCheckpoint ck(dir);
  for (const auto& [name, e] : ck.tensors())
    if (name.rfind("model.visual.", 0) == 0 || name.rfind("visual.", 0) == 0) return true;
  return false;
}

gguf::Writer hf_folder_to_projector(const std::string& dir, const ConvertOptions& opt, ConvertSummary* summary) {
  const std::string cpath = dir + "/config.json";
  const json cfg = read_json(cpath, true);
  if (!cfg.contains("vision_config") || !cfg["vision_config"].is_object())
    fail(ErrorKind::kNotFound, "convert", cpath + ": no vision_config (the model has no vision tower)");
  const json& vc = cfg["vision_config"];
  const int64_t depth = int_field(vc, cpath, "depth", std::nullopt);
  const int64_t hidden = int_field(vc, cpath, "hidden_size", std::nullopt);
  const int64_t ff = int_field(vc, cpath, "intermediate_size", std::nullopt);
  const int64_t heads = int_field(vc, cpath, "num_heads", std::nullopt);
  const int64_t patch = int_field(vc, cpath, "patch_size", 16);
  const int64_t temporal = int_field(vc, cpath, "temporal_patch_size", 2);
  const int64_t merge = int_field(vc, cpath, "spatial_merge_size", 2);
  const int64_t out_hidden = int_field(vc, cpath, "out_hidden_size", std::nullopt);
  const int64_t n_pos = int_field(vc, cpath, "num_position_embeddings", 2304);
  const int64_t channels = int_field(vc, cpath, "in_channels", 3);
  const std::string act = vc.value("hidden_act", std::string("gelu_pytorch_tanh"));
  if (act != "gelu_pytorch_tanh")
    fail(ErrorKind::kUnsupported, "convert", cpath + ": vision_config.hidden_act '" + act +
                                                 "' is not supported (Qwen3-VL / Qwen3.5 towers use gelu_pytorch_tanh)");
  if (vc.contains("deepstack_visual_indexes") && vc["deepstack_visual_indexes"].is_array() &&
      !vc["deepstack_visual_indexes"].empty())
    fail(ErrorKind::kUnsupported, "convert", cpath + ": vision_config.deepstack_visual_indexes: deepstack towers "
                                                     "(Qwen3-VL) are not supported; Qwen3.5's tower has none");
  if (temporal != 2 || channels != 3 || merge != 2)
    fail(ErrorKind::kUnsupported, "convert", cpath + ": vision towers with temporal_patch_size 2, 3 channels and "
                                                     "spatial_merge_size 2 only");
  const int64_t side = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(n_pos))));
  if (side * side != n_pos)
    fail(ErrorKind::kInvalidInput, "convert", cpath + ": vision_config.num_position_embeddings is not a square");
  double eps = 1e-6;
  const json& tc = cfg.contains("text_config") && cfg["text_config"].is_object() ? cfg["text_config"] : cfg;
  if (tc.contains("rms_norm_eps") && tc["rms_norm_eps"].is_number()) eps = tc["rms_norm_eps"].get<double>();

  gguf::Writer w;
  w.set_string("general.architecture", "clip");
  std::string name = fs::path(dir).lexically_normal().filename().string();
  if (name.empty()) name = fs::path(dir).lexically_normal().parent_path().filename().string();
  w.set_string("general.name", name + " (vision projector)");
  w.set_string("clip.projector_type", "qwen3vl_merger");
  w.set_bool("clip.has_vision_encoder", true);
  w.set_bool("clip.has_audio_encoder", false);
  w.set_bool("clip.use_gelu", true);
  w.set_u32("clip.vision.embedding_length", static_cast<uint32_t>(hidden));
  w.set_u32("clip.vision.feed_forward_length", static_cast<uint32_t>(ff));
  w.set_u32("clip.vision.block_count", static_cast<uint32_t>(depth));
  w.set_u32("clip.vision.attention.head_count", static_cast<uint32_t>(heads));
  w.set_f32("clip.vision.attention.layer_norm_epsilon", static_cast<float>(eps));
  w.set_u32("clip.vision.patch_size", static_cast<uint32_t>(patch));
  w.set_u32("clip.vision.image_size", static_cast<uint32_t>(side * patch));
  w.set_u32("clip.vision.projection_dim", static_cast<uint32_t>(out_hidden));
  w.set_u32("clip.vision.spatial_merge_size", static_cast<uint32_t>(merge));

  // The image processor's settings (preprocessor_config.json; Qwen3.5's own values when the
  // folder has none: patch 16, mean / std 0.5, 65536 .. 16777216 pixels).
  const std::string ppath = dir + "/preprocessor_config.json";
  const json pc = read_json(ppath, false);
  vision::PreprocessConfig pre;
  if (pc.is_object()) {
    pre = vision::parse_preprocess_config(pc, ppath);
    if (pre.patch_size != patch || pre.merge_size != merge || pre.temporal_patch_size != temporal)
      fail(ErrorKind::kInvalidInput, "convert", ppath + ": patch, merge or temporal patch size differs from config.json's vision_config");
    if (pre.rescale_factor != 1.0 / 255.0)
      fail(ErrorKind::kUnsupported, "convert", ppath + ": rescale_factor other than 1/255 (a projector file has no key for it)");
  }
  w.set_array("clip.vision.image_mean", std::vector<float>(pre.image_mean, pre.image_mean + 3));
  w.set_array("clip.vision.image_std", std::vector<float>(pre.image_std, pre.image_std + 3));
  w.set_u32("clip.vision.image_min_pixels", static_cast<uint32_t>(std::min<int64_t>(pre.min_pixels, UINT32_MAX)));
  w.set_u32("clip.vision.image_max_pixels", static_cast<uint32_t>(std::min<int64_t>(pre.max_pixels, UINT32_MAX)));
  w.set_u32("general.file_type", opt.type ? (*opt.type == GgmlType::F32 ? 0 : 1) : 1);

  ConvertSummary sum;
  auto add = [&](OutTensor&& t, bool matrix) {
    GgmlType type = GgmlType::F32;
    if (matrix) {
      if (opt.type) type = fit_type(*opt.type, t.shape[0]);
      else if (t.src_dtype == DType::kF16) type = GgmlType::F16;
      else if (t.src_dtype == DType::kBF16) type = can_dequantize(GgmlType::BF16) ? GgmlType::BF16 : GgmlType::F32;
    }
    const std::vector<uint8_t> bytes = encode_tensor(t, type);
    w.add_tensor(t.name, type, t.shape, bytes);
    ++sum.n_tensors;
    sum.tensor_bytes += bytes.size();
    ++sum.type_counts[std::string(ggml_type_name(type))];
  };
  const HfCheckpoint ck(dir);
  size_t n_found = 0;
  for (const auto& [hf, e] : ck.tensors()) {
    if (hf.rfind("model.visual.", 0) != 0 && hf.rfind("visual.", 0) != 0) continue;
    ++n_found;
    const std::vector<float> data = tensor_to_f32(*e.file, *e.info);
    const std::vector<int64_t>& s = e.info->shape;
    if (hf.ends_with("patch_embed.proj.weight")) {
      // [E, C, T, P, P] -> two [E, C, P, P] kernels, frame 0 then frame 1.
      if (s.size() != 5 || s[0] != hidden || s[1] != 3 || s[2] != 2 || s[3] != patch || s[4] != patch)
        fail(ErrorKind::kInvalidInput, "convert", e.file->label() + ": tensor '" + hf + "' has an unexpected shape");
      const int64_t pp = patch * patch;
      for (int t = 0; t < 2; ++t) {
        OutTensor o;
        o.name = t == 0 ? "v.patch_embd.weight" : "v.patch_embd.weight.1";
        o.shape = {static_cast<uint64_t>(patch), static_cast<uint64_t>(patch), 3, static_cast<uint64_t>(hidden)};
        o.src_dtype = e.info->dtype;
        o.data.resize(static_cast<size_t>(hidden * 3 * pp));
        for (int64_t oc = 0; oc < hidden * 3; ++oc)
          std::copy_n(&data[(oc * 2 + t) * pp], pp, &o.data[oc * pp]);
        add(std::move(o), true);
      }
      continue;
    }
    const std::string gname = projector_name(hf);
    if (gname.empty())
      fail(ErrorKind::kUnsupported, "convert", e.file->label() + ": vision tensor '" + hf +
                                                   "' is not part of a Qwen3.5 vision tower (unknown name)");
    OutTensor o;
    o.name = gname;
    o.shape = ggml_shape(s);
    o.src_dtype = e.info->dtype;
    o.data = data;
    const bool matrix = s.size() == 2 && gname != "v.position_embd.weight";
    add(std::move(o), matrix);
  }
  if (n_found == 0) fail(ErrorKind::kNotFound, "convert", dir + ": no model.visual.* tensors in the checkpoint");
  if (summary) *summary = sum;
  return w;
}

std::optional<gguf::File> open_projector(const std::string& model_path, const std::string& explicit_path) {
  if (!explicit_path.empty()) {
    if (is_hf_folder(explicit_path)) {
      gguf::Writer w = hf_folder_to_projector(explicit_path, ConvertOptions{.quiet = true});
      auto bytes = std::make_shared<const std::vector<uint8_t>>(std::move(w).take_bytes());
      return gguf::File::parse_owned(std::move(bytes), explicit_path);
    }
    return gguf::File::open(explicit_path);
  }
  if (is_hf_folder(model_path)) {
    if (!hf_has_vision(model_path)) return std::nullopt;
    gguf::Writer w = hf_folder_to_projector(model_path, ConvertOptions{.quiet = true});
    auto bytes = std::make_shared<const std::vector<uint8_t>>(std::move(w).take_bytes());
    return gguf::File::parse_owned(std::move(bytes), model_path + " (vision tower)");
  }
  // A GGUF file: a projector beside it, found by name. Never fatal: a model whose projector
  // cannot be told or read serves text (images are then refused), with a line saying why.
  std::error_code ec;
  const fs::path p(model_path);
  if (!fs::is_regular_file(p, ec)) return std::nullopt;
  const std::string stem = p.stem().string();
  std::vector<std::string> found, named;
  for (const auto& ent : fs::directory_iterator(p.parent_path().empty() ? fs::path(".") : p.parent_path(), ec)) {
    const std::string fn = ent.path().filename().string();
    std::string lower = fn;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower.find("mmproj") == std::string::npos || !lower.ends_with(".gguf") || ent.path() == p) continue;
    found.push_back(ent.path().string());
    if (!stem.empty() && fn.find(stem) != std::string::npos) named.push_back(ent.path().string());
  }
  std::string pick;
  if (named.size() == 1) pick = named[0];
  else if (named.empty() && found.size() == 1) pick = found[0];
  if (pick.empty()) {
    if (!found.empty()) {
      std::string list;
      for (const auto& f : found) list += "\n  " + f;
      std::fprintf(stderr, "hearth: %s: several projector files lie beside the model and none is named after it; "
                   "no vision (pick one with --mmproj):%s\n", model_path.c_str(), list.c_str());
    }
    return std::nullopt;
  }
  try {
    gguf::File f = gguf::File::open(pick);
    if (f.find_string("general.architecture").value_or("") != "clip")
      fail(ErrorKind::kInvalidInput, "vision", pick + ": not a projector (general.architecture is not 'clip')");
    return f;
  } catch (const Error& e) {
    std::fprintf(stderr, "hearth: %s: ignoring the projector beside it: %s (no vision; give one with --mmproj)\n",
                 model_path.c_str(), e.what());
    return std::nullopt;
  }
}

}  // namespace hearth::convert
