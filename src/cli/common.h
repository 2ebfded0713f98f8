// Helpers shared by the sub-commands that load a model (`run`, `serve`).
#pragma once

#include <cstdint>
#include <string>

#include "ops/backend.h"

namespace hearth::cli {

// The process's peak resident memory in GB (getrusage).
double peak_rss_gb();
// MemAvailable from /proc/meminfo in bytes; 0 when unknown.
uint64_t available_memory();
// "f16" / "f32" -> KvType; anything else throws Error naming the option.
ops::KvType parse_kv_type(const std::string& name);
// "123", "512K", "512M", "1.5G", "2GiB", "1T" (binary multiples) -> bytes; throws Error
// naming `option` on anything else.
uint64_t parse_byte_size(const std::string& text, const std::string& option);

}  // namespace hearth::cli
