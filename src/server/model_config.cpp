// The YAML model list of `hearth serve --config`; see model_config.h.
#include "server/model_config.h"

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "core/error.h"

namespace hearth::server {
namespace {

namespace fs = std::filesystem;

struct Ctx {
  const std::string& path;
  [[noreturn]] void error(const YAML::Node& node, const std::string& key,
                          const std::string& message) const {
    std::string where = path;
    if (node.IsDefined() && node.Mark().line >= 0) {
      where += ':';
      where += std::to_string(node.Mark().line + 1);
    }
    fail(ErrorKind::kInvalidInput, "serve", where + ": " + key + ": " + message);
  }
};

std::string scalar(const Ctx& c, const YAML::Node& n, const std::string& key) {
  if (!n.IsScalar()) c.error(n, key, "expected a string");
  return n.Scalar();
}

template <typename T>
T number(const Ctx& c, const YAML::Node& n, const std::string& key, const char* what) {
  if (!n.IsScalar()) c.error(n, key, std::string("expected ") + what);
  try {
    return n.as<T>();
  } catch (const YAML::Exception&) {
    c.error(n, key, std::string("expected ") + what + ", got '" + n.Scalar() + "'");
  }
}

// A path in the file: taken from the config file's folder when relative.
std::string from_base(const std::string& p, const std::string& base) {
  if (p.empty() || fs::path(p).is_absolute() || base.empty()) return p;
  return (fs::path(base) / p).lexically_normal().string();
}

ModelSpec parse_model(const Ctx& c, const std::string& name, const YAML::Node& m,
                      const std::string& base) {
  const std::string at = "models." + name;
  ModelSpec s;
  s.name = name;
  if (m.IsScalar()) {  // name: REF
    s.ref = m.Scalar();
  } else if (!m.IsMap()) {
    c.error(m, at, "expected a map of settings (model, aliases, ctx, ...) or a model reference");
  } else {
    for (const auto& kv : m) {
      const std::string key = kv.first.as<std::string>();
      const std::string k = at + "." + key;
      const YAML::Node& v = kv.second;
      if (key == "model") {
        s.ref = scalar(c, v, k);
      } else if (key == "aliases") {
        if (v.IsScalar()) {
          s.aliases.push_back(v.Scalar());
        } else if (v.IsSequence()) {
          for (size_t i = 0; i < v.size(); ++i)
            s.aliases.push_back(scalar(c, v[i], k + "[" + std::to_string(i) + "]"));
        } else {
          c.error(v, k, "expected a list of names");
        }
      } else if (key == "ctx") {
        s.ctx = number<int64_t>(c, v, k, "an integer (tokens)");
        if (*s.ctx < 8) c.error(v, k, "must be >= 8");
      } else if (key == "max_seqs") {
        s.max_seqs = number<int32_t>(c, v, k, "an integer");
        if (*s.max_seqs < 1 || *s.max_seqs > 1024) c.error(v, k, "must be in [1, 1024]");
      } else if (key == "kv_cache_bytes") {
        s.kv_cache_bytes = scalar(c, v, k);
      } else if (key == "chat_template") {
        s.chat_template = from_base(scalar(c, v, k), base);
      } else if (key == "device") {
        s.device = scalar(c, v, k);
      } else if (key == "pinned") {
        s.pinned = number<bool>(c, v, k, "true or false");
      } else if (key == "idle_unload") {
        s.idle_unload_s = number<double>(c, v, k, "a number of seconds");
        if (!(*s.idle_unload_s >= 0)) c.error(v, k, "must be >= 0 (0: never)");
      } else {
        c.error(kv.first, k,
                "unknown setting (known: model, aliases, ctx, max_seqs, kv_cache_bytes, "
                "chat_template, device, "
                "pinned, idle_unload)");
      }
    }
  }
  if (s.ref.empty()) c.error(m, at + ".model", "missing: the model's file, folder or store name");
  // A relative path that exists next to the config file is taken from there; anything
  // else (a store name, a path from the working directory) is left to the resolver.
  if (const std::string p = from_base(s.ref, base); p != s.ref && fs::exists(p)) s.ref = p;
  return s;
}

}  // namespace

std::vector<ModelSpec> parse_model_config(const std::string& text, const std::string& path,
                                          const std::string& base_dir) {
  const Ctx c{path};
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    fail(ErrorKind::kInvalidInput, "serve",
         path + ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1) +
             ": not valid YAML: " + e.msg);
  }
  if (!root.IsMap()) c.error(root, "(top level)", "expected a map with a 'models' key");
  for (const auto& kv : root) {
    const std::string key = kv.first.as<std::string>();
    if (key != "models") c.error(kv.first, key, "unknown key (the file holds 'models')");
  }
  const YAML::Node models = root["models"];
  if (!models.IsDefined() || models.IsNull())
    c.error(root, "models", "missing: a map of model names to settings");
  if (!models.IsMap() || models.size() == 0)
    c.error(models, "models", "expected a map of model names to settings");
  std::vector<ModelSpec> out;
  std::set<std::string> names;
  for (const auto& kv : models) {
    const std::string name = kv.first.as<std::string>();
    if (name.empty()) c.error(kv.first, "models", "a model name is empty");
    if (!names.insert(name).second) c.error(kv.first, "models." + name, "given twice");
    out.push_back(parse_model(c, name, kv.second, base_dir));
  }
  return out;
}

std::vector<ModelSpec> load_model_config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorKind::kIo, "serve", "cannot read the config file " + path);
  std::ostringstream text;
  text << in.rdbuf();
  return parse_model_config(text.str(), path, fs::absolute(path).parent_path().string());
}

}  // namespace hearth::server
