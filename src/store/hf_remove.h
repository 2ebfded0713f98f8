// `hearth rm`: removing one snapshot of a repo from the Hugging Face hub cache the way
// huggingface_hub's cache layout allows: the snapshot folder, the blobs no other snapshot
// links to, and the refs naming that commit; the whole models--ORG--NAME folder when no
// other snapshot is left. Planned first (to show and confirm), then applied.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "store/hf_cache.h"

namespace hearth::store {

struct HfRemoval {
  std::string repo_dir;               // HUB/models--ORG--NAME
  std::string commit;                 // the snapshot removed
  std::vector<std::string> blobs;     // blob files only this snapshot uses
  std::vector<std::string> refs;      // refs/* files naming the commit
  uint64_t bytes = 0;                 // the blobs' size on disk
  bool whole_repo = false;            // no other snapshot: the repo folder goes
};

// nullopt-free: throws Error(kNotFound) naming the folder when the cache has no such repo
// or revision. `ref.revision` is a ref name (main) or a commit hash.
HfRemoval plan_hf_remove(const std::string& hub, const HfRef& ref);

// Deletes what the plan names; throws Error(kIo) naming the path that could not go.
void apply_hf_remove(const HfRemoval& plan);

}  // namespace hearth::store
