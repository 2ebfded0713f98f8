// `hearth inspect FILE [--tensors] [--metadata]`: what a GGUF holds: format,
// architecture and its hyper-parameters, tokenizer, chat template, tensor
// statistics; optionally every tensor and every metadata key.
#include <cinttypes>
#include <cstdio>
#include <map>
#include <string>

#include "cli/commands.h"
#include "cli/model_ref.h"
#include "convert/hf_import.h"
#include "convert/hf_vision.h"
#include "core/error.h"
#include "format/gguf.h"

namespace hearth::cli {
namespace {

using gguf::Value;
using gguf::ValueType;

constexpr size_t kMaxShownChars = 100;  // of a string value
constexpr size_t kMaxShownItems = 6;    // of an array

// A string shown on one line: quoted, control bytes escaped, long strings cut.
std::string quote(const std::string& s) {
  std::string out = "\"";
  size_t n = 0;
  for (unsigned char c : s) {
    if (n++ == kMaxShownChars) {
      out += "...";
      break;
    }
    switch (c) {
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\x%02x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += "\"";
  if (s.size() > kMaxShownChars) out += " (" + std::to_string(s.size()) + " bytes)";
  return out;
}

std::string format_value(const Value& v) {
  char buf[64];
  switch (v.type) {
    case ValueType::UINT8:
    case ValueType::UINT16:
    case ValueType::UINT32:
    case ValueType::UINT64:
      return std::to_string(v.u64);
    case ValueType::INT8:
    case ValueType::INT16:
    case ValueType::INT32:
    case ValueType::INT64:
      return std::to_string(v.i64);
    case ValueType::FLOAT32:
      std::snprintf(buf, sizeof buf, "%.7g", v.f64);
      return buf;
    case ValueType::FLOAT64:
      std::snprintf(buf, sizeof buf, "%.15g", v.f64);
      return buf;
    case ValueType::BOOL:
      return v.u64 ? "true" : "false";
    case ValueType::STRING:
      return quote(v.str);
    case ValueType::ARRAY: {
      std::string s = "[" + std::string(gguf::value_type_name(v.elem_type)) + " x " +
                      std::to_string(v.arr.size());
      for (size_t i = 0; i < v.arr.size() && i < kMaxShownItems; ++i) {
        s += (i == 0 ? ": " : ", ") + format_value(v.arr[i]);
      }
      if (v.arr.size() > kMaxShownItems) s += ", ...";
      return s + "]";
    }
  }
  return "?";
}

std::string human_bytes(uint64_t n) {
  char buf[64];
  double x = static_cast<double>(n);
  if (n >= (uint64_t{1} << 30)) {
    std::snprintf(buf, sizeof buf, "%.2f GiB", x / (1 << 30));
  } else if (n >= (uint64_t{1} << 20)) {
    std::snprintf(buf, sizeof buf, "%.2f MiB", x / (1 << 20));
  } else if (n >= 1024) {
    std::snprintf(buf, sizeof buf, "%.2f KiB", x / 1024);
  } else {
    std::snprintf(buf, sizeof buf, "%" PRIu64 " B", n);
  }
  return buf;
}

std::string human_count(uint64_t n) {
  char buf[64];
  double x = static_cast<double>(n);
  if (n >= 1000000000) {
    std::snprintf(buf, sizeof buf, "%.2f B", x / 1e9);
  } else if (n >= 1000000) {
    std::snprintf(buf, sizeof buf, "%.2f M", x / 1e6);
  } else if (n >= 1000) {
    std::snprintf(buf, sizeof buf, "%.2f K", x / 1e3);
  } else {
    return std::to_string(n);
  }
  return buf;
}

std::string shape_string(const std::vector<uint64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

void print_field(const char* label, const std::string& value) {
  std::printf("%-16s%s\n", label, value.c_str());
}

void print_tokenizer(const gguf::File& f) {
  const Value* model = f.find("tokenizer.ggml.model");
  const Value* tokens = f.find("tokenizer.ggml.tokens");
  if (model == nullptr && tokens == nullptr) {
    print_field("tokenizer:", "(none)");
    return;
  }
  std::string s = model != nullptr && model->type == ValueType::STRING ? model->str : "(no model)";
  if (const Value* pre = f.find("tokenizer.ggml.pre"); pre && pre->type == ValueType::STRING) {
    s += " (pre: " + pre->str + ")";
  }
  if (tokens != nullptr && tokens->type == ValueType::ARRAY) {
    s += ", " + std::to_string(tokens->arr.size()) + " tokens";
  }
  for (const char* which : {"bos", "eos", "unk", "pad"}) {
    const Value* id = f.find(std::string("tokenizer.ggml.") + which + "_token_id");
    if (id != nullptr && (id->is_integer()))
      s += std::string(", ") + which + " " + format_value(*id);
  }
  if (const Value* merges = f.find("tokenizer.ggml.merges");
      merges && merges->type == ValueType::ARRAY) {
    s += ", " + std::to_string(merges->arr.size()) + " merges";
  }
  print_field("tokenizer:", s);
}

// The vision projector the model would run with (beside a GGUF, or an HF folder's tower).
void print_vision(const store::ModelEntry& entry) {
  try {
    const auto proj = convert::open_projector(entry.path, entry.mmproj);
    if (!proj) {
      print_field("vision:", "none (text only)");
      return;
    }
    std::string s = proj->name() + ": " + proj->find_string("clip.projector_type").value_or("?");
    s += ", " + std::to_string(proj->find_int("clip.vision.block_count").value_or(0)) + " blocks of " +
         std::to_string(proj->find_int("clip.vision.embedding_length").value_or(0)) + ", patch " +
         std::to_string(proj->find_int("clip.vision.patch_size").value_or(0));
    print_field("vision:", s);
  } catch (const Error& e) {
    print_field("vision:", std::string("unreadable: ") + e.what());
  }
}

void inspect(const std::string& path, bool show_tensors, bool show_metadata) {
  store::ModelEntry entry;
  gguf::File f = open_model_arg(path, &entry);

  print_field("file:", path);
  std::string format = "GGUF v" + std::to_string(f.version()) + ", " +
                       std::to_string(f.file_size()) + " bytes (" + human_bytes(f.file_size()) +
                       "), alignment " + std::to_string(f.alignment());
  if (!f.tensors().empty()) format += ", data at offset " + std::to_string(f.data_offset());
  print_field("format:", format);
  const Value* arch_v = f.find("general.architecture");
  std::string arch = arch_v && arch_v->type == ValueType::STRING ? arch_v->str : "";
  print_field("architecture:", arch.empty() ? "(none)" : arch);
  const Value* name_v = f.find("general.name");
  print_field("name:", name_v && name_v->type == ValueType::STRING ? name_v->str : "(none)");

  if (!arch.empty()) {
    std::string prefix = arch + ".";
    bool any = false;
    for (const auto& kv : f.metadata()) {
      if (kv.key.rfind(prefix, 0) != 0) continue;
      if (!any) std::printf("hyper-parameters:\n");
      any = true;
      std::printf("  %-38s %s\n", kv.key.c_str(), format_value(kv.value).c_str());
    }
    if (!any) print_field("hyper-parameters:", "(none)");
  }

  print_tokenizer(f);
  const Value* tmpl = f.find("tokenizer.chat_template");
  if (tmpl != nullptr && tmpl->type == ValueType::STRING) {
    print_field("chat template:", "present (" + std::to_string(tmpl->str.size()) + " bytes)");
  } else {
    print_field("chat template:", "absent");
  }
  if (arch != "clip") print_vision(entry);

  uint64_t n_params = 0;
  std::map<std::string, std::pair<uint64_t, uint64_t>> by_type;  // name -> (count, bytes)
  for (const auto& t : f.tensors()) {
    n_params += t.n_elements();
    auto& slot = by_type[std::string(ggml_type_name(t.type))];
    slot.first += 1;
    slot.second += t.n_bytes;
  }
  print_field("tensors:", std::to_string(f.tensors().size()));
  print_field("parameters:", std::to_string(n_params) + " (" + human_count(n_params) + ")");
  if (!by_type.empty()) {
    std::printf("size by type:\n");
    for (const auto& [type, cb] : by_type) {
      std::printf("  %-8s %6" PRIu64 " tensors %14" PRIu64 " bytes (%s)\n", type.c_str(), cb.first,
                  cb.second, human_bytes(cb.second).c_str());
    }
  }

  if (show_metadata) {
    std::printf("metadata (%zu keys):\n", f.metadata().size());
    for (const auto& kv : f.metadata()) {
      std::printf("  %s: %s = %s\n", kv.key.c_str(),
                  std::string(gguf::value_type_name(kv.value.type)).c_str(),
                  format_value(kv.value).c_str());
    }
  }
  if (show_tensors) {
    std::printf("tensor list (name, type, shape, offset in data section, bytes):\n");
    for (const auto& t : f.tensors()) {
      std::printf("  %-40s %-8s %-24s %12" PRIu64 " %12" PRIu64 "\n", t.name.c_str(),
                  std::string(ggml_type_name(t.type)).c_str(), shape_string(t.shape).c_str(),
                  t.offset, t.n_bytes);
    }
  }
}

}  // namespace

void add_inspect_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "inspect", "Show a GGUF file's architecture, hyper-parameters, tokenizer and tensors");
  static std::string path;
  static bool show_tensors = false;
  static bool show_metadata = false;
  cmd->add_option("file", path, "GGUF file, Hugging Face folder, or a store name (see `hearth list`)")->required();
  cmd->add_flag("--tensors", show_tensors, "List every tensor (name, type, shape, offset, bytes)");
  cmd->add_flag("--metadata", show_metadata, "List every metadata key (arrays summarised)");
  cmd->callback([]() { inspect(path, show_tensors, show_metadata); });
}

}  // namespace hearth::cli
