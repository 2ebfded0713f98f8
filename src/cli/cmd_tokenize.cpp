// PLACEHOLDER: replaced by the real `hearth tokenize` implementation.
#include "cli/commands.h"
#include "core/error.h"

namespace hearth::cli {

void add_tokenize_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("tokenize", "(not implemented yet)");
  cmd->callback([]() { fail(ErrorKind::kUnsupported, "tokenize", "not implemented yet"); });
}

}  // namespace hearth::cli
