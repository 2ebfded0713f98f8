#include "engine/spec_policy.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace hearth::engine {
namespace {

// Weight of the step before each new one: about the last 50 steps count.
constexpr double kForget = 0.98;

}  // namespace

void note_draft_seconds(double& draft_s, double seconds, size_t n) {
  if (n == 0) {
    draft_s *= 0.98;
    return;
  }
  const double s = seconds / static_cast<double>(n);
  draft_s = draft_s > 0 ? 0.9 * draft_s + 0.1 * s : s;
}

SpecMode parse_spec_mode(const std::string& s) {
  if (s == "off") return SpecMode::kOff;
  if (s == "ngram") return SpecMode::kNgram;
  if (s == "draft") return SpecMode::kDraft;
  if (s == "mtp") return SpecMode::kMtp;
  fail(ErrorKind::kInvalidInput, "spec", "unknown --spec '" + s + "' (expected ngram, draft, mtp or off)");
}

void StepCost::note(int64_t rows, double seconds) {
  if (rows < 1 || rows > max_rows_ || !(seconds > 0)) return;
  const auto x = static_cast<double>(rows);
  w_ = w_ * kForget + 1;
  x_ = x_ * kForget + x;
  y_ = y_ * kForget + seconds;
  xx_ = xx_ * kForget + x * x;
  xy_ = xy_ * kForget + x * seconds;
}

bool StepCost::known() const {
  if (w_ < 4) return false;
  const double mean = x_ / w_;
  return xx_ / w_ - mean * mean > 0.25;  // rows vary by more than half a row
}

double StepCost::per_row() const {
  if (!known()) return 0;
  const double var = xx_ * w_ - x_ * x_;
  return std::max(0.0, (xy_ * w_ - x_ * y_) / var);
}

double StepCost::fixed() const {
  if (w_ <= 0) return 0;
  return std::max(0.0, (y_ - per_row() * x_) / w_);
}

void Acceptance::note(int32_t drafted, int32_t accepted, int cls) {
  if (drafted <= 0) return;
  const int i = index(cls);
  accepted_[i] = accepted_[i] * kForget + accepted;
  rejected_[i] = rejected_[i] * kForget + (accepted < drafted ? 1 : 0);
}

void Acceptance::idle(int cls) {
  const int i = index(cls);
  accepted_[i] = accepted_[i] * kForget + (1 - kForget);
  rejected_[i] = rejected_[i] * kForget + (1 - kForget);
}

double Acceptance::p(int cls) const {
  const int i = index(cls);
  return accepted_[i] / (accepted_[i] + rejected_[i]);
}

int32_t draft_length(const StepCost& cost, int64_t rows, int32_t n_decode, double p, int32_t max_draft,
                     double draft_s) {
  if (max_draft <= 0 || n_decode <= 0) return 0;
  // Until the steps tell the costs apart: a row is taken to cost a tenth of a token (a
  // memory-bound decode step), which gives drafts of several lengths to measure.
  double row_cost = 0.1;
  const double t = cost.time(std::max<int64_t>(rows, 1));
  if (cost.known() && t > 0) row_cost = cost.per_row() * n_decode / t;  // in tokens
  if (t > 0) row_cost += std::max(0.0, draft_s) * n_decode / t;  // making the drafted token (a draft model)
  int32_t k = 0;
  double gain = 1;
  while (k < max_draft) {
    gain *= p;
    if (gain <= row_cost) break;
    ++k;
  }
  return k;
}

}  // namespace hearth::engine
