// src/convert on the committed tiny Qwen3.5 / Qwen3.5-MoE / Qwen3-Next fixtures
// (tests/data/qwen35/{dense,moe,next}: Hk=2, Hv=4, dk=16, dv=24, 8 layers, layers 3
// and 7 full attention): names, shapes and types of every tensor, the transforms
// checked value by value against the safetensors, metadata, every --type, and the
// errors a broken folder gives.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "convert/hf_import.h"
#include "convert/hf_tensors.h"
#include "convert/hf_tokenizer.h"
#include "core/error.h"
#include "format/gguf.h"
#include "format/safetensors.h"
#include "quant/dequant_ref.h"
#include "tokenizer/tokenizer.h"

namespace fs = std::filesystem;
using namespace hearth;

namespace {

const std::string kData = std::string(HEARTH_SOURCE_DIR) + "/tests/data/qwen35/";

struct Converted {
  gguf::File file;
  safetensors::File st;
};

Converted load(const std::string& name) {
  convert::ConvertOptions opt;
  opt.quiet = true;
  auto w = convert::hf_folder_to_gguf(kData + name, opt);
  auto bytes = std::make_shared<const std::vector<uint8_t>>(w.to_bytes());
  return {gguf::File::parse_owned(bytes, name), safetensors::File::open(kData + name + "/model.safetensors")};
}

std::vector<float> values(const gguf::TensorInfo& t) {
  std::vector<float> out(t.n_elements());
  dequantize_row_ref(t.type, t.data, out.data(), static_cast<int64_t>(out.size()));
  return out;
}
std::vector<float> hf(const safetensors::File& st, const std::string& name) {
  return convert::tensor_to_f32(st, st.get(name));
}
const gguf::TensorInfo& T(const gguf::File& f, const std::string& name) {
  const auto* t = f.find_tensor(name);
  if (!t) throw std::runtime_error("missing tensor " + name);
  return *t;
}
std::vector<uint64_t> S(std::initializer_list<uint64_t> s) { return s; }

// GGUF v-head h (tiled) holds HF v-head perm(h): Hk=2, r=2 -> [0, 2, 1, 3].
const int64_t kTiled[4] = {0, 2, 1, 3};

}  // namespace

TEST(ConvertQwen35, DenseNamesShapesTypesAndMetadata) {
  Converted c = load("dense");
  const auto& f = c.file;
  EXPECT_EQ(f.get_string("general.architecture"), "qwen35");
  EXPECT_EQ(f.get_int("qwen35.block_count"), 8);
  EXPECT_EQ(f.get_int("qwen35.embedding_length"), 64);
  EXPECT_EQ(f.get_int("qwen35.feed_forward_length"), 64);
  EXPECT_EQ(f.get_int("qwen35.attention.head_count"), 4);
  EXPECT_EQ(f.get_int("qwen35.attention.head_count_kv"), 2);
  EXPECT_EQ(f.get_int("qwen35.attention.key_length"), 32);
  EXPECT_EQ(f.get_int("qwen35.attention.value_length"), 32);
  EXPECT_EQ(f.get_int("qwen35.rope.dimension_count"), 16);
  EXPECT_EQ(f.get_int("qwen35.ssm.conv_kernel"), 4);
  EXPECT_EQ(f.get_int("qwen35.ssm.state_size"), 16);
  EXPECT_EQ(f.get_int("qwen35.ssm.group_count"), 2);
  EXPECT_EQ(f.get_int("qwen35.ssm.time_step_rank"), 4);
  EXPECT_EQ(f.get_int("qwen35.ssm.inner_size"), 96);
  EXPECT_EQ(f.get_int("qwen35.full_attention_interval"), 4);
  EXPECT_EQ(f.find("qwen35.attention.recurrent_layers"), nullptr);  // plain interval pattern
  EXPECT_NEAR(f.get_float("qwen35.rope.freq_base"), 10000.0, 1e-3);
  EXPECT_NEAR(f.get_float("qwen35.attention.layer_norm_rms_epsilon"), 1e-6, 1e-9);
  const auto& secs = f.find("qwen35.rope.dimension_sections")->as_array("s");
  ASSERT_EQ(secs.size(), 4u);
  EXPECT_EQ(secs[0].as_int(""), 3);
  EXPECT_EQ(secs[2].as_int(""), 2);
  EXPECT_EQ(secs[3].as_int(""), 0);
  EXPECT_EQ(f.find_string("tokenizer.ggml.model"), std::nullopt);  // the fixture has no tokenizer.json

  EXPECT_EQ(f.find_tensor("output.weight"), nullptr);  // tied
  EXPECT_EQ(T(f, "token_embd.weight").shape, S({64, 256}));
  EXPECT_EQ(T(f, "output_norm.weight").shape, S({64}));
  // 3 global + 6 GDN layers * 14 + 2 attention layers * 11
  EXPECT_EQ(f.tensors().size(), 2u + 6 * 14 + 2 * 11);
  EXPECT_EQ(T(f, "blk.0.attn_qkv.weight").shape, S({64, 160}));
  EXPECT_EQ(T(f, "blk.0.attn_gate.weight").shape, S({64, 96}));
  EXPECT_EQ(T(f, "blk.0.ssm_beta.weight").shape, S({64, 4}));
  EXPECT_EQ(T(f, "blk.0.ssm_alpha.weight").shape, S({64, 4}));
  EXPECT_EQ(T(f, "blk.0.ssm_conv1d.weight").shape, S({4, 160}));
  EXPECT_EQ(T(f, "blk.0.ssm_dt.bias").shape, S({4}));
  EXPECT_EQ(T(f, "blk.0.ssm_a").shape, S({4}));
  EXPECT_EQ(T(f, "blk.0.ssm_norm.weight").shape, S({24}));
  EXPECT_EQ(T(f, "blk.0.ssm_out.weight").shape, S({96, 64}));
  EXPECT_EQ(T(f, "blk.0.ffn_gate.weight").shape, S({64, 64}));
  EXPECT_EQ(T(f, "blk.3.attn_q.weight").shape, S({64, 256}));
  EXPECT_EQ(T(f, "blk.3.attn_k.weight").shape, S({64, 64}));
  EXPECT_EQ(T(f, "blk.3.attn_output.weight").shape, S({128, 64}));
  EXPECT_EQ(T(f, "blk.3.attn_q_norm.weight").shape, S({32}));
  EXPECT_EQ(f.find_tensor("blk.3.attn_qkv.weight"), nullptr);
  EXPECT_EQ(f.find_tensor("blk.0.attn_q.weight"), nullptr);
  for (const auto& t : f.tensors()) EXPECT_EQ(t.type, GgmlType::F32) << t.name;
}

TEST(ConvertQwen35, DenseTransformsMatchTheSafetensors) {
  Converted c = load("dense");
  const auto& f = c.file;
  const std::string p = "model.layers.0.linear_attn.";
  // +1 on model norms, not on the GDN norm.
  auto in = hf(c.st, "model.layers.0.input_layernorm.weight");
  auto out = values(T(f, "blk.0.attn_norm.weight"));
  for (size_t i = 0; i < in.size(); ++i) ASSERT_EQ(out[i], in[i] + 1.0f);
  in = hf(c.st, "model.norm.weight");
  out = values(T(f, "output_norm.weight"));
  for (size_t i = 0; i < in.size(); ++i) ASSERT_EQ(out[i], in[i] + 1.0f);
  in = hf(c.st, "model.layers.3.self_attn.q_norm.weight");
  out = values(T(f, "blk.3.attn_q_norm.weight"));
  for (size_t i = 0; i < in.size(); ++i) ASSERT_EQ(out[i], in[i] + 1.0f);
  in = hf(c.st, p + "norm.weight");
  out = values(T(f, "blk.0.ssm_norm.weight"));
  EXPECT_EQ(out, in);
  // ssm_a = -exp(A_log), tiled; dt tiled.
  auto alog = hf(c.st, p + "A_log"), dt = hf(c.st, p + "dt_bias");
  auto a = values(T(f, "blk.0.ssm_a")), gdt = values(T(f, "blk.0.ssm_dt.bias"));
  for (int h = 0; h < 4; ++h) {
    EXPECT_FLOAT_EQ(a[h], -std::exp(alog[kTiled[h]])) << h;
    EXPECT_EQ(gdt[h], dt[kTiled[h]]) << h;
  }
  // in_proj_qkv: Q and K rows unchanged (2*32 rows), V rows (24 per head) tiled.
  auto qkv = hf(c.st, p + "in_proj_qkv.weight"), gq = values(T(f, "blk.0.attn_qkv.weight"));
  const int H = 64;
  for (int r = 0; r < 64; ++r)
    for (int j = 0; j < H; ++j) ASSERT_EQ(gq[r * H + j], qkv[r * H + j]);
  for (int h = 0; h < 4; ++h)
    for (int d = 0; d < 24; ++d)
      for (int j = 0; j < H; ++j)
        ASSERT_EQ(gq[(64 + h * 24 + d) * H + j], qkv[(64 + kTiled[h] * 24 + d) * H + j]) << h << " " << d;
  // GGUF v-head 1 is HF v-head 2 (k-head 1's first v-head), i.e. rows actually moved.
  EXPECT_NE(gq[(64 + 24) * H], qkv[(64 + 24) * H]);
  // in_proj_z rows, in_proj_b / in_proj_a rows.
  auto z = hf(c.st, p + "in_proj_z.weight"), gz = values(T(f, "blk.0.attn_gate.weight"));
  for (int h = 0; h < 4; ++h)
    for (int d = 0; d < 24; ++d) ASSERT_EQ(gz[(h * 24 + d) * H + 5], z[(kTiled[h] * 24 + d) * H + 5]);
  auto b = hf(c.st, p + "in_proj_b.weight"), gb = values(T(f, "blk.0.ssm_beta.weight"));
  auto al = hf(c.st, p + "in_proj_a.weight"), ga = values(T(f, "blk.0.ssm_alpha.weight"));
  for (int h = 0; h < 4; ++h)
    for (int j = 0; j < H; ++j) {
      ASSERT_EQ(gb[h * H + j], b[kTiled[h] * H + j]);
      ASSERT_EQ(ga[h * H + j], al[kTiled[h] * H + j]);
    }
  // conv1d [160,1,4] squeezed to ggml [4,160]: channel c's 4 taps contiguous; V channels tiled.
  auto conv = hf(c.st, p + "conv1d.weight"), gc = values(T(f, "blk.0.ssm_conv1d.weight"));
  for (int ch = 0; ch < 64; ++ch)
    for (int k = 0; k < 4; ++k) ASSERT_EQ(gc[ch * 4 + k], conv[ch * 4 + k]);
  for (int h = 0; h < 4; ++h)
    for (int d = 0; d < 24; ++d)
      for (int k = 0; k < 4; ++k) ASSERT_EQ(gc[(64 + h * 24 + d) * 4 + k], conv[(64 + kTiled[h] * 24 + d) * 4 + k]);
  // out_proj [64, 96]: columns tiled.
  auto o = hf(c.st, p + "out_proj.weight"), go = values(T(f, "blk.0.ssm_out.weight"));
  for (int r = 0; r < 64; ++r)
    for (int h = 0; h < 4; ++h)
      for (int d = 0; d < 24; ++d) ASSERT_EQ(go[r * 96 + h * 24 + d], o[r * 96 + kTiled[h] * 24 + d]);
  // attention weights are copied as they are (q/gate interleaved per head).
  EXPECT_EQ(values(T(f, "blk.3.attn_q.weight")), hf(c.st, "model.layers.3.self_attn.q_proj.weight"));
  EXPECT_EQ(values(T(f, "token_embd.weight")), hf(c.st, "model.embed_tokens.weight"));
}

TEST(ConvertQwen35, MoeStacksPerExpertWeightsAndKeepsBf16) {
  Converted c = load("moe");
  const auto& f = c.file;
  EXPECT_EQ(f.get_string("general.architecture"), "qwen35moe");
  EXPECT_EQ(f.get_int("qwen35moe.expert_count"), 8);
  EXPECT_EQ(f.get_int("qwen35moe.expert_used_count"), 2);
  EXPECT_EQ(f.get_int("qwen35moe.expert_feed_forward_length"), 16);
  EXPECT_EQ(f.get_int("qwen35moe.expert_shared_feed_forward_length"), 32);
  EXPECT_EQ(f.find("qwen35moe.feed_forward_length"), nullptr);
  EXPECT_EQ(T(f, "output.weight").shape, S({64, 256}));
  EXPECT_EQ(T(f, "blk.0.ffn_gate_inp.weight").shape, S({64, 8}));
  EXPECT_EQ(T(f, "blk.0.ffn_gate_inp.weight").type, GgmlType::F32);
  EXPECT_EQ(T(f, "blk.0.ffn_gate_exps.weight").shape, S({64, 16, 8}));
  EXPECT_EQ(T(f, "blk.0.ffn_up_exps.weight").shape, S({64, 16, 8}));
  EXPECT_EQ(T(f, "blk.0.ffn_down_exps.weight").shape, S({16, 64, 8}));
  EXPECT_EQ(T(f, "blk.0.ffn_gate_exps.weight").type, GgmlType::BF16);
  EXPECT_EQ(T(f, "blk.0.ffn_gate_inp_shexp.weight").shape, S({64}));
  EXPECT_EQ(T(f, "blk.0.ffn_gate_inp_shexp.weight").type, GgmlType::F32);
  EXPECT_EQ(T(f, "blk.0.ffn_gate_shexp.weight").shape, S({64, 32}));
  EXPECT_EQ(T(f, "blk.0.ffn_down_shexp.weight").shape, S({32, 64}));
  EXPECT_EQ(T(f, "blk.0.attn_qkv.weight").type, GgmlType::BF16);
  EXPECT_EQ(T(f, "blk.0.ssm_conv1d.weight").type, GgmlType::F32);
  EXPECT_EQ(T(f, "blk.0.ssm_a").type, GgmlType::F32);
  EXPECT_EQ(T(f, "blk.0.attn_norm.weight").type, GgmlType::F32);
  // expert 5 of layer 2: gate rows, down rows, bit-exact (BF16 -> f32 -> BF16).
  auto g = values(T(f, "blk.2.ffn_gate_exps.weight"));
  auto g5 = hf(c.st, "model.layers.2.mlp.experts.5.gate_proj.weight");
  for (size_t i = 0; i < g5.size(); ++i) ASSERT_EQ(g[5 * 16 * 64 + i], g5[i]);
  auto d = values(T(f, "blk.2.ffn_down_exps.weight"));
  auto d7 = hf(c.st, "model.layers.2.mlp.experts.7.down_proj.weight");
  for (size_t i = 0; i < d7.size(); ++i) ASSERT_EQ(d[7 * 64 * 16 + i], d7[i]);
  auto s = hf(c.st, "model.layers.1.mlp.shared_expert_gate.weight");
  EXPECT_EQ(values(T(f, "blk.1.ffn_gate_inp_shexp.weight")), s);
}

TEST(ConvertQwen35, NextSplitsQkvzWithoutReorder) {
  Converted c = load("next");
  const auto& f = c.file;
  EXPECT_EQ(f.get_string("general.architecture"), "qwen3next");
  EXPECT_EQ(f.find("qwen3next.rope.dimension_sections"), nullptr);
  EXPECT_EQ(T(f, "blk.0.attn_qkv.weight").shape, S({64, 160}));
  EXPECT_EQ(T(f, "blk.0.attn_gate.weight").shape, S({64, 96}));
  EXPECT_EQ(T(f, "blk.0.ssm_ba.weight").shape, S({64, 8}));
  EXPECT_EQ(T(f, "blk.0.attn_qkv.weight").type, GgmlType::F16);
  EXPECT_EQ(f.find_tensor("blk.0.ssm_beta.weight"), nullptr);
  const std::string p = "model.layers.0.linear_attn.";
  auto qkvz = hf(c.st, p + "in_proj_qkvz.weight");  // per k-head: q16 k16 v48 z48 = 128 rows
  auto gq = values(T(f, "blk.0.attn_qkv.weight")), gz = values(T(f, "blk.0.attn_gate.weight"));
  const int H = 64;
  auto row_eq = [&](const std::vector<float>& a, int ra, int rb) {
    for (int j = 0; j < H; ++j)
      if (a[ra * H + j] != qkvz[rb * H + j]) return false;
    return true;
  };
  for (int g = 0; g < 2; ++g) {
    for (int d = 0; d < 16; ++d) {
      EXPECT_TRUE(row_eq(gq, g * 16 + d, g * 128 + d));            // Q
      EXPECT_TRUE(row_eq(gq, 32 + g * 16 + d, g * 128 + 16 + d));  // K
    }
    for (int d = 0; d < 48; ++d) {
      EXPECT_TRUE(row_eq(gq, 64 + g * 48 + d, g * 128 + 32 + d));  // V, grouped
      EXPECT_TRUE(row_eq(gz, g * 48 + d, g * 128 + 80 + d));       // Z
    }
  }
  EXPECT_EQ(values(T(f, "blk.0.ssm_ba.weight")), hf(c.st, p + "in_proj_ba.weight"));
  auto alog = hf(c.st, p + "A_log"), a = values(T(f, "blk.0.ssm_a"));
  for (int h = 0; h < 4; ++h) EXPECT_FLOAT_EQ(a[h], -std::exp(alog[h]));  // no reorder
  EXPECT_EQ(values(T(f, "blk.0.ssm_out.weight")), hf(c.st, p + "out_proj.weight"));
}

TEST(ConvertQwen35, EveryOutputTypeWritesAFileThatOpens) {
  const std::string out = (fs::temp_directory_path() / "hearth_convert_types.gguf").string();
  for (const char* ty : {"f32", "f16", "bf16", "q8_0", "q4_k", "q6_k"}) {
    convert::ConvertOptions opt;
    opt.quiet = true;
    opt.type = convert::parse_output_type(ty);
    convert::ConvertSummary s;
    convert::hf_folder_to_gguf(kData + "moe", opt, &s).write_file(out);
    gguf::File f = gguf::File::open(out);
    EXPECT_EQ(f.tensors().size(), s.n_tensors);
    const GgmlType want = *opt.type;
    // token_embd rows are 64 long: fits f32/f16/bf16/q8_0; the k-quants fall back to q8_0.
    const GgmlType emb = (want == GgmlType::Q4_K || want == GgmlType::Q6_K) ? GgmlType::Q8_0 : want;
    EXPECT_EQ(T(f, "token_embd.weight").type, emb) << ty;
    EXPECT_EQ(T(f, "blk.0.attn_norm.weight").type, GgmlType::F32) << ty;
    EXPECT_EQ(T(f, "blk.0.ffn_gate_inp.weight").type, GgmlType::F32) << ty;
    // ffn_down_exps rows are 16 long: q8_0 and the k-quants fall back to f16.
    const bool quant = want == GgmlType::Q8_0 || want == GgmlType::Q4_K || want == GgmlType::Q6_K;
    EXPECT_EQ(T(f, "blk.0.ffn_down_exps.weight").type, quant ? GgmlType::F16 : want) << ty;
    // Values survive within the type's precision.
    auto ref = values(T(load("moe").file, "blk.1.attn_qkv.weight"));
    auto got = values(T(f, "blk.1.attn_qkv.weight"));
    double max_err = 0, max_ref = 0;
    for (size_t i = 0; i < ref.size(); ++i)
      max_err = std::max(max_err, std::fabs(double(got[i]) - ref[i])), max_ref = std::max(max_ref, std::fabs(double(ref[i])));
    EXPECT_LE(max_err, (want == GgmlType::Q4_K ? 0.15 : quant ? 0.03 : 0.01) * max_ref) << ty;
  }
  fs::remove(out);
}

namespace {

// A copy of a fixture folder that a test may break.
std::string copy_fixture(const std::string& name, const std::string& tag) {
  const fs::path dst = fs::temp_directory_path() / ("hearth_convert_" + tag);
  fs::remove_all(dst);
  fs::copy(kData + name, dst, fs::copy_options::recursive);
  return dst.string();
}
std::string error_of(const std::string& dir) {
  try {
    convert::ConvertOptions opt;
    opt.quiet = true;
    convert::hf_folder_to_gguf(dir, opt);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
void edit_config(const std::string& dir, const std::function<void(nlohmann::json&)>& fn) {
  std::ifstream in(dir + "/config.json");
  nlohmann::json j = nlohmann::json::parse(in);
  fn(j);
  std::ofstream(dir + "/config.json") << j.dump(2);
}

}  // namespace

TEST(ConvertQwen35, BrokenFoldersNameTheFileAndField) {
  std::string d = copy_fixture("dense", "broken");
  fs::remove(d + "/config.json");
  EXPECT_NE(error_of(d).find("config.json"), std::string::npos) << error_of(d);
  EXPECT_FALSE(convert::is_hf_folder(d));

  d = copy_fixture("dense", "broken");
  edit_config(d, [](nlohmann::json& j) { j["model_type"] = "mamba9"; });
  EXPECT_NE(error_of(d).find("'mamba9' is not supported"), std::string::npos) << error_of(d);

  d = copy_fixture("dense", "broken");
  edit_config(d, [](nlohmann::json& j) { j.erase("linear_num_key_heads"); });
  EXPECT_NE(error_of(d).find("linear_num_key_heads"), std::string::npos) << error_of(d);

  // Fields of the wrong JSON type name the field (fuzz_hf found tie_word_embeddings: 1 crashing).
  d = copy_fixture("dense", "broken");
  edit_config(d, [](nlohmann::json& j) { j["tie_word_embeddings"] = 1; });
  EXPECT_NE(error_of(d).find("field 'tie_word_embeddings': not true or false"), std::string::npos) << error_of(d);
  d = copy_fixture("dense", "broken");
  edit_config(d, [](nlohmann::json& j) { j["rope_parameters"]["mrope_section"] = {11, "x", 10}; });
  EXPECT_NE(error_of(d).find("mrope_section"), std::string::npos) << error_of(d);

  // Wrong shape: config says 5 value heads.
  d = copy_fixture("dense", "broken");
  edit_config(d, [](nlohmann::json& j) { j["linear_num_value_heads"] = 6; });
  std::string e = error_of(d);
  EXPECT_NE(e.find("model.layers.0.linear_attn.in_proj_qkv.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("shape"), std::string::npos) << e;

  // Missing tensor: one more layer than the file holds.
  d = copy_fixture("dense", "broken");
  edit_config(d, [](nlohmann::json& j) {
    j["num_hidden_layers"] = 9;
    j["layer_types"].push_back("linear_attention");
  });
  e = error_of(d);
  EXPECT_NE(e.find("model.layers.8.input_layernorm.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("missing"), std::string::npos) << e;

  // Unsupported dtype: a safetensors file with an I32 tensor named like a weight.
  d = copy_fixture("dense", "broken");
  {
    const std::string hdr = R"({"model.embed_tokens.weight":{"dtype":"I32","shape":[256,64],"data_offsets":[0,65536]}})";
    std::ofstream o(d + "/model.safetensors", std::ios::binary);
    uint64_t n = hdr.size();
    o.write(reinterpret_cast<const char*>(&n), 8);
    o << hdr << std::string(65536, '\0');
  }
  e = error_of(d);
  EXPECT_NE(e.find("model.embed_tokens.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("I32"), std::string::npos) << e;
  EXPECT_NE(e.find("model.safetensors"), std::string::npos) << e;
  fs::remove_all(d);
}

TEST(ConvertQwen35, IrregularLayerTypesWriteRecurrentLayers) {
  std::string d = copy_fixture("dense", "layers");
  edit_config(d, [](nlohmann::json& j) {
    j["layer_types"] = {"linear_attention", "linear_attention", "linear_attention", "full_attention",
                        "linear_attention", "linear_attention", "full_attention", "full_attention"};
  });
  // layers 6 and 7 swap kinds relative to the file: layer 6 is now attention (needs q_proj).
  std::string e = error_of(d);
  EXPECT_NE(e.find("model.layers.6.self_attn.q_proj.weight"), std::string::npos) << e;
  // With the original pattern written explicitly as an interval of 4 nothing extra is written;
  // a config whose layer_types is irregular gets the bool array (checked on the metadata alone).
  const auto cfg = convert::read_hf_config(d);
  EXPECT_FALSE(cfg.recurrent_is_interval);
  gguf::Writer w;
  convert::write_hparams(cfg, w);
  auto bytes = std::make_shared<const std::vector<uint8_t>>(w.to_bytes());
  const auto f = gguf::File::parse_owned(bytes, "m");
  const auto& arr = f.find("qwen35.attention.recurrent_layers")->as_array("r");
  ASSERT_EQ(arr.size(), 8u);
  EXPECT_EQ(f.find("qwen35.attention.recurrent_layers")->elem_type, gguf::ValueType::BOOL);
  EXPECT_TRUE(arr[5].as_bool(""));
  EXPECT_FALSE(arr[6].as_bool(""));
  EXPECT_FALSE(arr[7].as_bool(""));
  fs::remove_all(d);
}

TEST(ConvertQwen35, OpenModelReadsAFolderOrAFile) {
  gguf::File f = convert::open_model(kData + "next");
  EXPECT_EQ(f.get_string("general.architecture"), "qwen3next");
  const gguf::File copy = f;  // shares the bytes
  f = gguf::File();
  EXPECT_EQ(copy.find_tensor("token_embd.weight")->shape, S({64, 256}));
  EXPECT_EQ(values(*copy.find_tensor("token_embd.weight")).size(), 64u * 256);
}

TEST(ConvertTokenizer, Qwen3TokenizerRoundTrips) {
  const std::string tokdir = std::string(HEARTH_SHARED_DIR) + "/data/tokenizers/qwen3";
  const std::string tokdir2 = "/work/shared/data/tokenizers/qwen3";
  const std::string src = fs::exists(tokdir) ? tokdir : tokdir2;
  if (!fs::exists(src + "/tokenizer.json")) GTEST_SKIP() << "no shared Qwen3 tokenizer";
  gguf::Writer w;
  ASSERT_TRUE(convert::write_tokenizer(src, nullptr, 151936, w));
  auto bytes = std::make_shared<const std::vector<uint8_t>>(w.to_bytes());
  const auto f = gguf::File::parse_owned(bytes, "tok");
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(f.get_string("tokenizer.ggml.pre"), "qwen2");
  EXPECT_EQ(f.find("tokenizer.ggml.tokens")->as_array("t").size(), 151936u);
  EXPECT_EQ(f.get_int("tokenizer.ggml.eos_token_id"), 151645);  // <|im_end|>
  EXPECT_EQ(f.get_int("tokenizer.ggml.padding_token_id"), 151643);
  EXPECT_FALSE(f.get_bool("tokenizer.ggml.add_bos_token"));
  EXPECT_NE(f.get_string("tokenizer.chat_template").find("<|im_start|>"), std::string::npos);
  std::ifstream in(src + "/tokenizer.json");
  std::stringstream ss;
  ss << in.rdbuf();
  const auto ref = tokenizer::Tokenizer::from_hf_json(ss.str(), "tokenizer.json");
  const auto tok = tokenizer::Tokenizer::from_gguf(f);
  std::vector<std::string> texts = {"Hello world", "  multiple   spaces\n\nnew lines\t", "<|im_start|>user\nhi<|im_end|>",
                                    "数字 12345 and 3.14", "don't I'LL", "🦙 emoji"};
  const std::string inp = (fs::path(src).parent_path().parent_path() / "tokenizer-test/ggml-vocab-qwen2.gguf.inp").string();
  if (std::ifstream vi(inp); vi) {
    std::stringstream all;
    all << vi.rdbuf();
    std::string s = all.str(), sep = "\n__ggml_vocab_test__\n";
    for (size_t pos = 0; pos < s.size();) {
      size_t next = s.find(sep, pos);
      texts.push_back(s.substr(pos, next == std::string::npos ? std::string::npos : next - pos));
      if (next == std::string::npos) break;
      pos = next + sep.size();
    }
  }
  size_t n = 0;
  for (const auto& t : texts) {
    EXPECT_EQ(tok.encode(t), ref.encode(t)) << "text: " << t;
    ++n;
  }
  EXPECT_GT(n, 10u);
}

// Hostile tokenizer.json files (found by fuzz_hf; kept as tests/fuzz/corpus/hf/regress-*):
// a token id of 2e9 made a vocabulary of 2e9 placeholder entries (out of memory), a sparse
// id a mostly-placeholder one; a field of the wrong JSON type escaped as a json exception.
// Each is an Error naming the file and the field or id.
TEST(ConvertTokenizer, HostileIdsAndTypesAreNamedErrors) {
  const fs::path dir = fs::temp_directory_path() / "hearth_convert_hostile_tok";
  fs::create_directories(dir);
  const auto expect_error = [&](const std::string& tokenizer_json, const std::string& needle) {
    std::ofstream(dir / "tokenizer.json") << tokenizer_json;
    gguf::Writer w;
    try {
      convert::write_tokenizer(dir.string(), nullptr, 0, w);
      ADD_FAILURE() << "accepted: " << tokenizer_json;
    } catch (const hearth::Error& e) {
      EXPECT_EQ(e.kind(), hearth::ErrorKind::kInvalidInput);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("tokenizer.json"), std::string::npos) << e.what();
    }
  };
  const std::string head = R"({"model": {"type": "BPE", "merges": [], "vocab": {"a": 0, "b": 1, )";
  expect_error(head + R"("c": 2000000000}}})", "id 2000000000 of 'c' is out of range [0, 16777216)");
  expect_error(head + R"("c": -1}}})", "id -1 of 'c' is out of range");
  expect_error(head + R"("c": 163296}}})", "a vocabulary of 163297 ids");
  expect_error(head + R"("c": 2}}, "added_tokens": [{"id": 3, "content": "<x>", "special": "yes"}]})", "type must be boolean");
  expect_error(head + R"("c": 2}}, "added_tokens": [{"id": 3, "content": 7}]})", "'content' is not a string");
  expect_error(head + R"("c": 2}}, "added_tokens": [{"id": 99999999, "content": "<x>"}]})",
               "field 'added_tokens': id 99999999 of '<x>' is out of range");
  // A gap the size of the named tokens is fine (placeholders fill it).
  std::ofstream(dir / "tokenizer.json") << head + R"("c": 5}}})";
  gguf::Writer w;
  EXPECT_TRUE(convert::write_tokenizer(dir.string(), nullptr, 0, w));
  fs::remove_all(dir);
}
