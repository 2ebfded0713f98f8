#include "store/resolver.h"

#include <filesystem>
#include <functional>
#include <optional>

#include "core/error.h"
#include "store/folder_scan.h"
#include "store/hf_cache.h"
#include "store/lmstudio_store.h"
#include "store/ollama_store.h"

namespace hearth::store {
namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxCloseMatches = 10;

// One store's attempt: where it looked (for the not-found message) and what it found.
struct Lookup {
  std::string store;
  std::string place;  // "the Hugging Face hub cache /x (models--ORG--NAME)"
  std::function<std::optional<ModelEntry>()> find;  // empty: the reference is not this store's form
};

std::string join_dirs(const std::vector<std::string>& dirs) {
  std::string out;
  for (const auto& d : dirs) out += (out.empty() ? "" : ", ") + d;
  return out.empty() ? "(no folder)" : out;
}

std::vector<Lookup> lookups(const std::string& ref, const Locations& loc) {
  std::vector<Lookup> out;
  const auto hf = parse_hf_ref(ref);
  Lookup h{kStoreHf, "the Hugging Face hub cache " + loc.hf_hub, {}};
  Lookup l{kStoreLmStudio, "LM Studio's models folders " + join_dirs(loc.lmstudio), {}};
  if (hf) {
    h.place += " (models--" + hf->org + "--" + hf->name + ")";
    h.find = [hf, &loc] { return hf_resolve(loc.hf_hub, *hf); };
    l.place += " (" + hf->org + "/" + hf->name + ")";
    l.find = [hf, &loc] { return lmstudio_resolve(loc.lmstudio, *hf); };
  } else {
    h.place += " (not an ORG/NAME repo id)";
    l.place += " (not a PUBLISHER/REPO name)";
  }
  Lookup o{kStoreOllama, "Ollama's store " + loc.ollama, {}};
  if (const auto ol = parse_ollama_ref(ref)) {
    o.place += " (manifests/" + ol->registry + "/" + ol->ns + "/" + ol->name + "/" + ol->tag + ")";
    o.find = [ol, &loc] { return ollama_resolve(loc.ollama, *ol); };
  } else {
    o.place += " (not an Ollama NAME:TAG)";
  }
  out.push_back(std::move(h));
  out.push_back(std::move(l));
  out.push_back(std::move(o));
  return out;
}

// The part of a reference a close match is compared on: "org/Name:q8_0" -> "name". A store
// name is close when it contains this part, or its own part (3+ characters) is inside it.
std::string last_component(const std::string& ref) {
  std::string s = ref.substr(ref.rfind('/') == std::string::npos ? 0 : ref.rfind('/') + 1);
  s = s.substr(0, s.find_first_of(":@"));
  return lower(s);
}

std::string close_matches(const std::string& ref, const Locations& loc) {
  const std::string key = last_component(ref);
  if (key.empty()) return "";
  std::string out;
  size_t n = 0;
  for (const auto& e : list_store_models(loc)) {
    const std::string other = last_component(e.name);
    if (lower(e.name).find(key) == std::string::npos &&
        (other.size() < 3 || key.find(other) == std::string::npos))
      continue;
    if (n++ == kMaxCloseMatches) break;
    out += (out.empty() ? "" : ", ") + e.name + " (" + e.store + ")";
  }
  return out;
}

}  // namespace

bool looks_like_path(const std::string& ref) {
  for (const char* p : {"/", "./", "../", "~/"}) {
    if (ref.rfind(p, 0) == 0) return true;
  }
  const std::string l = lower(ref);
  for (const std::string ext : {".gguf", ".json", ".jinja"}) {
    if (l.size() >= ext.size() && l.compare(l.size() - ext.size(), ext.size(), ext) == 0)
      return true;
  }
  return false;
}

Resolution resolve_model(const std::string& ref, const Locations& loc) {
  if (ref.empty()) fail(ErrorKind::kInvalidInput, "models", "empty model reference");
  Resolution r;
  std::error_code ec;
  if (fs::exists(ref, ec) || fs::is_symlink(ref, ec) || looks_like_path(ref)) {
    r.entry.name = ref;
    r.entry.store = kStorePath;
    r.entry.path = ref;
    r.entry.hf_folder = fs::is_directory(ref, ec);
    return r;
  }
  const std::vector<Lookup> stores = lookups(ref, loc);
  bool found = false;
  for (const auto& s : stores) {
    if (!s.find) continue;
    if (!found) {
      if (auto e = s.find()) {
        r.entry = std::move(*e);
        found = true;
      }
      continue;
    }
    try {
      if (auto other = s.find()) {
        r.notes.push_back("'" + ref + "' is in " + r.entry.store + " (" + r.entry.path +
                          ") and also in " + other->store + " (" + other->path + "); using the " +
                          r.entry.store + " one");
      }
    } catch (const Error&) {
      // A broken copy in a later store does not matter: the first one is used.
    }
  }
  if (found) return r;
  std::string msg = "'" + ref + "' is not a file or folder, and no model store has it; looked in:";
  for (const auto& s : stores) msg += "\n  " + s.place;
  const std::string close = close_matches(ref, loc);
  msg += close.empty() ? "\n  no close matches in the stores (`hearth list` shows what they hold)"
                       : "\n  close matches: " + close;
  fail(ErrorKind::kNotFound, "models", msg);
}

std::vector<ModelEntry> list_store_models(const Locations& loc) {
  std::vector<ModelEntry> out = hf_list(loc.hf_hub);
  for (auto& e : lmstudio_list(loc.lmstudio)) out.push_back(std::move(e));
  for (auto& e : ollama_list(loc.ollama)) out.push_back(std::move(e));
  return out;
}

}  // namespace hearth::store
