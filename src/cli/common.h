// Helpers shared by the sub-commands that load a model (`run`, `serve`).
#pragma once

#include <cstdint>
#include <string>

#include "backends/backend_factory.h"
#include "model/causal_lm.h"
#include "model/vision_encoder.h"
#include "ops/backend.h"

namespace hearth::cli {

// The process's peak resident memory in GB (getrusage).
double peak_rss_gb();
// MemAvailable from /proc/meminfo in bytes; 0 when unknown.
uint64_t available_memory();
// "f16" / "f32" / "q8_0" -> KvType; anything else throws Error naming the option.
ops::KvType parse_kv_type(const std::string& name);
// "123", "512K", "512M", "1.5G", "2GiB", "1T" (binary multiples) -> bytes; throws Error
// naming `option` on anything else.
uint64_t parse_byte_size(const std::string& text, const std::string& option);

// Device memory kept free beyond weights and cache (CUDA context, cuBLAS workspace,
// scratch of the largest step).
constexpr uint64_t kDeviceReserveBytes = uint64_t{1} << 30;
// `serve`'s prompt tokens per step on a GPU when --prefill-chunk is not given (512 on the CPU).
constexpr int32_t kGpuPrefillChunk = 1024;
// Resolves --device for a model that needs `need_bytes` of device memory (weights + KV
// cache): auto falls back to the CPU with a log line saying why; an explicit CUDA
// device that cannot hold it is refused before loading, with the numbers.
backends::Device choose_device(const std::string& spec, uint64_t need_bytes, const std::string& command);
// After loading: one stderr line with the device memory the back-end holds (CUDA only).
void log_device_memory(const ops::Backend& be, const backends::Device& d);
// --deterministic: turns the back-end's batch-invariant kernels on (with a log line), or
// fails with Error(kUnsupported) when it has none. Nothing when off.
void apply_deterministic(ops::Backend& be, bool on);
// Once everything is allocated (weights, KV cache, states, warm-up): the device memory in
// use on the GPU, split into what the back-end allocated and the rest (CUDA context,
// libraries, graphs, the allocator's pool). Nothing on the CPU.
void log_device_memory_total(const ops::Backend& be, const backends::Device& d);
// On a GPU, before the first request: engine::warm_up, then one stderr line with its time.
void log_warm_up(model::CausalLm& model, ops::Backend& be, int64_t n_ctx, ops::KvType kv_type);
// The vision encoder's counterpart of log_warm_up (GPU: before the first image is timed).
void log_vision_warm_up(model::VisionEncoder& enc);

}  // namespace hearth::cli
