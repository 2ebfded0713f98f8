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

void CausalLm::run_step(KvPool& pool, std::vector<float>& out) {
  if (!takes_images() && (!lay_.embd_rows.empty() || !lay_.pos3.empty()))
    fail(ErrorKind::kUnsupported, "model", "this model takes text only: a step with image rows");
  backend().begin_step(lay_.desc);  // (uploaded once where the back-end has device memory)
  try {
    run(pool, out);
  } catch (const ops::StepRetry&) {
    run(pool, out);  // nothing of the first attempt ran; the back-end now runs it op by op
  }
}

std::unique_ptr<CausalLm> load_causal_lm(const gguf::File& file, ops::Backend& backend) {
  const ArchTraits* arch = find_arch(file.get_string("general.architecture"));
  if (arch != nullptr && arch->hybrid) return std::make_unique<HybridModel>(file, backend);
  return std::make_unique<LlamaModel>(file, backend);
}

}  // namespace hearth::model
