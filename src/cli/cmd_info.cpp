// `hearth info`: what this build and machine offer (version, CPU features, CUDA devices);
// `hearth info --tune`: the tuning keys with their values.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/cpu_features.h"
#include "backends/cuda_info.h"
#include "core/thread_pool.h"
#include "core/tune.h"
#include "cli/commands.h"

namespace hearth::cli {

void add_tune_option(CLI::App& cmd) {
  cmd.add_option_function<std::vector<std::string>>(
         "--tune",
         [](const std::vector<std::string>& lists) {
           for (const auto& l : lists) tune::apply(l);
         },
         "Tuning keys: key=value[,key=value...] (repeatable; `hearth info --tune` lists them)")
      ->type_name("KEY=VALUE,...");
}

void add_info_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("info", "Show build options and the devices Hearth can use");
  auto lists = std::make_shared<std::vector<std::string>>();
  auto* tune_opt = cmd->add_option("--tune", *lists,
                                   "List the tuning keys with their values (after these key=value,... settings)")
                       ->expected(0, 1)
                       ->type_name("[KEY=VALUE,...]");
  cmd->callback([lists, tune_opt]() {
    if (tune_opt->count() > 0) {
      for (const auto& l : *lists) tune::apply(l);
      std::fputs(tune::listing().c_str(), stdout);
      return;
    }
    std::printf("hearth %s\n", HEARTH_VERSION);
    std::printf("cpu: %d physical cores; %s\n", physical_core_count(),
                cpu::cpu_features_string(cpu::cpu_features()).c_str());
    std::printf("cuda: %s\n", backends::cuda_compiled() ? "compiled" : "not compiled");
    std::string err;
    auto devices = backends::cuda_devices(&err);
    if (devices.empty()) {
      std::printf("cuda devices: none (%s)\n", err.empty() ? "none visible" : err.c_str());
    }
    for (const auto& d : devices) {
      std::printf("cuda device %d: %s, %.1f GiB, sm_%d%d\n", d.index, d.name.c_str(),
                  static_cast<double>(d.total_memory) / (1024.0 * 1024.0 * 1024.0), d.compute_major,
                  d.compute_minor);
    }
  });
}

}  // namespace hearth::cli
