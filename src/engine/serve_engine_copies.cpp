// Block copies beside the steps: the KV disk tier's spills and installs and the swap's
// copies out and in start between steps (Backend::copy_ranges_*_async) and are finished
// here once the back-end says they are done, in the order they started. On a back-end
// whose copies complete at once (the CPU) each is finished right where it started, so
// the engine behaves as with synchronous copies; on CUDA they run on copy streams while
// the next steps of the other sequences run (see the contract in ops/backend.h).
#include <algorithm>
#include <unordered_map>

#include "engine/serve_engine.h"

namespace hearth::engine {

ops::Backend::CopyId ServeEngine::read_blocks_async(const BlockId* ids, int64_t n_ids, uint8_t* const* host) {
  std::vector<ops::HostRange> ranges;
  block_ranges(ids, n_ids, host, ranges);
  return model_.backend().copy_ranges_to_host_async(ranges.data(), static_cast<int64_t>(ranges.size()));
}

ops::Backend::CopyId ServeEngine::write_blocks_async(const BlockId* ids, int64_t n_ids, uint8_t* const* host) {
  std::vector<ops::HostRange> ranges;
  block_ranges(ids, n_ids, host, ranges);
  return model_.backend().copy_ranges_from_host_async(ranges.data(), static_cast<int64_t>(ranges.size()));
}

void ServeEngine::copies_poll(bool wait) {
  ops::Backend& be = model_.backend();
  while (!copies_.empty()) {
    PendingCopy& c = copies_.front();
    if (c.id != 0) {
      if (wait) {
        be.copy_wait(c.id);
      } else if (!be.copy_done(c.id)) {
        return;
      }
    }
    PendingCopy done = std::move(c);
    copies_.pop_front();
    copy_finished(done);
  }
}

void ServeEngine::copies_wait(ops::Backend::CopyId id) {
  if (id == 0) return;
  model_.backend().copy_wait(id);
  copies_poll(false);  // finishes every copy up to id (and any later one done by now)
}

void ServeEngine::copy_finished(PendingCopy& c) {
  switch (c.kind) {
    case PendingCopy::Kind::kSpill:
      for (kvdisk::WriteJob& job : c.jobs) disk_->offer(std::move(job));  // counts its own drops
      break;
    case PendingCopy::Kind::kInstall:
      install_finished(c);
      break;
    case PendingCopy::Kind::kSwapOut:
      swap_out_finished(c);
      break;
    case PendingCopy::Kind::kSwapIn:
      break;  // its source (c.kv) goes now
  }
}

void ServeEngine::copies_fence(const StepPlan& plan) {
  // Disk hits' uploads in flight and the blocks they write (a swap-in is fenced where it
  // starts: its sequence is in the very step that follows).
  std::unordered_map<BlockId, ops::Backend::CopyId> writing;
  for (const PendingCopy& c : copies_) {
    if (c.kind != PendingCopy::Kind::kInstall || c.id == 0) continue;
    for (BlockId b : c.blocks) writing[b] = c.id;
  }
  if (writing.empty()) return;
  ops::Backend::CopyId upto = 0;
  for (const StepItem& item : plan.items) {
    for (int32_t b : item.seq->kv.blocks) {
      if (auto it = writing.find(b); it != writing.end()) upto = std::max(upto, it->second);
    }
  }
  if (upto != 0) model_.backend().copy_fence(upto);
}

}  // namespace hearth::engine
