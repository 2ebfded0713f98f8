// hearth: the single executable; sub-commands live in cmd_*.cpp.
#include <cstdio>
#include <exception>

#include "cli/commands.h"
#include "core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"Hearth: a local LLM inference server"};
  app.set_version_flag("--version", std::string("hearth ") + HEARTH_VERSION);
  app.require_subcommand(1);
  hearth::cli::add_run_command(app);
  hearth::cli::add_serve_command(app);
  hearth::cli::add_bench_command(app);
  hearth::cli::add_inspect_command(app);
  hearth::cli::add_tokenize_command(app);
  hearth::cli::add_template_command(app);
  hearth::cli::add_info_command(app);
  hearth::cli::add_convert_command(app);
  hearth::cli::add_agent_command(app);
  hearth::cli::add_list_command(app);
  hearth::cli::add_rm_command(app);
  hearth::cli::add_pull_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  } catch (const hearth::Error& e) {
    std::fprintf(stderr, "hearth: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hearth: internal error: %s\n", e.what());
    return 3;
  }
  return 0;
}
