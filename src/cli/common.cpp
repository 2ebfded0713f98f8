#include "cli/common.h"

#include <sys/resource.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <fstream>

#include "backends/cuda_info.h"
#include "core/error.h"
#include "engine/warm_up.h"

namespace hearth::cli {

double peak_rss_gb() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) * 1024.0 / 1e9;  // ru_maxrss is in KiB on Linux
}

uint64_t available_memory() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

ops::KvType parse_kv_type(const std::string& name) {
  if (name == "f16") return ops::KvType::F16;
  if (name == "f32") return ops::KvType::F32;
  if (name == "q8_0") return ops::KvType::Q8_0;
  fail(ErrorKind::kInvalidInput, "cli", "--kv-type must be f16, f32 or q8_0, got '" + name + "'");
}

uint64_t parse_byte_size(const std::string& text, const std::string& option) {
  size_t pos = 0;
  double value = 0;
  try {
    value = std::stod(text, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  std::string unit = text.substr(pos);
  for (char& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (unit.size() > 1 && unit.back() == 'B') unit.pop_back();                 // "MB", "GIB" -> "M", "GI"
  if (unit.size() > 1 && unit.back() == 'I') unit.pop_back();                 // "GI" -> "G"
  double scale = 0;
  if (unit.empty()) scale = 1;
  else if (unit == "K") scale = 1024.0;
  else if (unit == "M") scale = 1024.0 * 1024;
  else if (unit == "G") scale = 1024.0 * 1024 * 1024;
  else if (unit == "T") scale = 1024.0 * 1024 * 1024 * 1024;
  const double bytes = value * scale;
  if (pos == 0 || scale == 0 || !(bytes >= 1) || bytes > 1e18) {
    fail(ErrorKind::kInvalidInput, "cli", option + " must be a size such as 512M or 2G, got '" + text + "'");
  }
  return static_cast<uint64_t>(bytes);
}

backends::Device choose_device(const std::string& spec, uint64_t need_bytes, const std::string& command) {
  std::string note;
  const backends::Device d = backends::resolve_device(spec, need_bytes + kDeviceReserveBytes, &note);
  if (!note.empty()) std::fprintf(stderr, "hearth: running on the CPU: %s\n", note.c_str());
  if (d.cuda && spec != "auto") {
    const uint64_t free_b = backends::device_free_memory(d);
    if (free_b != 0 && need_bytes + kDeviceReserveBytes > free_b) {
      fail(ErrorKind::kResource, command,
           "the model and its cache need about " + std::to_string(need_bytes >> 20) + " MiB (+ " +
               std::to_string(kDeviceReserveBytes >> 20) + " MiB reserve) but " + d.str() + " has " +
               std::to_string(free_b >> 20) + " MiB free; lower --ctx / --kv-cache-bytes or use --device cpu");
    }
  }
  return d;
}

void log_device_memory(const ops::Backend& be, const backends::Device& d) {
  if (!d.cuda) return;
  std::fprintf(stderr, "hearth: loaded on %s: %.1f MiB of device memory in use\n", be.name().c_str(),
               static_cast<double>(be.device_memory_used()) / (1 << 20));
}

void apply_deterministic(ops::Backend& be, bool on) {
  if (!on) return;
  if (!be.set_deterministic(true)) {
    fail(ErrorKind::kUnsupported, "--deterministic", "the " + be.name() + " back-end has no batch-invariant kernels");
  }
  std::fprintf(stderr,
               "hearth: deterministic: batch-invariant kernels on %s (a request's output does not depend on what else "
               "runs with it)\n",
               be.name().c_str());
}

void log_device_memory_total(const ops::Backend& be, const backends::Device& d) {
  if (!d.cuda) return;
  size_t free_b = 0, total_b = 0;
  std::string err;
  if (!backends::cuda_memory_info(d.index, &free_b, &total_b, &err)) return;
  const double mib = 1 << 20;
  const double used = static_cast<double>(total_b - free_b), own = static_cast<double>(be.device_memory_used());
  std::fprintf(stderr,
               "hearth: device memory on %s: %.1f MiB in use of %.1f MiB (%.1f MiB allocated by hearth: weights, KV "
               "cache, states, scratch; %.1f MiB CUDA context, libraries, graphs and pools)\n",
               d.str().c_str(), used / mib, static_cast<double>(total_b) / mib, own / mib,
               std::max(0.0, used - own) / mib);
}

void log_warm_up(model::CausalLm& model, ops::Backend& be, int64_t n_ctx, ops::KvType kv_type) {
  const double s = engine::warm_up(model, be, n_ctx, kv_type);
  std::fprintf(stderr, "hearth: warmed up %s in %.0f ms (a prompt of up to %lld tokens and a decode step; --no-warmup skips it)\n",
               be.name().c_str(), s * 1e3, static_cast<long long>(engine::kWarmUpPrompt));
}

void log_vision_warm_up(model::VisionEncoder& enc) {
  // One image of 32 x 32 patches (256 tokens): loads the tower's kernels and the library
  // handles its products use, as log_warm_up does for the language model.
  vision::Patches p;
  p.grid_t = 1;
  p.grid_h = p.grid_w = 32;
  p.patch_floats = static_cast<int32_t>(enc.hparams().patch_floats());
  p.data.assign(static_cast<size_t>(p.n_patches() * p.patch_floats), 0.0f);
  const auto t0 = std::chrono::steady_clock::now();
  enc.encode({&p});
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "hearth: warmed up the vision encoder in %.0f ms (one 512 x 512 image)\n", ms);
}

}  // namespace hearth::cli
