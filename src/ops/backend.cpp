#include "ops/backend.h"

#include <cmath>

#include "core/error.h"
#include "ops/step_desc.h"

namespace hearth::ops {

void Backend::begin_step(const StepDesc& step) { begin_step(step.n_tokens()); }

void Backend::moe_ffn(const MoeLayer&, const float*, int64_t, float*) {
  fail(ErrorKind::kUnsupported, name(), "moe_ffn: this back-end routes experts through the model's generic path");
}

void Backend::layer_norm(const float*, const WeightView&, const WeightView&, int64_t, int64_t, float, float*) {
  fail(ErrorKind::kUnsupported, name(), "layer_norm: not implemented by this back-end");
}

void Backend::gelu(float*, int64_t, bool) {
  fail(ErrorKind::kUnsupported, name(), "gelu: not implemented by this back-end");
}

void Backend::attention_full(const float*, const float*, const float*, const FullAttentionSeg*, int64_t, int64_t,
                             int64_t, float, float*) {
  fail(ErrorKind::kUnsupported, name(), "attention_full: not implemented by this back-end");
}

void Backend::copy_ranges_to_host(const HostRange* ranges, int64_t n_ranges) {
  copy_wait(copy_ranges_to_host_async(ranges, n_ranges));
}

void Backend::copy_ranges_from_host(const HostRange* ranges, int64_t n_ranges) {
  copy_wait(copy_ranges_from_host_async(ranges, n_ranges));
}

Backend::CopyId Backend::copy_ranges_to_host_async(const HostRange* ranges, int64_t n_ranges) {
  for (int64_t i = 0; i < n_ranges; ++i) copy_to_host(*ranges[i].buf, ranges[i].offset, ranges[i].n, ranges[i].host);
  return ++copies_started_;
}

Backend::CopyId Backend::copy_ranges_from_host_async(const HostRange* ranges, int64_t n_ranges) {
  for (int64_t i = 0; i < n_ranges; ++i) copy_from_host(ranges[i].host, ranges[i].n, *ranges[i].buf, ranges[i].offset);
  return ++copies_started_;
}

void Backend::fetch_rows(Buffer& src, int64_t n_rows, int64_t n_cols, const RowReduce* reduce,
                         const PenaltyToken* /*penalties*/, float* dst, ArgmaxRow* picks) {
  copy_to_host(src, 0, n_rows * n_cols, dst);
  for (int64_t r = 0; r < n_rows; ++r) {
    if (reduce == nullptr || reduce[r].kind == RowKind::kCopy) continue;
    if (reduce[r].kind == RowKind::kDraw || reduce[r].n_penalty > 0) {
      picks[r] = ArgmaxRow{};  // not reduced here: the row is on the host, as it was
      continue;
    }
    const float* row = dst + r * n_cols;
    ArgmaxRow p;
    for (int64_t i = 0; i < n_cols; ++i) {
      if (!std::isfinite(row[i])) {
        p.bad = static_cast<int32_t>(i);
        p.bad_nan = std::isnan(row[i]) ? 1 : 0;
        break;
      }
      if (p.argmax < 0 || row[i] > row[p.argmax]) p.argmax = static_cast<int32_t>(i);
    }
    picks[r] = p;
  }
}

}  // namespace hearth::ops
