// `hearth info`: what this build and machine offer (version, CPU features, CUDA devices).
#include <cstdio>

#include "backends/cpu/cpu_features.h"
#include "backends/cuda_info.h"
#include "core/thread_pool.h"
#include "cli/commands.h"

namespace hearth::cli {

void add_info_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("info", "Show build options and the devices Hearth can use");
  cmd->callback([]() {
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
