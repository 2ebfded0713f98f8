#include "ops/backend.h"

#include "core/error.h"

namespace hearth::ops {

void Backend::moe_ffn(const MoeLayer&, const float*, int64_t, float*) {
  fail(ErrorKind::kUnsupported, name(), "moe_ffn: this back-end routes experts through the model's generic path");
}

}  // namespace hearth::ops
