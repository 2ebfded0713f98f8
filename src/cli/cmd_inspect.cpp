// PLACEHOLDER: replaced by the real `hearth inspect` implementation.
#include "cli/commands.h"
#include "core/error.h"

namespace hearth::cli {

void add_inspect_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("inspect", "(not implemented yet)");
  cmd->callback([]() { fail(ErrorKind::kUnsupported, "inspect", "not implemented yet"); });
}

}  // namespace hearth::cli
