#include "core/error.h"

namespace hearth {

void fail(ErrorKind kind, const std::string& component, const std::string& message) {
  throw Error(kind, "[" + component + "] " + message);
}

}  // namespace hearth
