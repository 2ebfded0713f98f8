#include "store/hub_pull.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "store/folder_scan.h"
#include "store/hub_http.h"

namespace fs = std::filesystem;

namespace hearth::store {
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::string base_name(const std::string& path) { return fs::path(path).filename().string(); }

// An HF-format repo's files a model needs.
bool hf_needed(const std::string& path) {
  const std::string f = lower(base_name(path));
  if (path.find('/') != std::string::npos) return false;  // top level only
  return f == "config.json" || f == "generation_config.json" ||
         f == "preprocessor_config.json" || f == "processor_config.json" ||
         f.rfind("tokenizer", 0) == 0 || f == "special_tokens_map.json" || f == "vocab.json" ||
         f == "merges.txt" || f == "added_tokens.json" || ends_with(f, ".safetensors") ||
         f == "model.safetensors.index.json" || f.rfind("chat_template", 0) == 0;
}

std::string sha256_of(const std::string& path) {
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr);
  std::ifstream in(path, std::ios::binary);
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    if (in.gcount() > 0) EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<size_t>(in.gcount()));
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(ctx.get(), md, &n);
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < n; ++i) {
    out += kHex[md[i] >> 4];
    out += kHex[md[i] & 15];
  }
  return out;
}

// 401/403/404 and transport failures as the user should read them.
[[noreturn]] void http_fail(const HttpReply& r, const std::string& what, const PullOptions& o) {
  if (r.status == 401 || r.status == 403) {
    fail(ErrorKind::kInvalidInput, "pull",
         what + ": the hub answered " + std::to_string(r.status) +
             (o.token.empty() ? " (a gated or private repo: set HF_TOKEN to a token with access)"
                              : " (HF_TOKEN is set but has no access to it: accept the repo's "
                                "terms on the hub, or use a token that may read it)"));
  }
  if (r.status == 404) fail(ErrorKind::kNotFound, "pull", what + ": not found on " + o.endpoint + " (404)");
  if (r.status == 0 || !r.error.empty()) {
    fail(ErrorKind::kIo, "pull", what + ": " + (r.error.empty() ? "no answer" : r.error));
  }
  fail(ErrorKind::kIo, "pull", what + ": the hub answered HTTP " + std::to_string(r.status));
}

std::string human(uint64_t n) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f MiB", static_cast<double>(n) / 1048576.0);
  return b;
}

}  // namespace

std::vector<HubFile> pick_pull_files(const std::vector<HubFile>& all, const std::string& quant,
                                     const std::string& what) {
  std::vector<HubFile> projectors;
  std::map<std::string, std::vector<HubFile>> models;  // label -> files (shards sorted)
  for (const HubFile& f : all) {
    const std::string name = base_name(f.path);
    if (!ends_with(lower(name), ".gguf")) continue;
    if (is_projector(name)) {
      projectors.push_back(f);
      continue;
    }
    std::string label = quant_tag_of(name);
    if (label.empty()) {
      const auto split = parse_split_name(name);
      label = split ? split->base : name.substr(0, name.size() - 5);
    }
    models[label].push_back(f);
  }
  std::vector<HubFile> out;
  if (models.empty()) {
    for (const HubFile& f : all)
      if (hf_needed(f.path)) out.push_back(f);
    const bool weights = std::any_of(out.begin(), out.end(), [](const HubFile& f) {
      return ends_with(f.path, ".safetensors");
    });
    if (!weights) {
      fail(ErrorKind::kNotFound, "pull",
           what + ": the repo has neither GGUF files nor *.safetensors weights");
    }
    if (!quant.empty()) {
      fail(ErrorKind::kInvalidInput, "pull",
           what + ": the repo holds no GGUF files (a Hugging Face format repo), so :" + quant +
               " picks nothing; pull it without a quant");
    }
    return out;
  }
  std::string list;
  for (const auto& [label, files] : models) list += (list.empty() ? "" : ", ") + label;
  const std::vector<HubFile>* picked = nullptr;
  if (quant.empty()) {
    if (models.size() > 1) {
      fail(ErrorKind::kInvalidInput, "pull",
           what + " holds " + std::to_string(models.size()) +
               " GGUF models; add :QUANT, one of: " + list);
    }
    picked = &models.begin()->second;
  } else {
    for (const auto& [label, files] : models) {
      if (lower(label) == lower(quant) || lower(label) == "ud-" + lower(quant)) picked = &files;
    }
    if (picked == nullptr) {
      fail(ErrorKind::kNotFound, "pull",
           what + ": no GGUF with quant '" + quant + "' (found: " + list + ")");
    }
  }
  out = *picked;
  std::sort(out.begin(), out.end(), [](const HubFile& a, const HubFile& b) { return a.path < b.path; });
  out.insert(out.end(), projectors.begin(), projectors.end());
  return out;
}

PullResult pull_model(const PullOptions& o, const std::string& org, const std::string& name,
                      const std::string& quant, const std::string& revision) {
  const std::string repo_id = org + "/" + name;
  const std::string what = repo_id + (revision == "main" ? "" : "@" + revision);
  const HttpReply info = http_get_text(
      o.endpoint + "/api/models/" + repo_id + "/revision/" + revision + "?blobs=true", o.token);
  if (info.status != 200 || !info.error.empty()) http_fail(info, what, o);
  std::vector<HubFile> all;
  PullResult result;
  try {
    const auto j = nlohmann::json::parse(info.body);
    result.commit = j.at("sha").get<std::string>();
    for (const auto& s : j.at("siblings")) {
      HubFile f;
      f.path = s.at("rfilename").get<std::string>();
      f.size = s.value("size", uint64_t{0});
      f.blob_id = s.value("blobId", std::string());
      if (s.contains("lfs") && s["lfs"].is_object()) {
        f.sha256 = s["lfs"].value("sha256", std::string());
        f.size = s["lfs"].value("size", f.size);
      }
      all.push_back(std::move(f));
    }
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorKind::kInvalidInput, "pull",
         what + ": the hub's file list is not what was expected: " + e.what());
  }
  if (result.commit.empty() || result.commit.find('/') != std::string::npos ||
      result.commit.find("..") != std::string::npos) {
    fail(ErrorKind::kInvalidInput, "pull", what + ": the hub gave a bad commit '" + result.commit + "'");
  }
  const std::vector<HubFile> files = pick_pull_files(all, quant, what);

  const fs::path repo = fs::path(o.hub_cache) / ("models--" + org + "--" + name);
  const fs::path snapshot = repo / "snapshots" / result.commit;
  std::error_code ec;
  fs::create_directories(repo / "blobs", ec);
  fs::create_directories(snapshot, ec);
  fs::create_directories(repo / "refs", ec);
  if (ec) fail(ErrorKind::kIo, "pull", "cannot create " + repo.string() + ": " + ec.message());
  result.snapshot = snapshot.string();

  for (const HubFile& f : files) {
    if (f.path.find("..") != std::string::npos || f.path.empty() || f.path[0] == '/')
      fail(ErrorKind::kInvalidInput, "pull", what + ": the hub listed a bad file name '" + f.path + "'");
    const std::string blob_name = !f.sha256.empty() ? f.sha256 : f.blob_id;
    if (blob_name.empty() || blob_name.find('/') != std::string::npos)
      fail(ErrorKind::kInvalidInput, "pull", what + ": no blob id for " + f.path);
    const fs::path blob = repo / "blobs" / blob_name;
    const std::string partial = blob.string() + ".incomplete";
    const bool have = fs::is_regular_file(blob, ec) && fs::file_size(blob, ec) == f.size;
    if (!have) {
      const std::string url = o.endpoint + "/" + repo_id + "/resolve/" + result.commit + "/" + f.path;
      const HttpReply r = http_download(url, o.token, partial, [&](uint64_t done, uint64_t total) {
        if (o.progress) o.progress({f.path, done, total ? total : f.size, false});
      });
      if (r.status / 100 != 2 || !r.error.empty()) {
        const uint64_t kept = fs::exists(partial, ec) ? fs::file_size(partial, ec) : 0;
        try {
          http_fail(r, what + ": " + f.path, o);
        } catch (const Error& e) {
          throw Error(e.kind(), std::string(e.what()) + (kept ? "; " + human(kept) + " kept in " + partial +
                                                   ", pull again to resume"
                                             : ""));
        }
      }
      const uint64_t got = fs::file_size(partial, ec);
      if (f.size != 0 && got != f.size) {
        fail(ErrorKind::kIo, "pull",
             what + ": " + f.path + ": the transfer ended after " + std::to_string(got) + " of " +
                 std::to_string(f.size) + " bytes; kept in " + partial + ", pull again to resume");
      }
      if (!f.sha256.empty()) {
        const std::string sum = sha256_of(partial);
        if (sum != f.sha256) {
          fs::remove(partial, ec);
          fail(ErrorKind::kInvalidInput, "pull",
               what + ": " + f.path + ": sha256 " + sum + " is not the hub's " + f.sha256 +
                   " (the download was corrupted; the partial file is deleted, pull again)");
        }
      }
      fs::rename(partial, blob, ec);
      if (ec) fail(ErrorKind::kIo, "pull", "cannot rename " + partial + ": " + ec.message());
    }
    const fs::path link = snapshot / f.path;
    fs::create_directories(link.parent_path(), ec);
    fs::remove(link, ec);
    fs::create_symlink(blob.lexically_relative(link.parent_path()), link, ec);
    if (ec) fail(ErrorKind::kIo, "pull", "cannot link " + link.string() + ": " + ec.message());
    if (o.progress) o.progress({f.path, f.size, f.size, true});
    result.files.push_back(f.path);
  }
  if (revision != result.commit) {
    std::ofstream(repo / "refs" / revision, std::ios::trunc) << result.commit;
  }
  return result;
}

}  // namespace hearth::store
