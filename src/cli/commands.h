// Sub-command registration. Each cmd_*.cpp adds one sub-command to the app;
// its callback throws hearth::Error on bad input (main turns that into a
// one-line message and exit status 2).
#pragma once

#include <CLI/CLI.hpp>

namespace hearth::cli {

void add_inspect_command(CLI::App& app);
void add_tokenize_command(CLI::App& app);
void add_template_command(CLI::App& app);
void add_info_command(CLI::App& app);
// `--tune key=value[,key=value...]` on a sub-command that creates a back-end: the keys of
// core/tune_keys.h, set while the command line is parsed (before the command's callback).
void add_tune_option(CLI::App& cmd);
void add_run_command(CLI::App& app);
void add_serve_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_convert_command(CLI::App& app);
void add_agent_command(CLI::App& app);
void add_list_command(CLI::App& app);
void add_rm_command(CLI::App& app);
void add_pull_command(CLI::App& app);

}  // namespace hearth::cli
