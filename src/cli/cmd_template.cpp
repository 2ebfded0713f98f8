// `hearth template -m MODEL_OR_TEMPLATE --input CONV.json [--now ISO_DATETIME]`:
// prints exactly the prompt the chat template renders (no newline added).
// -m is a GGUF (tokenizer.chat_template; bos/eos default to the model's
// tokens), a Hugging Face tokenizer_config.json ("chat_template"; bos/eos
// default to its bos_token/eos_token), or a plain Jinja template file.
// --now (or env HEARTH_TEMPLATE_NOW) fixes the clock strftime_now sees.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/model_ref.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "format/gguf.h"
#include "template/chat_template.h"

namespace hearth::cli {
namespace {

using json = nlohmann::ordered_json;

struct TemplateOptions {
  std::string model;
  std::string input;
  std::string now;
};

struct LoadedTemplate {
  std::string source;
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
};

std::optional<std::string> gguf_token(const gguf::File& file, const char* id_key) {
  auto id = file.find_int(id_key);
  const gguf::Value* tokens = file.find("tokenizer.ggml.tokens");
  if (!id || !tokens || tokens->type != gguf::ValueType::ARRAY) return std::nullopt;
  const auto& arr = tokens->as_array("tokenizer.ggml.tokens");
  if (*id < 0 || static_cast<size_t>(*id) >= arr.size()) {
    fail(ErrorKind::kInvalidInput, "template",
         file.name() + ": " + id_key + " " + std::to_string(*id) + " is out of range (" +
             std::to_string(arr.size()) + " tokens)");
  }
  return arr[static_cast<size_t>(*id)].as_string("tokenizer.ggml.tokens");
}

// bos_token / eos_token of a tokenizer_config.json: a string or {"content": ...}.
std::optional<std::string> config_token(const json& cfg, const char* key) {
  if (!cfg.contains(key)) return std::nullopt;
  const json& v = cfg[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return std::nullopt;
}

LoadedTemplate load_template(const std::string& path) {
  LoadedTemplate out;
  std::string head;
  {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) fail(ErrorKind::kNotFound, "template", path + ": cannot open file");
    char buf[4] = {};
    size_t n = std::fread(buf, 1, 4, f);
    std::fclose(f);
    head.assign(buf, n);
  }
  if (head == "GGUF") {
    gguf::File file = gguf::File::open(path);
    auto tmpl = file.find_string("tokenizer.chat_template");
    if (!tmpl) fail(ErrorKind::kNotFound, "template", path + ": the model has no tokenizer.chat_template");
    out.source = *tmpl;
    out.bos_token = gguf_token(file, "tokenizer.ggml.bos_token_id");
    out.eos_token = gguf_token(file, "tokenizer.ggml.eos_token_id");
    return out;
  }
  std::string text = read_text_file(path);
  if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0) {
    json cfg;
    try {
      cfg = json::parse(text);
    } catch (const json::exception& e) {
      fail(ErrorKind::kInvalidInput, "template", path + ": not valid JSON: " + e.what());
    }
    if (!cfg.is_object() || !cfg.contains("chat_template")) {
      fail(ErrorKind::kInvalidInput, "template", path + ": no \"chat_template\" field");
    }
    const json& ct = cfg["chat_template"];
    if (ct.is_string()) {
      out.source = ct.get<std::string>();
    } else if (ct.is_array()) {  // [{"name": "default", "template": "..."}, ...]
      for (const auto& t : ct) {
        if (t.is_object() && t.value("name", "") == "default" && t.contains("template")) {
          out.source = t["template"].get<std::string>();
        }
      }
      if (out.source.empty()) fail(ErrorKind::kInvalidInput, "template", path + ": no \"default\" chat_template");
    } else {
      fail(ErrorKind::kInvalidInput, "template", path + ": \"chat_template\" must be a string");
    }
    out.bos_token = config_token(cfg, "bos_token");
    out.eos_token = config_token(cfg, "eos_token");
    return out;
  }
  out.source = std::move(text);
  return out;
}

void run_template(const TemplateOptions& o) {
  json input;
  std::string text = read_text_file(o.input);
  try {
    input = json::parse(text);
  } catch (const json::exception& e) {
    fail(ErrorKind::kInvalidInput, "template", o.input + ": not valid JSON: " + e.what());
  }
  if (!input.is_object()) fail(ErrorKind::kInvalidInput, "template", o.input + ": must hold a JSON object");
  if (!input.contains("messages")) fail(ErrorKind::kInvalidInput, "template", o.input + ": no \"messages\" field");

  LoadedTemplate lt = load_template(model_file_arg(o.model, "tokenizer_config.json"));
  if (!input.contains("bos_token") && lt.bos_token) input["bos_token"] = *lt.bos_token;
  if (!input.contains("eos_token") && lt.eos_token) input["eos_token"] = *lt.eos_token;

  tmpl::ChatRenderOptions opts;
  std::string now = o.now;
  if (now.empty()) {
    if (const char* env = std::getenv("HEARTH_TEMPLATE_NOW")) now = env;
  }
  if (!now.empty()) opts.now = tmpl::parse_iso_datetime(now);
  tmpl::ChatTemplate chat(lt.source);
  std::string prompt = chat.apply(input, opts);
  std::fwrite(prompt.data(), 1, prompt.size(), stdout);
  std::fflush(stdout);
}

}  // namespace

void add_template_command(CLI::App& app) {
  auto opts = std::make_shared<TemplateOptions>();
  auto* cmd = app.add_subcommand("template", "Print the exact prompt a chat template renders for a conversation");
  cmd->add_option("-m,--model", opts->model, "GGUF model, tokenizer_config.json, Jinja template file, or a store name (see `hearth list`)")->required();
  cmd->add_option("--input", opts->input, "conversation JSON: messages, tools, add_generation_prompt, ...")->required();
  cmd->add_option("--now", opts->now, "date-time strftime_now sees (YYYY-MM-DDTHH:MM:SS; env HEARTH_TEMPLATE_NOW)");
  cmd->callback([opts]() { run_template(*opts); });
}

}  // namespace hearth::cli
