// Metadata values and typed look-ups of gguf::File (the parsing itself lives
// in gguf_reader.cpp).
#include <limits>

#include "core/error.h"
#include "format/gguf.h"

namespace hearth::gguf {

std::string_view value_type_name(ValueType type) {
  switch (type) {
    case ValueType::UINT8:
      return "u8";
    case ValueType::INT8:
      return "i8";
    case ValueType::UINT16:
      return "u16";
    case ValueType::INT16:
      return "i16";
    case ValueType::UINT32:
      return "u32";
    case ValueType::INT32:
      return "i32";
    case ValueType::FLOAT32:
      return "f32";
    case ValueType::BOOL:
      return "bool";
    case ValueType::STRING:
      return "string";
    case ValueType::ARRAY:
      return "array";
    case ValueType::UINT64:
      return "u64";
    case ValueType::INT64:
      return "i64";
    case ValueType::FLOAT64:
      return "f64";
  }
  return "unknown";
}

namespace {

[[noreturn]] void type_mismatch(std::string_view what, std::string_view expected, const Value& v) {
  std::string got(value_type_name(v.type));
  if (v.type == ValueType::ARRAY) got += " of " + std::string(value_type_name(v.elem_type));
  fail(ErrorKind::kInvalidInput, "gguf",
       std::string(what) + ": expected " + std::string(expected) + ", got " + got);
}

bool is_unsigned(ValueType t) {
  return t == ValueType::UINT8 || t == ValueType::UINT16 || t == ValueType::UINT32 ||
         t == ValueType::UINT64;
}

bool is_signed(ValueType t) {
  return t == ValueType::INT8 || t == ValueType::INT16 || t == ValueType::INT32 ||
         t == ValueType::INT64;
}

}  // namespace

bool Value::is_integer() const { return is_unsigned(type) || is_signed(type); }

bool Value::is_float() const { return type == ValueType::FLOAT32 || type == ValueType::FLOAT64; }

int64_t Value::as_int(std::string_view what) const {
  if (is_signed(type)) return i64;
  if (is_unsigned(type) || type == ValueType::BOOL) {
    if (u64 > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      fail(ErrorKind::kInvalidInput, "gguf",
           std::string(what) + ": value " + std::to_string(u64) + " does not fit in int64");
    }
    return static_cast<int64_t>(u64);
  }
  type_mismatch(what, "an integer", *this);
}

double Value::as_float(std::string_view what) const {
  if (is_float()) return f64;
  if (is_signed(type)) return static_cast<double>(i64);
  if (is_unsigned(type)) return static_cast<double>(u64);
  type_mismatch(what, "a number", *this);
}

bool Value::as_bool(std::string_view what) const {
  if (type != ValueType::BOOL) type_mismatch(what, "bool", *this);
  return u64 != 0;
}

const std::string& Value::as_string(std::string_view what) const {
  if (type != ValueType::STRING) type_mismatch(what, "string", *this);
  return str;
}

const std::vector<Value>& Value::as_array(std::string_view what) const {
  if (type != ValueType::ARRAY) type_mismatch(what, "array", *this);
  return arr;
}

uint64_t TensorInfo::n_elements() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;  // the reader rejects shapes whose product overflows
  return n;
}

const Value* File::find(std::string_view key) const {
  for (const auto& kv : metadata_) {
    if (kv.key == key) return &kv.value;
  }
  return nullptr;
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  for (const auto& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

namespace {

std::string what_of(const File& f, std::string_view key) {
  return f.name() + ": key '" + std::string(key) + "'";
}

const Value& require(const File& f, std::string_view key) {
  const Value* v = f.find(key);
  if (v == nullptr) fail(ErrorKind::kNotFound, "gguf", what_of(f, key) + " not found");
  return *v;
}

}  // namespace

std::string File::get_string(std::string_view key) const {
  return require(*this, key).as_string(what_of(*this, key));
}

int64_t File::get_int(std::string_view key) const {
  return require(*this, key).as_int(what_of(*this, key));
}

double File::get_float(std::string_view key) const {
  return require(*this, key).as_float(what_of(*this, key));
}

bool File::get_bool(std::string_view key) const {
  return require(*this, key).as_bool(what_of(*this, key));
}

std::optional<std::string> File::find_string(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return std::nullopt;
  return v->as_string(what_of(*this, key));
}

std::optional<int64_t> File::find_int(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return std::nullopt;
  return v->as_int(what_of(*this, key));
}

std::optional<double> File::find_float(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return std::nullopt;
  return v->as_float(what_of(*this, key));
}

std::optional<bool> File::find_bool(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return std::nullopt;
  return v->as_bool(what_of(*this, key));
}

}  // namespace hearth::gguf
