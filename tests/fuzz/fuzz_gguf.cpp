// libFuzzer target for the GGUF reader: parses the input and touches every
// metadata value and every tensor's data view; a hearth::Error is the expected
// way to reject bad input, anything else (crash, sanitizer report, other
// exception, time-out, huge allocation) is a bug.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/error.h"
#include "format/gguf.h"

namespace {

using hearth::gguf::Value;
using hearth::gguf::ValueType;

uint64_t touch(const Value& v) {
  uint64_t h = v.u64 ^ static_cast<uint64_t>(v.i64) ^ v.str.size();
  for (unsigned char c : v.str) h = h * 31 + c;
  if (v.type == ValueType::ARRAY) {
    for (const Value& e : v.arr) h += touch(e);
  }
  // The converting accessors must throw Error, never anything else.
  try {
    h += static_cast<uint64_t>(v.as_int("fuzz"));
  } catch (const hearth::Error&) {
  }
  try {
    // Hash the bits: converting an arbitrary double to an integer would itself be UB.
    const double d = v.as_float("fuzz");
    uint64_t bits = 0;
    std::memcpy(&bits, &d, sizeof bits);
    h += bits;
  } catch (const hearth::Error&) {
  }
  return h;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto f = hearth::gguf::File::parse(data, size, "fuzz.gguf");
    volatile uint64_t sink = 0;
    for (const auto& kv : f.metadata()) sink = sink + touch(kv.value) + kv.key.size();
    for (const auto& t : f.tensors()) {
      uint64_t h = t.n_elements() + t.shape.size();
      // Read the first and last byte of every view: ASan flags any view outside the input.
      if (t.n_bytes > 0) h += t.data[0] + t.data[t.n_bytes - 1];
      sink = sink + h;
      if (f.find_tensor(t.name) == nullptr) __builtin_trap();
    }
    try {
      (void)f.find_string("general.architecture");
    } catch (const hearth::Error&) {
    }
    try {
      (void)f.find_int("general.alignment");
    } catch (const hearth::Error&) {
    }
  } catch (const hearth::Error&) {
  }
  return 0;
}
