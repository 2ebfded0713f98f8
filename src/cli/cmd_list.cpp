// `hearth list [--json]`: every model in the Hugging Face hub cache, LM Studio's folders
// and Ollama's store, with what its header says (architecture, parameters, quantisation,
// context) and its size on disk. A file that cannot be read is listed with its error.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "store/locations.h"
#include "store/model_info.h"
#include "store/resolver.h"

namespace hearth::cli {
namespace {

std::string human_size(uint64_t n) {
  char buf[32];
  const double x = static_cast<double>(n);
  if (n >= (uint64_t{1} << 30))
    std::snprintf(buf, sizeof buf, "%.1f GiB", x / (1 << 30));
  else if (n >= (uint64_t{1} << 20))
    std::snprintf(buf, sizeof buf, "%.1f MiB", x / (1 << 20));
  else
    std::snprintf(buf, sizeof buf, "%.1f KiB", x / 1024);
  return buf;
}

std::string human_params(uint64_t n) {
  if (n == 0) return "-";
  char buf[32];
  const double x = static_cast<double>(n);
  if (n >= 1000000000)
    std::snprintf(buf, sizeof buf, "%.1fB", x / 1e9);
  else if (n >= 1000000)
    std::snprintf(buf, sizeof buf, "%.0fM", x / 1e6);
  else
    std::snprintf(buf, sizeof buf, "%.0fK", x / 1e3);
  return buf;
}

std::string or_dash(const std::string& s) { return s.empty() ? "-" : s; }

void print_table(const std::vector<store::ModelInfo>& infos) {
  const std::vector<std::string> head = {"NAME",  "STORE", "ARCH",    "PARAMS",
                                         "QUANT", "SIZE",  "CONTEXT", "PATH"};
  std::vector<std::vector<std::string>> rows;
  for (const auto& i : infos) {
    rows.push_back({i.entry.name, i.entry.store, or_dash(i.architecture),
                    human_params(i.parameters), or_dash(i.quantization),
                    i.size_bytes ? human_size(i.size_bytes) : "-",
                    i.context_length ? std::to_string(i.context_length) : "-", i.entry.path});
  }
  std::vector<size_t> width(head.size());
  for (size_t c = 0; c < head.size(); ++c) {
    width[c] = head[c].size();
    for (const auto& r : rows) width[c] = std::max(width[c], r[c].size());
  }
  auto print_row = [&](const std::vector<std::string>& r) {
    std::string line;
    for (size_t c = 0; c < r.size(); ++c) {
      line += r[c];
      if (c + 1 < r.size()) line += std::string(width[c] - r[c].size() + 2, ' ');
    }
    std::printf("%s\n", line.c_str());
  };
  print_row(head);
  for (size_t k = 0; k < rows.size(); ++k) {
    print_row(rows[k]);
    if (!infos[k].error.empty()) std::printf("  ! cannot be used: %s\n", infos[k].error.c_str());
    if (!infos[k].entry.mmproj.empty())
      std::printf("  + projector: %s\n", infos[k].entry.mmproj.c_str());
  }
}

void list_models(bool as_json) {
  const store::Locations loc = store::locations_from_env();
  std::vector<store::ModelInfo> infos;
  for (const auto& e : store::list_store_models(loc)) infos.push_back(store::describe_model(e));
  if (as_json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& i : infos) out.push_back(store::to_json(i));
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  if (infos.empty()) {
    std::string lms;
    for (const auto& d : loc.lmstudio) lms += (lms.empty() ? "" : ", ") + d;
    std::printf(
        "no models found in the Hugging Face hub cache (%s), LM Studio (%s) or Ollama (%s)\n",
        loc.hf_hub.c_str(), lms.c_str(), loc.ollama.c_str());
    return;
  }
  print_table(infos);
}

}  // namespace

void add_list_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "list",
      "List the models in the Hugging Face hub cache, LM Studio's folders and Ollama's store");
  static bool as_json = false;
  cmd->add_flag("--json", as_json, "A JSON array of objects instead of a table");
  cmd->callback([]() { list_models(as_json); });
}

}  // namespace hearth::cli
