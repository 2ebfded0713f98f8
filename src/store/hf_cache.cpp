#include "store/hf_cache.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "store/folder_scan.h"

namespace hearth::store {
namespace {

namespace fs = std::filesystem;

bool valid_part(const std::string& s) {
  if (s.empty() || s == "." || s == "..") return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
  });
}

std::string strip_prefix(const std::string& ref) {
  for (const char* p : {"https://huggingface.co/", "https://hf.co/", "huggingface.co/", "hf.co/"}) {
    const std::string prefix = p;
    if (ref.rfind(prefix, 0) == 0) return ref.substr(prefix.size());
  }
  return ref;
}

// HUB/models--ORG--NAME, also when the case differs; "" when absent.
std::string repo_dir(const std::string& hub, const HfRef& ref) {
  const std::string want = "models--" + ref.org + "--" + ref.name;
  std::error_code ec;
  if (fs::is_directory(fs::path(hub) / want, ec)) return (fs::path(hub) / want).string();
  for (fs::directory_iterator it(hub, ec), end; !ec && it != end; it.increment(ec)) {
    if (lower(it->path().filename().string()) == lower(want) && it->is_directory(ec))
      return it->path().string();
  }
  return "";
}

std::vector<std::string> snapshot_names(const std::string& repo) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(fs::path(repo) / "snapshots", ec), end; !ec && it != end;
       it.increment(ec)) {
    out.push_back(it->path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

// The snapshot folder for `revision`: refs/<revision> names a commit, or the revision is
// itself a commit with a snapshot folder.
std::string snapshot_dir(const std::string& repo, const std::string& revision,
                         const std::string& what) {
  const fs::path refs = fs::path(repo) / "refs" / revision;
  std::error_code ec;
  if (fs::is_regular_file(refs, ec)) {
    std::ifstream in(refs);
    std::string hash((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    hash = trim(hash);
    if (hash.empty())
      fail(ErrorKind::kInvalidInput, "models",
           what + ": " + refs.string() + " is empty (expected a commit hash)");
    const fs::path snap = fs::path(repo) / "snapshots" / hash;
    if (!fs::is_directory(snap, ec)) {
      fail(ErrorKind::kNotFound, "models",
           what + ": " + refs.string() + " names commit " + hash + " but " + snap.string() +
               " does not exist");
    }
    return snap.string();
  }
  const fs::path snap = fs::path(repo) / "snapshots" / revision;
  if (fs::is_directory(snap, ec)) return snap.string();
  std::string found;
  for (const auto& s : snapshot_names(repo)) found += (found.empty() ? "" : ", ") + s;
  fail(ErrorKind::kNotFound, "models",
       what + ": " + refs.string() + " does not exist and no snapshot is named '" + revision +
           "' (snapshots: " + (found.empty() ? "none" : found) + "; pick one with @REV)");
}

std::string ref_name(const HfRef& ref) {
  std::string s = ref.org + "/" + ref.name;
  if (ref.revision != "main") s += "@" + ref.revision;
  return s;
}

}  // namespace

std::optional<HfRef> parse_hf_ref(const std::string& text) {
  std::string s = strip_prefix(text);
  HfRef ref;
  ref.revision = "main";
  const size_t slash = s.find('/');
  if (slash == std::string::npos || s.find('/', slash + 1) != std::string::npos)
    return std::nullopt;
  if (const size_t colon = s.rfind(':'); colon != std::string::npos && colon > slash) {
    ref.quant = s.substr(colon + 1);
    s.resize(colon);
    if (ref.quant.empty()) return std::nullopt;
  }
  if (const size_t at = s.find('@'); at != std::string::npos && at > slash) {
    ref.revision = s.substr(at + 1);
    s.resize(at);
    if (!valid_part(ref.revision)) return std::nullopt;
  }
  ref.org = s.substr(0, slash);
  ref.name = s.substr(slash + 1);
  if (!valid_part(ref.org) || !valid_part(ref.name)) return std::nullopt;
  return ref;
}

std::optional<ModelEntry> hf_resolve(const std::string& hub, const HfRef& ref) {
  if (hub.empty()) return std::nullopt;
  const std::string repo = repo_dir(hub, ref);
  if (repo.empty()) return std::nullopt;
  const std::string what = ref_name(ref);
  const FolderScan scan = scan_folder(snapshot_dir(repo, ref.revision, what));
  if (scan.hf_folder) {
    if (!ref.quant.empty()) {
      fail(ErrorKind::kInvalidInput, "models",
           what + ":" + ref.quant + ": " + scan.dir +
               " is a safetensors model (no GGUF files to pick a quant from)");
    }
    for (const char* f : {"config.json"}) check_readable((fs::path(scan.dir) / f).string(), what);
    return folder_entries(scan, what, kStoreHf).front();
  }
  const GgufModel& m = pick_gguf(scan, ref.quant, what);
  const std::string name = scan.models.size() == 1 ? what : what + ":" + m.label;
  return gguf_entry(scan, m, name, kStoreHf);
}

std::vector<ModelEntry> hf_list(const std::string& hub) {
  std::vector<ModelEntry> out;
  std::error_code ec;
  std::vector<fs::path> repos;
  for (fs::directory_iterator it(hub, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().filename().string().rfind("models--", 0) == 0) repos.push_back(it->path());
  }
  std::sort(repos.begin(), repos.end());
  for (const auto& repo : repos) {
    const std::string dir = repo.filename().string().substr(8);
    const size_t sep = dir.find("--");
    if (sep == std::string::npos) continue;
    const std::string name = dir.substr(0, sep) + "/" + dir.substr(sep + 2);
    try {
      const FolderScan scan = scan_folder(snapshot_dir(repo.string(), "main", name));
      if (scan.models.empty() && !scan.hf_folder)
        continue;  // a dataset-like repo, a tokenizer only
      for (auto& e : folder_entries(scan, name, kStoreHf)) out.push_back(std::move(e));
    } catch (const Error& e) {
      ModelEntry bad;
      bad.name = name;
      bad.store = kStoreHf;
      bad.path = repo.string();
      bad.error = e.what();
      out.push_back(std::move(bad));
    }
  }
  return out;
}

}  // namespace hearth::store
