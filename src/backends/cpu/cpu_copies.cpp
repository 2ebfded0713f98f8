// CpuBackend's block copies beside the steps (ops/backend.h, copy_ranges_*_async): host
// memory on both sides, so each is done at once, unless --tune cpu.copy_lag=N holds them
// back for N steps as a GPU's copy streams would (cpu_backend.h): then the callers' side of the
// contract (host memory left alone until done, uploads fenced before a step reads them,
// downloads finished only when polled) is exercised on the CPU, and a caller that breaks
// it reads stale or unwritten bytes that its tests see.
#include <cstring>

#include "backends/cpu/cpu_backend.h"
#include "core/error.h"
#include "core/tune.h"

namespace hearth::cpu {
namespace {

void check_ranges(const ops::HostRange* r, int64_t n, const char* op) {
  for (int64_t i = 0; i < n; ++i) {
    if (r[i].buf == nullptr || r[i].offset < 0 || r[i].n < 0 || r[i].offset + r[i].n > r[i].buf->size() ||
        (r[i].n > 0 && r[i].host == nullptr)) {
      fail(ErrorKind::kInternal, "cpu", std::string(op) + ": range " + std::to_string(i) + " out of its buffer");
    }
  }
}

}  // namespace

ops::Backend::CopyId CpuBackend::copy_ranges_to_host_async(const ops::HostRange* r, int64_t n) {
  const int64_t lag = tune::get(tune::kCpuCopyLag);
  if (lag == 0 && lagged_.empty()) return ops::Backend::copy_ranges_to_host_async(r, n);
  check_ranges(r, n, "copy_ranges_to_host");
  LaggedCopy c;
  c.id = ++copies_started_;
  c.done_at_step = steps_begun_ + lag;
  c.polls_left = 64 * lag;
  for (int64_t i = 0; i < n; ++i) {  // what the steps so far left there
    float* src = r[i].buf->data() + r[i].offset;
    c.ranges.push_back({src, r[i].host, r[i].n});
    c.taken.emplace_back(src, src + r[i].n);
  }
  lagged_.push_back(std::move(c));
  return copies_started_;
}

ops::Backend::CopyId CpuBackend::copy_ranges_from_host_async(const ops::HostRange* r, int64_t n) {
  const int64_t lag = tune::get(tune::kCpuCopyLag);
  if (lag == 0 && lagged_.empty()) return ops::Backend::copy_ranges_from_host_async(r, n);
  check_ranges(r, n, "copy_ranges_from_host");
  LaggedCopy c;
  c.id = ++copies_started_;
  c.upload = true;
  c.done_at_step = steps_begun_ + lag;
  c.polls_left = 64 * lag;
  // The host side is read when it lands (it is the copy's until then); the buffers are
  // resolved now (the HostRange array and its Buffer objects are the caller's again).
  for (int64_t i = 0; i < n; ++i) c.ranges.push_back({r[i].buf->data() + r[i].offset, r[i].host, r[i].n});
  lagged_.push_back(std::move(c));
  return copies_started_;
}

void CpuBackend::finish_lagged(LaggedCopy& c) {
  for (size_t i = 0; i < c.ranges.size(); ++i) {
    const LaggedCopy::Range& x = c.ranges[i];
    if (x.n == 0) continue;
    if (!c.upload) {
      std::memcpy(x.host, c.taken[i].data(), sizeof(float) * static_cast<size_t>(x.n));
    } else if (!c.landed) {
      std::memcpy(x.dev, x.host, sizeof(float) * static_cast<size_t>(x.n));
    }
  }
  c.landed = true;
}

bool CpuBackend::copy_done(CopyId id) {
  while (!lagged_.empty() && lagged_.front().id <= id) {
    LaggedCopy& c = lagged_.front();
    if (steps_begun_ < c.done_at_step && c.polls_left > 0) {
      --c.polls_left;
      return false;
    }
    finish_lagged(c);
    lagged_.pop_front();
  }
  return id <= copies_started_;
}

void CpuBackend::copy_wait(CopyId id) {
  while (!lagged_.empty() && lagged_.front().id <= id) {
    finish_lagged(lagged_.front());
    lagged_.pop_front();
  }
}

void CpuBackend::copy_fence(CopyId id) {
  for (LaggedCopy& c : lagged_) {
    if (c.id > id) break;
    if (!c.upload || c.landed) continue;
    for (const LaggedCopy::Range& x : c.ranges) {
      if (x.n > 0) std::memcpy(x.dev, x.host, sizeof(float) * static_cast<size_t>(x.n));
    }
    c.landed = true;
  }
}

}  // namespace hearth::cpu
