// PLACEHOLDER: replaced by the real `hearth template` implementation.
#include "cli/commands.h"
#include "core/error.h"

namespace hearth::cli {

void add_template_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("template", "(not implemented yet)");
  cmd->callback([]() { fail(ErrorKind::kUnsupported, "template", "not implemented yet"); });
}

}  // namespace hearth::cli
