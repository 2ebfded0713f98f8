#include "store/folder_scan.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
#include <regex>

#include "core/error.h"

namespace hearth::store {
namespace {

namespace fs = std::filesystem;

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

bool ends_with_icase(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && lower(s.substr(s.size() - suffix.size())) == suffix;
}

// "name.gguf" / "name-00001-of-00002.gguf" -> "name".
std::string model_stem(const std::string& file_name) {
  if (auto split = parse_split_name(file_name)) return split->base;
  return file_name.substr(0, file_name.size() - 5);
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

std::vector<std::string> labels(const FolderScan& scan) {
  std::vector<std::string> out;
  for (const auto& m : scan.models) out.push_back(m.label);
  return out;
}

// Groups the .gguf files (path relative to the folder) into models.
void group_ggufs(FolderScan& scan, const std::vector<fs::path>& ggufs) {
  std::map<std::string, GgufModel> by_key;  // folder-relative stem -> model
  for (const auto& rel : ggufs) {
    const std::string file = rel.filename().string();
    const std::string key = (rel.parent_path() / model_stem(file)).string();
    GgufModel& m = by_key[key];
    m.files.push_back((fs::path(scan.dir) / rel).string());
    if (auto split = parse_split_name(file)) m.split_count = split->count;
    if (m.tag.empty()) m.tag = quant_tag_of(file);
    if (m.tag.empty()) m.tag = quant_tag_of(rel.parent_path().filename().string() + ".gguf");
    m.label = m.tag.empty() ? model_stem(file) : m.tag;
  }
  for (auto& [key, m] : by_key) {
    std::sort(m.files.begin(), m.files.end());
    if (m.split_count > 0 && static_cast<int>(m.files.size()) != m.split_count) {
      m.problem = "split GGUF '" + key + "' has " + std::to_string(m.files.size()) + " of its " +
                  std::to_string(m.split_count) + " files in " + scan.dir;
    }
    scan.models.push_back(std::move(m));
  }
  std::sort(scan.models.begin(), scan.models.end(),
            [](const GgufModel& a, const GgufModel& b) { return a.label < b.label; });
}

}  // namespace

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string quant_tag_of(const std::string& file_name) {
  static const std::regex kTag(
      R"((?:^|[-._])((?:UD-)?(?:I?Q[0-9]+(?:_[0-9A-Z]{1,3})*|B?F16|F32|MXFP4(?:_MOE)?|TQ[0-9]_[0-9]))(?=$|[-._]))",
      std::regex::icase);
  std::string stem = file_name;
  if (auto split = parse_split_name(file_name))
    stem = split->base;
  else if (ends_with_icase(stem, ".gguf"))
    stem = stem.substr(0, stem.size() - 5);
  std::string tag;
  for (std::sregex_iterator it(stem.begin(), stem.end(), kTag), end; it != end; ++it)
    tag = (*it)[1].str();
  return upper(tag);
}

std::optional<SplitName> parse_split_name(const std::string& file_name) {
  static const std::regex kSplit(R"((.*)-([0-9]{5})-of-([0-9]{5})\.gguf)", std::regex::icase);
  std::smatch m;
  if (!std::regex_match(file_name, m, kSplit)) return std::nullopt;
  SplitName s{m[1].str(), std::stoi(m[2].str()), std::stoi(m[3].str())};
  if (s.count < 1 || s.index < 1 || s.index > s.count) return std::nullopt;
  return s;
}

bool is_projector(const std::string& file_name) {
  return lower(file_name).find("mmproj") != std::string::npos;
}

void check_readable(const std::string& path, const std::string& what) {
  std::error_code ec;
  if (fs::exists(path, ec)) return;
  if (fs::is_symlink(path, ec)) {
    const fs::path target = fs::read_symlink(path, ec);
    fail(ErrorKind::kNotFound, "models",
         what + ": " + path + " is a symbolic link to " + target.string() +
             ", which does not exist (a blob missing from the cache: an interrupted download?)");
  }
  fail(ErrorKind::kNotFound, "models", what + ": " + path + " does not exist");
}

FolderScan scan_folder(const std::string& dir) {
  FolderScan scan;
  scan.dir = dir;
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, ec), end;
  if (ec) fail(ErrorKind::kIo, "models", dir + ": cannot read the folder: " + ec.message());
  std::vector<fs::path> ggufs;
  bool config = false, safetensors = false;
  for (; it != end; it.increment(ec)) {
    if (ec) fail(ErrorKind::kIo, "models", dir + ": cannot read the folder: " + ec.message());
    const std::string file = it->path().filename().string();
    if (it->is_directory(ec)) {
      if (!file.empty() && file[0] == '.') it.disable_recursion_pending();  // .cache, .git
      continue;
    }
    const fs::path rel = it->path().lexically_relative(dir);
    if (ends_with_icase(file, ".gguf")) {
      if (is_projector(file))
        scan.projectors.push_back(it->path().string());
      else
        ggufs.push_back(rel);
    } else if (rel == "config.json") {
      config = true;
    } else if (rel.parent_path().empty() && ends_with_icase(file, ".safetensors")) {
      safetensors = true;
    }
  }
  std::sort(scan.projectors.begin(), scan.projectors.end());
  group_ggufs(scan, ggufs);
  scan.hf_folder = scan.models.empty() && config && safetensors;
  return scan;
}

const GgufModel& pick_gguf(const FolderScan& scan, const std::string& quant,
                           const std::string& what) {
  if (scan.models.empty()) {
    fail(ErrorKind::kNotFound, "models",
         what + ": " + scan.dir + " holds no GGUF model (and no config.json with .safetensors)");
  }
  std::vector<const GgufModel*> hits;
  if (quant.empty()) {
    if (scan.models.size() > 1) {
      fail(ErrorKind::kInvalidInput, "models",
           what + " holds " + std::to_string(scan.models.size()) +
               " GGUF models; add :QUANT, one of: " + join(labels(scan)) + " (e.g. " + what + ":" +
               scan.models.front().label + ")");
    }
    hits.push_back(&scan.models.front());
  } else {
    for (const auto& m : scan.models) {
      // Unsloth's dynamic quants: "UD-Q4_K_XL" is also asked for as "Q4_K_XL".
      const bool ud = m.tag.rfind("UD-", 0) == 0 && m.tag.substr(3) == upper(quant);
      if (upper(m.label) == upper(quant) || ud) hits.push_back(&m);
    }
  }
  if (hits.empty()) {
    fail(ErrorKind::kNotFound, "models",
         what + ":" + quant + ": no GGUF with quant '" + quant + "' in " + scan.dir +
             " (found: " + join(labels(scan)) + ")");
  }
  if (hits.size() > 1) {
    std::vector<std::string> files;
    for (const auto* m : hits) files.push_back(m->files.front());
    fail(ErrorKind::kInvalidInput, "models",
         what + ":" + quant + " matches several GGUF models: " + join(files));
  }
  const GgufModel& m = *hits.front();
  if (!m.problem.empty()) fail(ErrorKind::kNotFound, "models", what + ": " + m.problem);
  for (const auto& f : m.files) check_readable(f, what);
  return m;
}

ModelEntry gguf_entry(const FolderScan& scan, const GgufModel& m, std::string name,
                      std::string store) {
  ModelEntry e;
  e.name = std::move(name);
  e.store = std::move(store);
  e.path = m.files.front();
  if (m.split_count > 0) e.shards = m.files;
  e.quant_tag = m.tag;
  if (!scan.projectors.empty()) e.mmproj = scan.projectors.front();
  e.error = m.problem;
  return e;
}

std::vector<ModelEntry> folder_entries(const FolderScan& scan, const std::string& base,
                                       const std::string& store) {
  std::vector<ModelEntry> out;
  if (scan.hf_folder) {
    ModelEntry e;
    e.name = base;
    e.store = store;
    e.path = scan.dir;
    e.hf_folder = true;
    out.push_back(std::move(e));
    return out;
  }
  for (const auto& m : scan.models) {
    out.push_back(
        gguf_entry(scan, m, scan.models.size() == 1 ? base : base + ":" + m.label, store));
    std::error_code ec;
    for (const auto& f : m.files) {
      if (out.back().error.empty() && !fs::exists(f, ec))
        out.back().error = f + ": dangling symbolic link (blob missing)";
    }
  }
  return out;
}

}  // namespace hearth::store
