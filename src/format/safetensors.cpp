// safetensors reader; see safetensors.h for the format and the checks.
#include "format/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/half.h"

namespace hearth::safetensors {

namespace {

// A header above this is refused before any allocation (real ones are well under 1 MiB;
// the reference implementation caps at 100 MB too).
constexpr uint64_t kMaxHeader = 100ull << 20;

struct DTypeRow {
  const char* name;
  DType type;
  size_t size;
};
constexpr DTypeRow kDTypes[] = {
    {"F64", DType::kF64, 8},   {"F32", DType::kF32, 4}, {"F16", DType::kF16, 2},
    {"BF16", DType::kBF16, 2}, {"I64", DType::kI64, 8}, {"I32", DType::kI32, 4},
    {"I16", DType::kI16, 2},   {"I8", DType::kI8, 1},   {"U8", DType::kU8, 1},
    {"BOOL", DType::kBool, 1},
};

uint16_t load_u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t load_u32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}
uint64_t load_u64(const uint8_t* p) {
  return load_u32(p) | (static_cast<uint64_t>(load_u32(p + 4)) << 32);
}

}  // namespace

bool parse_dtype(const std::string& name, DType* out) {
  for (const auto& r : kDTypes)
    if (name == r.name) {
      *out = r.type;
      return true;
    }
  return false;
}

const char* dtype_name(DType t) {
  for (const auto& r : kDTypes)
    if (r.type == t) return r.name;
  return "?";
}

size_t dtype_size(DType t) {
  for (const auto& r : kDTypes)
    if (r.type == t) return r.size;
  return 0;
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

File File::open(const std::string& path) {
  File f;
  f.label_ = path;
  f.mapped_ = MappedFile(path);
  f.parse_header(f.mapped_.data(), f.mapped_.size());
  return f;
}

File File::parse(const uint8_t* bytes, size_t size, const std::string& label) {
  File f;
  f.label_ = label;
  f.owned_.assign(bytes, bytes + size);
  f.parse_header(f.owned_.data(), f.owned_.size());
  return f;
}

void File::parse_header(const uint8_t* bytes, size_t size) {
  auto bad = [&](const std::string& msg) {
    fail(ErrorKind::kInvalidInput, "safetensors", label_ + ": " + msg);
  };
  if (size < 8)
    bad("file of " + std::to_string(size) + " bytes is shorter than the 8-byte header length");
  const uint64_t n = load_u64(bytes);
  if (n > kMaxHeader) bad("header length " + std::to_string(n) + " exceeds the 100 MiB limit");
  if (n > size - 8)
    bad("header length " + std::to_string(n) + " extends past the end of the file (" +
        std::to_string(size) + " bytes)");
  const uint8_t* data = bytes + 8 + n;
  const uint64_t data_size = size - 8 - n;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(bytes + 8, bytes + 8 + n);
  } catch (const nlohmann::json::exception& e) {
    bad(std::string("header is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) bad("header is not a JSON object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const auto& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) bad("__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) bad("__metadata__ value '" + m.key() + "' is not a string");
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    auto tbad = [&](const std::string& msg) { bad("tensor '" + name + "': " + msg); };
    if (!v.is_object()) tbad("entry is not an object");
    TensorInfo t;
    t.name = name;
    auto dt = v.find("dtype");
    if (dt == v.end() || !dt->is_string()) tbad("missing or non-string dtype");
    if (!parse_dtype(dt->get<std::string>(), &t.dtype))
      tbad("unknown dtype '" + dt->get<std::string>() + "'");
    auto sh = v.find("shape");
    if (sh == v.end() || !sh->is_array()) tbad("missing or non-array shape");
    if (sh->size() > 8) tbad("more than 8 dimensions");
    // Element count with overflow checks: every factor fits and the byte size stays < 2^62.
    uint64_t numel = 1;
    for (const auto& d : *sh) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0)
        tbad("shape entries must be non-negative integers");
      const uint64_t dim = d.get<uint64_t>();
      if (dim != 0 && numel > (uint64_t{1} << 62) / dim) tbad("shape too large");
      numel *= dim;
      t.shape.push_back(static_cast<int64_t>(dim));
    }
    if (numel > (uint64_t{1} << 62) / dtype_size(t.dtype)) tbad("shape too large");
    auto off = v.find("data_offsets");
    if (off == v.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
        !(*off)[1].is_number_unsigned())
      tbad("data_offsets must be [begin, end] with non-negative integers");
    t.begin = (*off)[0].get<uint64_t>();
    t.end = (*off)[1].get<uint64_t>();
    if (t.begin > t.end)
      tbad("data_offsets begin " + std::to_string(t.begin) + " > end " + std::to_string(t.end));
    if (t.end > data_size)
      tbad("data_offsets end " + std::to_string(t.end) + " extends past the data region (" +
           std::to_string(data_size) + " bytes)");
    if (t.end - t.begin != numel * dtype_size(t.dtype))
      tbad("data_offsets span " + std::to_string(t.end - t.begin) +
           " bytes but shape and dtype need " + std::to_string(numel * dtype_size(t.dtype)));
    t.data = data + t.begin;
    index_[name] = tensors_.size();
    tensors_.push_back(std::move(t));
  }
  // No two tensors may share bytes.
  std::vector<const TensorInfo*> order;
  for (const auto& t : tensors_) order.push_back(&t);
  std::sort(order.begin(), order.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < order.size(); ++i)
    if (order[i]->begin < order[i - 1]->end)
      bad("tensors '" + order[i - 1]->name + "' and '" + order[i]->name + "' overlap");
}

const TensorInfo* File::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& File::get(const std::string& name) const {
  const TensorInfo* t = find(name);
  if (!t) fail(ErrorKind::kNotFound, "safetensors", label_ + ": no tensor '" + name + "'");
  return *t;
}

std::vector<double> File::to_f64(const TensorInfo& t) const {
  const int64_t n = t.numel();
  std::vector<double> out(static_cast<size_t>(n));
  const uint8_t* p = t.data;
  switch (t.dtype) {
    case DType::kF64:
      for (int64_t i = 0; i < n; ++i) {
        const uint64_t u = load_u64(p + 8 * i);
        std::memcpy(&out[i], &u, 8);
      }
      break;
    case DType::kF32:
      for (int64_t i = 0; i < n; ++i) out[i] = f32_from_bits(load_u32(p + 4 * i));
      break;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) out[i] = f16_to_f32(load_u16(p + 2 * i));
      break;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(load_u16(p + 2 * i));
      break;
    default:
      fail(ErrorKind::kUnsupported, "safetensors",
           label_ + ": tensor '" + t.name + "' has dtype " + dtype_name(t.dtype) +
               ", not a floating-point type");
  }
  return out;
}

std::vector<float> File::to_f32(const TensorInfo& t) const {
  const std::vector<double> d = to_f64(t);
  return std::vector<float>(d.begin(), d.end());
}

}  // namespace hearth::safetensors
