#include "convert/hf_import.h"

#include <cstring>
#include <filesystem>
#include <iostream>

#include "convert/hf_config.h"
#include "convert/hf_tensors.h"
#include "convert/hf_tokenizer.h"
#include "core/error.h"
#include "core/half.h"
#include "quant/dequant_ref.h"
#include "quant/quant_ref.h"

namespace hearth::convert {
namespace fs = std::filesystem;
using safetensors::DType;

namespace {

// llama.cpp's general.file_type (LLAMA_FTYPE_*) for an output type.
uint32_t file_type(std::optional<GgmlType> t) {
  if (!t) return 1;  // mixed storage dtypes: llama.cpp's default "f16"
  switch (*t) {
    case GgmlType::F32: return 0;
    case GgmlType::F16: return 1;
    case GgmlType::Q8_0: return 7;
    case GgmlType::Q4_K: return 15;  // Q4_K_M
    case GgmlType::Q6_K: return 18;
    case GgmlType::BF16: return 32;
    default: return 1;
  }
}

}  // namespace

// The type a weight matrix with rows of `row` elements gets when `want` is asked for:
// want itself when the row is a whole number of its blocks, else (like llama.cpp) Q8_0
// for the k-quants when rows fit 32, else F16.
GgmlType fit_type(GgmlType want, uint64_t row) {
  if (ggml_row_bytes(want, row)) return want;
  if (want != GgmlType::Q8_0 && ggml_row_bytes(GgmlType::Q8_0, row)) return GgmlType::Q8_0;
  return GgmlType::F16;
}

std::vector<uint8_t> encode_tensor(const OutTensor& t, GgmlType type) {
  const uint64_t row = t.shape[0];
  const uint64_t rows = t.data.size() / row;
  const uint64_t row_bytes = *ggml_row_bytes(type, row);
  std::vector<uint8_t> out(row_bytes * rows);
  const int64_t n = static_cast<int64_t>(t.data.size());
  switch (type) {
    case GgmlType::F32:
      std::memcpy(out.data(), t.data.data(), t.data.size() * 4);
      break;
    case GgmlType::F16:
      f32_to_f16_row(t.data.data(), reinterpret_cast<uint16_t*>(out.data()), n);
      break;
    case GgmlType::BF16:
      f32_to_bf16_row(t.data.data(), reinterpret_cast<uint16_t*>(out.data()), n);
      break;
    default:
      for (uint64_t r = 0; r < rows; ++r)
        quantize_row_ref(type, t.data.data() + r * row, out.data() + r * row_bytes, static_cast<int64_t>(row));
  }
  return out;
}

GgmlType parse_output_type(const std::string& name) {
  if (name == "f32") return GgmlType::F32;
  if (name == "f16") return GgmlType::F16;
  if (name == "bf16") return GgmlType::BF16;
  if (name == "q8_0") return GgmlType::Q8_0;
  if (name == "q4_k" || name == "q4_K") return GgmlType::Q4_K;
  if (name == "q6_k" || name == "q6_K") return GgmlType::Q6_K;
  fail(ErrorKind::kInvalidInput, "convert", "--type '" + name + "' is not one of f32, f16, bf16, q8_0, q4_k, q6_k");
}

bool is_hf_folder(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::is_regular_file(fs::path(path) / "config.json", ec);
}

gguf::Writer hf_folder_to_gguf(const std::string& dir, const ConvertOptions& opt, ConvertSummary* summary) {
  HfConfig cfg = read_hf_config(dir);
  if (opt.type && !(*opt.type == GgmlType::F32 || *opt.type == GgmlType::F16 || *opt.type == GgmlType::BF16 ||
                    *opt.type == GgmlType::Q8_0 || *opt.type == GgmlType::Q4_K || *opt.type == GgmlType::Q6_K))
    fail(ErrorKind::kUnsupported, "convert", std::string("output type ") + std::string(ggml_type_name(*opt.type)) + " is not supported");
  const HfCheckpoint ckpt(dir);
  cfg.n_mtp = count_mtp_layers(cfg, ckpt);

  gguf::Writer w;
  write_hparams(cfg, w);
  std::string name = fs::path(dir).lexically_normal().filename().string();
  if (name.empty()) name = fs::path(dir).lexically_normal().parent_path().filename().string();
  w.set_string("general.name", name);
  w.set_u32("general.file_type", file_type(opt.type));
  w.set_u32("general.quantization_version", 2);

  std::string tok_note;
  const bool has_tok = write_tokenizer(dir, &cfg, cfg.vocab, w, &tok_note);
  auto log = [&](const std::string& s) {
    if (!opt.quiet) std::cerr << "hearth: " << s << "\n";
  };
  if (!has_tok) log(dir + ": no tokenizer.json; the GGUF has no tokenizer (tokenizer.ggml.*) keys");
  if (!tok_note.empty()) log(tok_note);

  ConvertSummary sum;
  const bool bf16_ok = can_dequantize(GgmlType::BF16);
  const ConvertLog clog = convert_tensors(cfg, ckpt, [&](OutTensor&& t) {
    GgmlType type = GgmlType::F32;
    if (!t.force_f32) {
      if (opt.type) {
        type = fit_type(*opt.type, t.shape[0]);
        if (type != *opt.type) {
          ++sum.n_fallback;
          log(t.name + ": rows of " + std::to_string(t.shape[0]) + " do not fit " +
              std::string(ggml_type_name(*opt.type)) + " blocks; written as " + std::string(ggml_type_name(type)));
        }
      } else if (t.src_dtype == DType::kF16) {
        type = GgmlType::F16;
      } else if (t.src_dtype == DType::kBF16) {
        type = bf16_ok ? GgmlType::BF16 : GgmlType::F32;
      }
    }
    const std::vector<uint8_t> bytes = encode_tensor(t, type);
    w.add_tensor(t.name, type, t.shape, bytes);
    ++sum.n_tensors;
    sum.tensor_bytes += bytes.size();
    ++sum.type_counts[std::string(ggml_type_name(type))];
  });
  if (clog.skipped_vision)
    log("the vision tower (" + std::to_string(clog.skipped_vision) +
        " tensors, model.visual.*) goes to its own projector file (hearth convert writes mmproj-*.gguf beside the model)");
  else if (cfg.has_vision)
    log("config.json has a vision_config but the weights have no model.visual.* tensors; text only");
  if (clog.mtp_tensors)
    log("kept the multi-token-prediction head (" + std::to_string(clog.mtp_tensors) + " tensors, mtp.*) as blk." +
        std::to_string(cfg.n_layer) + ".nextn.* (`--spec mtp` drafts with it)");
  if (summary) *summary = sum;
  return w;
}

gguf::File open_model(const std::string& path) {
  if (!is_hf_folder(path)) return gguf::File::open(path);
  ConvertOptions opt;
  gguf::Writer w = hf_folder_to_gguf(path, opt);
  auto bytes = std::make_shared<const std::vector<uint8_t>>(std::move(w).take_bytes());
  return gguf::File::parse_owned(std::move(bytes), path);
}

}  // namespace hearth::convert
