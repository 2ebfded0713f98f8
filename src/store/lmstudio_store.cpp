#include "store/lmstudio_store.h"

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "store/folder_scan.h"

namespace hearth::store {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> subdirs(const fs::path& dir) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.empty() && name[0] != '.' && it->is_directory(ec)) out.push_back(it->path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::optional<ModelEntry> lmstudio_resolve(const std::vector<std::string>& roots,
                                           const HfRef& ref) {
  if (ref.revision != "main") return std::nullopt;
  const std::string what = ref.org + "/" + ref.name;
  for (const auto& root : roots) {
    std::error_code ec;
    const fs::path dir = fs::path(root) / ref.org / ref.name;
    if (!fs::is_directory(dir, ec)) continue;
    const FolderScan scan = scan_folder(dir.string());
    if (scan.hf_folder && ref.quant.empty())
      return folder_entries(scan, what, kStoreLmStudio).front();
    const GgufModel& m = pick_gguf(scan, ref.quant, what);
    return gguf_entry(scan, m, scan.models.size() == 1 ? what : what + ":" + m.label,
                      kStoreLmStudio);
  }
  return std::nullopt;
}

std::vector<ModelEntry> lmstudio_list(const std::vector<std::string>& roots) {
  std::vector<ModelEntry> out;
  for (const auto& root : roots) {
    for (const auto& publisher : subdirs(root)) {
      for (const auto& repo : subdirs(publisher)) {
        const std::string name = publisher.filename().string() + "/" + repo.filename().string();
        try {
          for (auto& e : folder_entries(scan_folder(repo.string()), name, kStoreLmStudio))
            out.push_back(std::move(e));
        } catch (const Error& e) {
          ModelEntry bad;
          bad.name = name;
          bad.store = kStoreLmStudio;
          bad.path = repo.string();
          bad.error = e.what();
          out.push_back(std::move(bad));
        }
      }
    }
  }
  return out;
}

}  // namespace hearth::store
