#include "format/gguf_writer.h"

#include <cstring>
#include <fstream>

#include "core/error.h"

namespace hearth::gguf {
namespace {

[[noreturn]] void writer_error(const std::string& message) {
  fail(ErrorKind::kInvalidInput, "gguf-writer", message);
}

bool is_unsigned_type(ValueType t) {
  return t == ValueType::UINT8 || t == ValueType::UINT16 || t == ValueType::UINT32 ||
         t == ValueType::UINT64;
}
bool is_signed_type(ValueType t) {
  return t == ValueType::INT8 || t == ValueType::INT16 || t == ValueType::INT32 ||
         t == ValueType::INT64;
}

// Checks that every element of every (nested) array has the declared type.
void check_value(const Value& v, const std::string& key) {
  if (static_cast<uint32_t>(v.type) > static_cast<uint32_t>(ValueType::FLOAT64)) {
    writer_error("key '" + key + "': unknown value type");
  }
  if (v.type != ValueType::ARRAY) return;
  for (const Value& e : v.arr) {
    if (e.type != v.elem_type) {
      writer_error("key '" + key + "': array of " + std::string(value_type_name(v.elem_type)) +
                   " holds a " + std::string(value_type_name(e.type)));
    }
    check_value(e, key);
  }
}

class Bytes {
 public:
  std::vector<uint8_t> out;
  template <typename T>
  void put(T v) {
    put_raw(&v, sizeof(T));  // little-endian host
  }
  void put_raw(const void* p, size_t n) {
    if (n == 0) return;
    size_t at = out.size();
    out.resize(at + n);
    std::memcpy(out.data() + at, p, n);
  }
  void put_string(std::string_view s) {
    put<uint64_t>(s.size());
    put_raw(s.data(), s.size());
  }
  void pad_to(uint64_t alignment) {
    while (out.size() % alignment != 0) out.push_back(0);
  }
  void put_value(const Value& v) {
    switch (v.type) {
      case ValueType::UINT8:
        put<uint8_t>(static_cast<uint8_t>(v.u64));
        break;
      case ValueType::INT8:
        put<int8_t>(static_cast<int8_t>(v.i64));
        break;
      case ValueType::UINT16:
        put<uint16_t>(static_cast<uint16_t>(v.u64));
        break;
      case ValueType::INT16:
        put<int16_t>(static_cast<int16_t>(v.i64));
        break;
      case ValueType::UINT32:
        put<uint32_t>(static_cast<uint32_t>(v.u64));
        break;
      case ValueType::INT32:
        put<int32_t>(static_cast<int32_t>(v.i64));
        break;
      case ValueType::UINT64:
        put<uint64_t>(v.u64);
        break;
      case ValueType::INT64:
        put<int64_t>(v.i64);
        break;
      case ValueType::FLOAT32:
        put<float>(static_cast<float>(v.f64));
        break;
      case ValueType::FLOAT64:
        put<double>(v.f64);
        break;
      case ValueType::BOOL:
        put<uint8_t>(v.u64 != 0 ? 1 : 0);
        break;
      case ValueType::STRING:
        put_string(v.str);
        break;
      case ValueType::ARRAY:
        put<uint32_t>(static_cast<uint32_t>(v.elem_type));
        put<uint64_t>(v.arr.size());
        for (const Value& e : v.arr) put_value(e);
        break;
    }
  }
};

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

}  // namespace

Value make_uint(ValueType type, uint64_t v) {
  if (!is_unsigned_type(type)) writer_error("make_uint needs an unsigned type");
  Value out;
  out.type = type;
  switch (type) {
    case ValueType::UINT8:
      out.u64 = static_cast<uint8_t>(v);
      break;
    case ValueType::UINT16:
      out.u64 = static_cast<uint16_t>(v);
      break;
    case ValueType::UINT32:
      out.u64 = static_cast<uint32_t>(v);
      break;
    default:
      out.u64 = v;
      break;
  }
  return out;
}

Value make_int(ValueType type, int64_t v) {
  if (!is_signed_type(type)) writer_error("make_int needs a signed type");
  Value out;
  out.type = type;
  switch (type) {
    case ValueType::INT8:
      out.i64 = static_cast<int8_t>(v);
      break;
    case ValueType::INT16:
      out.i64 = static_cast<int16_t>(v);
      break;
    case ValueType::INT32:
      out.i64 = static_cast<int32_t>(v);
      break;
    default:
      out.i64 = v;
      break;
  }
  return out;
}

Value make_float(ValueType type, double v) {
  if (type != ValueType::FLOAT32 && type != ValueType::FLOAT64) {
    writer_error("make_float needs FLOAT32 or FLOAT64");
  }
  Value out;
  out.type = type;
  out.f64 = type == ValueType::FLOAT32 ? static_cast<double>(static_cast<float>(v)) : v;
  return out;
}

Value make_bool(bool v) {
  Value out;
  out.type = ValueType::BOOL;
  out.u64 = v ? 1 : 0;
  return out;
}

Value make_string(std::string v) {
  Value out;
  out.type = ValueType::STRING;
  out.str = std::move(v);
  return out;
}

Value make_array(ValueType elem_type, std::vector<Value> items) {
  Value out;
  out.type = ValueType::ARRAY;
  out.elem_type = elem_type;
  out.arr = std::move(items);
  check_value(out, "(array)");
  return out;
}

Writer::Writer(uint32_t version) : version_(version) { set_version(version); }

void Writer::set_version(uint32_t version) {
  if (version != 2 && version != 3) {
    writer_error("version " + std::to_string(version) + " is not 2 or 3");
  }
  version_ = version;
}

void Writer::set_value(std::string_view key, Value value) {
  if (key.empty()) writer_error("empty metadata key");
  check_value(value, std::string(key));
  if (key == "general.alignment") {
    // Keep the layout in step with the key; an invalid value (written on purpose by
    // broken-file tests) leaves the default layout.
    uint64_t a = value.u64;
    bool valid = value.type == ValueType::UINT32 && a != 0 && (a & (a - 1)) == 0;
    alignment_ = valid ? a : 32;
  }
  for (auto& kv : metadata_) {
    if (kv.key == key) {
      kv.value = std::move(value);
      return;
    }
  }
  metadata_.push_back(KeyValue{std::string(key), std::move(value)});
}

void Writer::set_u8(std::string_view k, uint8_t v) { set_value(k, make_uint(ValueType::UINT8, v)); }
void Writer::set_i8(std::string_view k, int8_t v) { set_value(k, make_int(ValueType::INT8, v)); }
void Writer::set_u16(std::string_view k, uint16_t v) {
  set_value(k, make_uint(ValueType::UINT16, v));
}
void Writer::set_i16(std::string_view k, int16_t v) { set_value(k, make_int(ValueType::INT16, v)); }
void Writer::set_u32(std::string_view k, uint32_t v) {
  set_value(k, make_uint(ValueType::UINT32, v));
}
void Writer::set_i32(std::string_view k, int32_t v) { set_value(k, make_int(ValueType::INT32, v)); }
void Writer::set_u64(std::string_view k, uint64_t v) {
  set_value(k, make_uint(ValueType::UINT64, v));
}
void Writer::set_i64(std::string_view k, int64_t v) { set_value(k, make_int(ValueType::INT64, v)); }
void Writer::set_f32(std::string_view k, float v) {
  set_value(k, make_float(ValueType::FLOAT32, v));
}
void Writer::set_f64(std::string_view k, double v) {
  set_value(k, make_float(ValueType::FLOAT64, v));
}
void Writer::set_bool(std::string_view k, bool v) { set_value(k, make_bool(v)); }
void Writer::set_string(std::string_view k, std::string v) {
  set_value(k, make_string(std::move(v)));
}

void Writer::set_array(std::string_view key, const std::vector<std::string>& items) {
  std::vector<Value> vals;
  vals.reserve(items.size());
  for (const auto& s : items) vals.push_back(make_string(s));
  set_value(key, make_array(ValueType::STRING, std::move(vals)));
}

void Writer::set_array(std::string_view key, const std::vector<int32_t>& items) {
  std::vector<Value> vals;
  vals.reserve(items.size());
  for (int32_t x : items) vals.push_back(make_int(ValueType::INT32, x));
  set_value(key, make_array(ValueType::INT32, std::move(vals)));
}

void Writer::set_array(std::string_view key, const std::vector<uint32_t>& items) {
  std::vector<Value> vals;
  vals.reserve(items.size());
  for (uint32_t x : items) vals.push_back(make_uint(ValueType::UINT32, x));
  set_value(key, make_array(ValueType::UINT32, std::move(vals)));
}

void Writer::set_array(std::string_view key, const std::vector<float>& items) {
  std::vector<Value> vals;
  vals.reserve(items.size());
  for (float x : items) vals.push_back(make_float(ValueType::FLOAT32, x));
  set_value(key, make_array(ValueType::FLOAT32, std::move(vals)));
}

void Writer::remove(std::string_view key) {
  std::erase_if(metadata_, [&](const KeyValue& kv) { return kv.key == key; });
  if (key == "general.alignment") alignment_ = 32;
}

void Writer::set_alignment(uint32_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    writer_error("alignment " + std::to_string(alignment) + " is not a non-zero power of two");
  }
  alignment_ = alignment;
  set_u32("general.alignment", alignment);
}

void Writer::add_tensor(std::string_view name, GgmlType type, std::vector<uint64_t> shape,
                        std::span<const uint8_t> bytes) {
  std::string n(name);
  if (n.empty()) writer_error("empty tensor name");
  for (const auto& t : tensors_) {
    if (t.name == n) writer_error("duplicate tensor name '" + n + "'");
  }
  if (shape.empty() || shape.size() > 4) {
    writer_error("tensor '" + n + "': needs 1 to 4 dimensions, got " +
                 std::to_string(shape.size()));
  }
  uint64_t n_elements = 1;
  for (uint64_t d : shape) {
    if (d == 0 || __builtin_mul_overflow(n_elements, d, &n_elements)) {
      writer_error("tensor '" + n + "': zero or overflowing dimension");
    }
  }
  auto row_bytes = ggml_row_bytes(type, shape[0]);
  if (!row_bytes) {
    writer_error("tensor '" + n + "': row length " + std::to_string(shape[0]) +
                 " is not a whole number of " + std::string(ggml_type_name(type)) + " blocks");
  }
  uint64_t expected = *row_bytes * (n_elements / shape[0]);
  if (bytes.size() != expected) {
    writer_error("tensor '" + n + "': got " + std::to_string(bytes.size()) +
                 " bytes, shape needs " + std::to_string(expected));
  }
  tensors_.push_back(
      PendingTensor{std::move(n), type, std::move(shape), {bytes.begin(), bytes.end()}});
}

void Writer::add_tensor_f32(std::string_view name, std::vector<uint64_t> shape,
                            std::span<const float> values) {
  add_tensor(name, GgmlType::F32, std::move(shape),
             {reinterpret_cast<const uint8_t*>(values.data()), values.size() * sizeof(float)});
}

std::vector<uint8_t> Writer::header_bytes() const {
  Bytes b;
  b.put_raw("GGUF", 4);
  b.put<uint32_t>(version_);
  b.put<uint64_t>(tensors_.size());
  b.put<uint64_t>(metadata_.size());
  for (const auto& kv : metadata_) {
    b.put_string(kv.key);
    b.put<uint32_t>(static_cast<uint32_t>(kv.value.type));
    b.put_value(kv.value);
  }
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    b.put_string(t.name);
    b.put<uint32_t>(static_cast<uint32_t>(t.shape.size()));
    for (uint64_t d : t.shape) b.put<uint64_t>(d);
    b.put<uint32_t>(static_cast<uint32_t>(t.type));
    b.put<uint64_t>(offset);
    offset = align_up(offset + t.bytes.size(), alignment_);
  }
  b.pad_to(alignment_);
  return std::move(b.out);
}

uint64_t Writer::data_size() const {
  uint64_t n = 0;
  for (const auto& t : tensors_) n = align_up(n + t.bytes.size(), alignment_);
  return n;
}

std::vector<uint8_t> Writer::to_bytes() const {
  std::vector<uint8_t> out = header_bytes();
  const size_t header = out.size();
  out.resize(header + data_size(), 0);
  uint64_t offset = header;
  for (const auto& t : tensors_) {
    if (!t.bytes.empty()) std::memcpy(out.data() + offset, t.bytes.data(), t.bytes.size());
    offset += align_up(t.bytes.size(), alignment_);
  }
  return out;
}

std::vector<uint8_t> Writer::take_bytes() && {
  std::vector<uint8_t> out = header_bytes();
  const size_t header = out.size();
  // Reserved, not touched: pages are committed as the tensors are copied in, and each
  // tensor's own copy is freed right after, so the peak stays near one model's size.
  out.reserve(header + data_size());
  for (auto& t : tensors_) {
    out.insert(out.end(), t.bytes.begin(), t.bytes.end());
    out.resize(align_up(out.size() - header, alignment_) + header, 0);
    std::vector<uint8_t>().swap(t.bytes);
  }
  tensors_.clear();
  return out;
}

void Writer::write_file(const std::string& path) const {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) fail(ErrorKind::kIo, "gguf-writer", path + ": cannot open for writing");
  const std::vector<uint8_t> header = header_bytes();
  out.write(reinterpret_cast<const char*>(header.data()), static_cast<std::streamsize>(header.size()));
  static const char zeros[64] = {};
  for (const auto& t : tensors_) {
    out.write(reinterpret_cast<const char*>(t.bytes.data()), static_cast<std::streamsize>(t.bytes.size()));
    uint64_t pad = align_up(t.bytes.size(), alignment_) - t.bytes.size();
    while (pad > 0) {
      const uint64_t k = std::min<uint64_t>(pad, sizeof zeros);
      out.write(zeros, static_cast<std::streamsize>(k));
      pad -= k;
    }
  }
  out.close();
  if (!out) fail(ErrorKind::kIo, "gguf-writer", path + ": write failed");
}

}  // namespace hearth::gguf
