// `hearth pull ORG/NAME[:QUANT]`: downloads the files a model needs from a Hugging Face hub
// into the hub cache, in the layout huggingface_hub writes (so transformers and `hf` see
// the same files):
//   HUB/models--ORG--NAME/blobs/<sha256 of an LFS file, or the git blob id>
//   HUB/models--ORG--NAME/snapshots/<commit>/<file>  -> ../../blobs/<blob>
//   HUB/models--ORG--NAME/refs/<revision>             the commit
// A blob is written as <blob>.incomplete and resumed from there after an interrupt; an LFS
// file is checked against the hub's sha256 before it is renamed into place.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace hearth::store {

struct HubFile {
  std::string path;     // in the repo ("model-Q4_K_M.gguf", "sub/x.json")
  uint64_t size = 0;
  std::string sha256;   // LFS files: the content's sha256 (the blob's name); "" otherwise
  std::string blob_id;  // the git blob id (the blob's name for a non-LFS file)
};

// The files of a repo listing a `pull` takes: for a GGUF repo, the model `quant` picks
// (all shards of a split one; the only one when `quant` is empty) and the mmproj*.gguf
// projectors; for an HF-format repo, config and tokenizer files, *.safetensors and their
// index, preprocessor/generation configs and chat templates. Throws Error naming `what`
// and listing the quants when none or several match.
std::vector<HubFile> pick_pull_files(const std::vector<HubFile>& all, const std::string& quant,
                                     const std::string& what);

struct PullProgress {
  std::string file;
  uint64_t done = 0, total = 0;
  bool finished = false;  // the file is complete (verified)
};

struct PullOptions {
  std::string hub_cache;  // Locations::hf_hub
  std::string endpoint;   // HubSettings::endpoint
  std::string token;      // HubSettings::token ("" for none)
  std::function<void(const PullProgress&)> progress;
};

struct PullResult {
  std::string commit;
  std::string snapshot;             // HUB/models--ORG--NAME/snapshots/<commit>
  std::vector<std::string> files;   // the repo paths fetched (or already there)
};

// Throws Error: 401/403 (gated or private: names HF_TOKEN), 404 (repo, revision or file),
// network and disk errors (the partial file is kept for a resume), a sha256 mismatch (the
// partial file is deleted).
PullResult pull_model(const PullOptions& o, const std::string& org, const std::string& name,
                      const std::string& quant, const std::string& revision);

}  // namespace hearth::store
