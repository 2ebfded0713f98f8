#include "model/causal_lm.h"

#include "core/error.h"

#include "model/hybrid_model.h"
#include "model/llama_model.h"

namespace hearth::model {

void CausalLm::forward(KvCache& cache, const std::vector<int32_t>& tokens, bool all_logits, std::vector<float>& out,
                       const ops::RowReduce& last, std::span<const ops::PenaltyToken> penalties,
                       const SeqMedia* media) {
  if (tokens.empty()) {
    out.clear();
    lay_.picks.clear();
    return;
  }
  lay_.single(cache, tokens, all_logits, last, penalties, media);
  run_step(cache.pool(), out);
  cache.seq().n_past += static_cast<int64_t>(tokens.size());
}

void CausalLm::forward_batch(KvPool& pool, const std::vector<BatchSeq>& seqs, std::vector<float>& out) {
  lay_.batch(pool, seqs);
  if (lay_.tokens.empty()) {
    out.clear();
    lay_.picks.clear();
    return;
  }
  run_step(pool, out);
  for (const BatchSeq& b : seqs) {
    if (b.n_tokens > 0) b.kv->n_past += b.n_tokens;
  }
}

void CausalLm::run_step(KvPool& pool, std::vector<float>& out, const std::vector<MtpSeq>* mtp) {
  if (!takes_images() && (!lay_.embd_rows.empty() || !lay_.pos3.empty()))
    fail(ErrorKind::kUnsupported, "model", "this model takes text only: a step with image rows");
  backend().begin_step(lay_.desc);  // (uploaded once where the back-end has device memory)
  auto go = [&] { mtp != nullptr ? run_mtp(pool, *mtp, out) : run(pool, out); };
  try {
    go();
  } catch (const ops::StepRetry&) {
    go();  // nothing of the first attempt ran; the back-end now runs it op by op
  }
}

void CausalLm::enable_mtp() {
  fail(ErrorKind::kUnsupported, "model", "this model has no multi-token-prediction block (--spec mtp)");
}

void CausalLm::copy_hidden(MtpSeq::From, int64_t, int64_t, float*) {
  fail(ErrorKind::kInternal, "model", "copy_hidden on a model without an MTP block");
}

void CausalLm::run_mtp(KvPool&, const std::vector<MtpSeq>&, std::vector<float>&) {
  fail(ErrorKind::kInternal, "model", "forward_mtp on a model without an MTP block");
}

void CausalLm::forward_mtp(KvPool& pool, const std::vector<MtpSeq>& seqs, std::vector<float>& out) {
  if (!mtp_enabled()) fail(ErrorKind::kInternal, "model", "forward_mtp before enable_mtp");
  mtp_kv_.clear();
  mtp_kv_.reserve(seqs.size());  // (the layout keeps pointers to their block tables)
  std::vector<BatchSeq> b;
  b.reserve(seqs.size());
  for (const MtpSeq& m : seqs) {
    mtp_kv_.push_back(SeqKv{m.kv->blocks, m.pos0, -1});
    b.push_back(BatchSeq{&mtp_kv_.back(), m.tokens, m.n, m.logits, m.argmax_only});
  }
  lay_.key_salt = 0x4d5450;  // "MTP"
  try {
    lay_.batch(pool, b);
  } catch (...) {
    lay_.key_salt = 0;
    throw;
  }
  lay_.key_salt = 0;
  if (lay_.tokens.empty()) {
    out.clear();
    lay_.picks.clear();
    return;
  }
  run_step(pool, out, &seqs);
}

std::unique_ptr<CausalLm> load_causal_lm(const gguf::File& file, ops::Backend& backend) {
  const ArchTraits* arch = find_arch(file.get_string("general.architecture"));
  if (arch != nullptr && arch->hybrid) return std::make_unique<HybridModel>(file, backend);
  return std::make_unique<LlamaModel>(file, backend);
}

}  // namespace hearth::model
