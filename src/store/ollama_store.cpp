#include "store/ollama_store.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "store/folder_scan.h"

namespace hearth::store {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kModelLayer = "application/vnd.ollama.image.model";
constexpr const char* kProjectorLayer = "application/vnd.ollama.image.projector";

bool valid_part(const std::string& s) {
  if (s.empty() || s == "." || s == "..") return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
  });
}

json read_manifest(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorKind::kIo, "models", path.string() + ": cannot open the Ollama manifest");
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    fail(ErrorKind::kInvalidInput, "models",
         path.string() + ": the Ollama manifest is not valid JSON: " + e.what());
  }
}

// blobs/sha256-<hex> for the layer of `media_type`; "" when the manifest has none.
std::string layer_blob(const json& manifest, const std::string& root, const char* media_type,
                       const fs::path& path) {
  if (!manifest.is_object() || !manifest.contains("layers") || !manifest["layers"].is_array()) {
    fail(ErrorKind::kInvalidInput, "models",
         path.string() + ": the Ollama manifest has no \"layers\" array");
  }
  for (const auto& layer : manifest["layers"]) {
    if (!layer.is_object() || layer.value("mediaType", "") != media_type) continue;
    const std::string digest = layer.value("digest", "");
    if (digest.rfind("sha256:", 0) != 0 || digest.size() != 7 + 64 ||
        !std::all_of(digest.begin() + 7, digest.end(),
                     [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); })) {
      fail(ErrorKind::kInvalidInput, "models",
           path.string() + ": the " + media_type + " layer's digest '" + digest +
               "' is not sha256:<64 hex digits>");
    }
    return (fs::path(root) / "blobs" / ("sha256-" + digest.substr(7))).string();
  }
  return "";
}

ModelEntry entry_from_manifest(const std::string& root, const fs::path& manifest_path,
                               std::string name) {
  const json manifest = read_manifest(manifest_path);
  ModelEntry e;
  e.name = std::move(name);
  e.store = kStoreOllama;
  e.path = layer_blob(manifest, root, kModelLayer, manifest_path);
  if (e.path.empty()) {
    fail(ErrorKind::kInvalidInput, "models",
         manifest_path.string() + ": the Ollama manifest has no layer of mediaType " + kModelLayer);
  }
  check_readable(e.path, e.name + " (manifest " + manifest_path.string() + ")");
  e.mmproj = layer_blob(manifest, root, kProjectorLayer, manifest_path);
  const std::string tag = manifest_path.filename().string();
  e.quant_tag = quant_tag_of(tag + ".gguf");
  return e;
}

}  // namespace

std::optional<OllamaRef> parse_ollama_ref(const std::string& text) {
  OllamaRef ref;
  std::string s = text;
  const size_t last_slash = s.rfind('/');
  if (const size_t colon = s.rfind(':');
      colon != std::string::npos && (last_slash == std::string::npos || colon > last_slash)) {
    ref.tag = s.substr(colon + 1);
    s.resize(colon);
  }
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t slash = s.find('/', start);
    parts.push_back(
        s.substr(start, slash == std::string::npos ? std::string::npos : slash - start));
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  if (parts.size() > 3) return std::nullopt;
  ref.name = parts.back();
  if (parts.size() >= 2) ref.ns = parts[parts.size() - 2];
  if (parts.size() == 3) ref.registry = parts[0];
  for (const auto* p : {&ref.registry, &ref.ns, &ref.name, &ref.tag}) {
    if (!valid_part(*p)) return std::nullopt;
  }
  return ref;
}

std::string ollama_name(const OllamaRef& ref) {
  std::string s = ref.name + ":" + ref.tag;
  if (ref.registry != kOllamaRegistry) return ref.registry + "/" + ref.ns + "/" + s;
  if (ref.ns != "library") return ref.ns + "/" + s;
  return s;
}

std::optional<ModelEntry> ollama_resolve(const std::string& root, const OllamaRef& ref) {
  if (root.empty()) return std::nullopt;
  const fs::path dir = fs::path(root) / "manifests" / ref.registry / ref.ns / ref.name;
  fs::path manifest = dir / ref.tag;
  std::error_code ec;
  if (!fs::is_regular_file(manifest, ec)) {
    // Tags like hf.co/ORG/NAME:Q4_K_M are written as typed: try a case-insensitive match.
    bool found = false;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      if (lower(it->path().filename().string()) == lower(ref.tag) && it->is_regular_file(ec)) {
        manifest = it->path();
        found = true;
      }
    }
    if (!found) return std::nullopt;
  }
  return entry_from_manifest(root, manifest, ollama_name(ref));
}

std::vector<ModelEntry> ollama_list(const std::string& root) {
  std::vector<ModelEntry> out;
  const fs::path manifests = fs::path(root) / "manifests";
  std::error_code ec;
  std::vector<fs::path> files;
  for (fs::recursive_directory_iterator it(manifests, ec), end; !ec && it != end;
       it.increment(ec)) {
    if (it.depth() == 3 && it->is_regular_file(ec)) files.push_back(it->path());
  }
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    const fs::path rel = f.lexically_relative(manifests);
    std::vector<std::string> parts;
    for (const auto& p : rel) parts.push_back(p.string());
    if (parts.size() != 4) continue;
    const OllamaRef ref{parts[0], parts[1], parts[2], parts[3]};
    try {
      out.push_back(entry_from_manifest(root, f, ollama_name(ref)));
    } catch (const Error& e) {
      ModelEntry bad;
      bad.name = ollama_name(ref);
      bad.store = kStoreOllama;
      bad.path = f.string();
      bad.error = e.what();
      out.push_back(std::move(bad));
    }
  }
  return out;
}

}  // namespace hearth::store
