// `hearth pull ORG/NAME[@REV][:QUANT]`: downloads a model from the Hugging Face hub
// ($HF_ENDPOINT for a mirror, $HF_TOKEN for gated repos) into the hub cache, where `-m
// ORG/NAME[:QUANT]` then finds it. A progress bar with speed and ETA on stderr (plain
// lines, one per file, when stderr is not a terminal).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "core/error.h"
#include "store/hf_cache.h"
#include "store/hub_pull.h"
#include "store/locations.h"

namespace hearth::cli {
namespace {

std::string mib(uint64_t n) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f MiB", static_cast<double>(n) / 1048576.0);
  return b;
}

// Draws the bar at most 10 times a second on a terminal; a line per finished file otherwise.
class ProgressBar {
 public:
  ProgressBar() : tty_(isatty(STDERR_FILENO) != 0) {}

  void update(const store::PullProgress& p) {
    using clock = std::chrono::steady_clock;
    const auto now = clock::now();
    if (p.file != file_) {
      file_ = p.file;
      start_ = now;
      first_ = p.done;
    }
    const double secs = std::chrono::duration<double>(now - start_).count();
    const double speed = secs > 0.05 ? static_cast<double>(p.done - first_) / secs : 0.0;
    if (p.finished) {
      if (tty_) std::fprintf(stderr, "\r\033[K");
      std::fprintf(stderr, "hearth: %s %s done\n", p.file.c_str(), mib(p.total).c_str());
      return;
    }
    if (!tty_ || now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    const double frac = p.total ? static_cast<double>(p.done) / static_cast<double>(p.total) : 0.0;
    const int width = 30, filled = static_cast<int>(frac * width);
    std::string bar(static_cast<size_t>(filled), '#');
    bar += std::string(static_cast<size_t>(width - filled), '-');
    char eta[32] = "--";
    if (speed > 0 && p.total > p.done) {
      const long s = static_cast<long>(static_cast<double>(p.total - p.done) / speed);
      std::snprintf(eta, sizeof eta, "%ld:%02ld", s / 60, s % 60);
    }
    std::fprintf(stderr, "\r\033[K%s [%s] %3.0f%% %s/%s %s/s ETA %s", p.file.c_str(), bar.c_str(),
                 frac * 100, mib(p.done).c_str(), mib(p.total).c_str(),
                 mib(static_cast<uint64_t>(speed)).c_str(), eta);
    std::fflush(stderr);
  }

 private:
  bool tty_;
  std::string file_;
  uint64_t first_ = 0;
  std::chrono::steady_clock::time_point start_{}, last_{};
};

void pull(const std::string& name) {
  const auto ref = store::parse_hf_ref(name);
  if (!ref) {
    fail(ErrorKind::kInvalidInput, "pull",
         "'" + name + "' is not a Hugging Face repo id (ORG/NAME[@REV][:QUANT])");
  }
  const store::Locations loc = store::locations_from_env();
  if (loc.hf_hub.empty())
    fail(ErrorKind::kNotFound, "pull", "no hub cache: set HF_HUB_CACHE, HF_HOME or HOME");
  const store::HubSettings hub = store::hub_settings_from_env();
  ProgressBar bar;
  store::PullOptions o;
  o.hub_cache = loc.hf_hub;
  o.endpoint = hub.endpoint;
  o.token = hub.token;
  o.progress = [&](const store::PullProgress& p) { bar.update(p); };
  const store::PullResult r = store::pull_model(o, ref->org, ref->name, ref->quant, ref->revision);
  std::printf("%s/%s%s: %zu file%s in %s\n", ref->org.c_str(), ref->name.c_str(),
              ref->quant.empty() ? "" : (":" + ref->quant).c_str(), r.files.size(),
              r.files.size() == 1 ? "" : "s", r.snapshot.c_str());
}

}  // namespace

void add_pull_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "pull", "Download a model from the Hugging Face hub into the hub cache");
  static std::string name;
  cmd->add_option("name", name, "ORG/NAME[@REV][:QUANT]")->required();
  cmd->callback([]() { pull(name); });
}

}  // namespace hearth::cli
