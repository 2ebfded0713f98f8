#include "model/causal_lm.h"

#include "model/hybrid_model.h"
#include "model/llama_model.h"

namespace hearth::model {

std::unique_ptr<CausalLm> load_causal_lm(const gguf::File& file, ops::Backend& backend) {
  const ArchTraits* arch = find_arch(file.get_string("general.architecture"));
  if (arch != nullptr && arch->hybrid) return std::make_unique<HybridModel>(file, backend);
  return std::make_unique<LlamaModel>(file, backend);
}

}  // namespace hearth::model
