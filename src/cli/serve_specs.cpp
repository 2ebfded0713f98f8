// The model list of `hearth serve` in router mode; see serve_specs.h.
#include "cli/serve_specs.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "server/model_config.h"
#include "store/folder_scan.h"

namespace hearth::cli {
namespace {

namespace fs = std::filesystem;

bool is_gguf(const fs::path& p) { return store::lower(p.extension().string()) == ".gguf"; }

}  // namespace

std::string default_model_name(const std::string& ref) {
  std::error_code ec;
  const fs::path p(ref);
  if (!fs::exists(p, ec)) return ref;
  const fs::path clean = p.lexically_normal();
  const fs::path last = clean.has_filename() ? clean : clean.parent_path();
  return fs::is_directory(p, ec) ? last.filename().string() : last.stem().string();
}

std::string model_value_name(const std::string& value) {
  if (auto named = split_named_model(value)) return named->first;
  return default_model_name(value);
}

std::optional<std::pair<std::string, std::string>> split_named_model(const std::string& value) {
  const size_t eq = value.find('=');
  if (eq == std::string::npos || eq == 0) return std::nullopt;
  std::string name = value.substr(0, eq);
  if (name.find('/') != std::string::npos) return std::nullopt;
  return std::make_pair(std::move(name), value.substr(eq + 1));
}

bool router_mode(const ServeOptions& o) {
  return !o.models_dir.empty() || !o.config.empty() || o.models.size() > 1 ||
         (o.models.size() == 1 && split_named_model(o.models[0]));
}

std::vector<server::ModelSpec> models_in_dir(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    fail(ErrorKind::kNotFound, "serve", "--models-dir " + dir + " is not a folder");
  std::vector<fs::path> paths;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    paths.push_back(it->path());
  if (ec) fail(ErrorKind::kIo, "serve", "cannot read --models-dir " + dir + ": " + ec.message());
  std::sort(paths.begin(), paths.end());
  std::vector<server::ModelSpec> out;
  for (const fs::path& p : paths) {
    const std::string file = p.filename().string();
    if (file.empty() || file[0] == '.') continue;
    server::ModelSpec s;
    s.ref = p.string();
    if (fs::is_directory(p, ec)) {
      bool model = fs::exists(p / "config.json", ec);
      for (fs::directory_iterator it(p, ec), end; !model && !ec && it != end; it.increment(ec)) {
        model = is_gguf(it->path()) && !store::is_projector(it->path().filename().string());
      }
      if (!model) continue;
      s.name = file;
    } else if (is_gguf(p) && !store::is_projector(file)) {
      if (const auto split = store::parse_split_name(file)) {
        if (split->index != 1) continue;  // a split GGUF is one model, named by its first shard
        s.name = split->base;
      } else {
        s.name = p.stem().string();
      }
    } else {
      continue;
    }
    out.push_back(std::move(s));
  }
  if (out.empty()) {
    fail(ErrorKind::kNotFound, "serve",
         "--models-dir " + dir + ": no model found (*.gguf files, or folders of them)");
  }
  return out;
}

std::vector<server::ModelSpec> router_specs(const ServeOptions& o) {
  std::vector<server::ModelSpec> specs;
  if (!o.config.empty()) specs = server::load_model_config(o.config);
  for (const std::string& v : o.models) {
    server::ModelSpec s;
    if (auto named = split_named_model(v)) {
      s.name = named->first;
      s.ref = named->second;
      if (s.ref.empty())
        fail(ErrorKind::kInvalidInput, "serve",
             "--model " + v + ": the reference after '=' is empty");
    } else {
      s.ref = v;
      s.name = default_model_name(v);
    }
    specs.push_back(std::move(s));
  }
  if (!o.models_dir.empty()) {
    for (auto& s : models_in_dir(o.models_dir)) specs.push_back(std::move(s));
  }
  for (const std::string& name : o.pin) {
    auto it = std::find_if(specs.begin(), specs.end(), [&](const server::ModelSpec& s) {
      return s.name == name ||
             std::find(s.aliases.begin(), s.aliases.end(), name) != s.aliases.end();
    });
    if (it == specs.end()) {
      std::string names;
      for (const auto& s : specs) names += (names.empty() ? "" : ", ") + s.name;
      fail(ErrorKind::kInvalidInput, "serve",
           "--pin " + name + ": no such model (models: " + names + ")");
    }
    it->pinned = true;
  }
  return specs;
}

}  // namespace hearth::cli
