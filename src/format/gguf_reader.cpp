// GGUF v2/v3 parser. Layout (little-endian):
//   header:       magic "GGUF", version u32, tensor_count u64, kv_count u64
//   metadata:     kv_count x (key string, value type u32, value)
//   tensor infos: tensor_count x (name string, n_dims u32, dims u64[n_dims], type u32, offset u64)
//   padding to `general.alignment` (default 32), then the data section.
// A string is a u64 length then that many bytes (no terminator); an array is an
// element type u32, a count u64, then the elements (arrays may nest).
//
// Every read is checked against the bytes left, and every count is checked
// against the bytes left before anything is reserved (each element needs at
// least its minimum encoded size), so a hostile file cannot make the parser
// read out of bounds, recurse without limit or allocate more than a small
// multiple of the file size.
#include <algorithm>
#include <cstring>
#include <limits>
#include <unordered_map>

#include "core/error.h"
#include "format/gguf.h"

namespace hearth::gguf {
namespace {

constexpr uint32_t kMaxDims = 4;   // GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 8;  // arrays of arrays of ... at most this deep
constexpr uint64_t kMaxArrayElements = uint64_t{1} << 25;  // over all metadata arrays
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;                // key length, value type, 1-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;    // name length, n_dims, type, offset
constexpr uint64_t kDefaultAlignment = 32;
constexpr size_t kMaxShownChars = 80;  // of a key or tensor name quoted in a message

// Smallest encoding of one value of type t (an array: its type and count).
uint64_t min_value_bytes(ValueType t) {
  switch (t) {
    case ValueType::UINT8:
    case ValueType::INT8:
    case ValueType::BOOL:
      return 1;
    case ValueType::UINT16:
    case ValueType::INT16:
      return 2;
    case ValueType::UINT32:
    case ValueType::INT32:
    case ValueType::FLOAT32:
      return 4;
    case ValueType::UINT64:
    case ValueType::INT64:
    case ValueType::FLOAT64:
      return 8;
    case ValueType::STRING:
      return 8;
    case ValueType::ARRAY:
      return 12;
  }
  return 1;
}

// A name from the file made safe to print: non-printable bytes escaped, long names cut.
std::string printable(std::string_view s) {
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < s.size() && i < kMaxShownChars; ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  if (s.size() > kMaxShownChars) out += "...";
  return out;
}

std::string shape_string(const std::vector<uint64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

// Parses one buffer into a File. Not thread-safe; used once per File.
class Parser {
 public:
  Parser(const uint8_t* data, uint64_t size, File& out) : data_(data), size_(size), out_(out) {}

  void run() {
    read_header();
    read_metadata();
    read_alignment();
    read_tensor_infos();
    place_tensor_data();
  }

 private:
  const uint8_t* data_;
  uint64_t size_;
  File& out_;
  uint64_t pos_ = 0;

  // Where we are, for messages: "metadata key #3 'general.name'" plus array indices.
  std::string field_;
  std::vector<uint64_t> indices_;
  uint64_t n_array_elements_ = 0;
  std::vector<uint64_t> value_offsets_;  // absolute offset of each metadata value

  uint64_t left() const { return size_ - pos_; }

  std::string where() const {
    std::string s = field_;
    for (uint64_t i : indices_) {
      s += '[';
      s += std::to_string(i);
      s += ']';
    }
    return s;
  }

  // "[gguf] NAME: FIELD: PROBLEM (offset N, file size M)"
  [[noreturn]] void error(ErrorKind kind, const std::string& problem, uint64_t offset) const {
    fail(kind, "gguf",
         out_.name_ + ": " + where() + ": " + problem + " (offset " + std::to_string(offset) +
             ", file size " + std::to_string(size_) + ")");
  }

  // `what` + `suffix` name the field; the message is built only on failure.
  void need(uint64_t n, std::string_view what, std::string_view suffix = {}) const {
    if (n > left()) {
      error(ErrorKind::kInvalidInput,
            std::string(what) + std::string(suffix) + " truncated: needs " + std::to_string(n) +
                " bytes, " + std::to_string(left()) + " left",
            pos_);
    }
  }

  template <typename T>
  T read(std::string_view what, std::string_view suffix = {}) {
    need(sizeof(T), what, suffix);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));  // the host is little-endian (x86-64)
    pos_ += sizeof(T);
    return v;
  }

  std::string read_string(std::string_view what) {
    uint64_t at = pos_;
    auto len = read<uint64_t>(what, " length");
    if (len > left()) {
      error(ErrorKind::kInvalidInput,
            std::string(what) + " length " + std::to_string(len) + " runs past end of file", at);
    }
    std::string s(reinterpret_cast<const char*>(data_ + pos_), len);
    pos_ += len;
    return s;
  }

  ValueType read_value_type(std::string_view what) {
    uint64_t at = pos_;
    auto t = read<uint32_t>(what);
    if (t > static_cast<uint32_t>(ValueType::FLOAT64)) {
      error(ErrorKind::kInvalidInput, "unknown " + std::string(what) + " " + std::to_string(t), at);
    }
    return static_cast<ValueType>(t);
  }

  void read_header() {
    field_ = "header";
    need(4, "magic");
    if (std::memcmp(data_, "GGUF", 4) != 0) {
      error(ErrorKind::kInvalidInput,
            "bad magic '" + printable({reinterpret_cast<const char*>(data_), 4}) +
                "' (expected 'GGUF'); not a GGUF file",
            0);
    }
    pos_ = 4;
    uint64_t at = pos_;
    auto version = read<uint32_t>("version");
    if (version != 2 && version != 3) {
      std::string why = "unsupported version " + std::to_string(version);
      if (version == 1) {
        why += " (GGUF v1 is obsolete; only v2 and v3 are read)";
      } else if (__builtin_bswap32(version) == 2 || __builtin_bswap32(version) == 3) {
        why += " (a big-endian GGUF; only little-endian files are read)";
      } else {
        why += " (only v2 and v3 are read)";
      }
      error(ErrorKind::kUnsupported, why, at);
    }
    out_.version_ = version;

    uint64_t tensors_at = pos_;
    auto n_tensors = read<uint64_t>("tensor count");
    uint64_t kvs_at = pos_;
    auto n_kv = read<uint64_t>("metadata count");
    if (n_tensors > left() / kMinTensorInfoBytes) {
      error(ErrorKind::kInvalidInput,
            "tensor count " + std::to_string(n_tensors) + " cannot fit in the " +
                std::to_string(left()) + " bytes left",
            tensors_at);
    }
    if (n_kv > (left() - n_tensors * kMinTensorInfoBytes) / kMinKvBytes) {
      error(ErrorKind::kInvalidInput,
            "metadata count " + std::to_string(n_kv) + " cannot fit in the " +
                std::to_string(left()) + " bytes left" +
                (n_tensors ? " alongside " + std::to_string(n_tensors) + " tensor infos" : ""),
            kvs_at);
    }
    out_.metadata_.reserve(n_kv);
    out_.tensors_.reserve(n_tensors);
    value_offsets_.reserve(n_kv);
    n_kv_ = n_kv;
    n_tensors_ = n_tensors;
  }

  uint64_t n_kv_ = 0;
  uint64_t n_tensors_ = 0;

  Value read_value(ValueType type, int depth) {
    Value v;
    v.type = type;
    switch (type) {
      case ValueType::UINT8:
        v.u64 = read<uint8_t>("value (u8)");
        break;
      case ValueType::INT8:
        v.i64 = read<int8_t>("value (i8)");
        break;
      case ValueType::UINT16:
        v.u64 = read<uint16_t>("value (u16)");
        break;
      case ValueType::INT16:
        v.i64 = read<int16_t>("value (i16)");
        break;
      case ValueType::UINT32:
        v.u64 = read<uint32_t>("value (u32)");
        break;
      case ValueType::INT32:
        v.i64 = read<int32_t>("value (i32)");
        break;
      case ValueType::UINT64:
        v.u64 = read<uint64_t>("value (u64)");
        break;
      case ValueType::INT64:
        v.i64 = read<int64_t>("value (i64)");
        break;
      case ValueType::FLOAT32:
        v.f64 = read<float>("value (f32)");
        break;
      case ValueType::FLOAT64:
        v.f64 = read<double>("value (f64)");
        break;
      case ValueType::BOOL: {
        uint64_t at = pos_;
        auto b = read<uint8_t>("value (bool)");
        if (b > 1)
          error(ErrorKind::kInvalidInput, "bool value " + std::to_string(b) + " is not 0 or 1", at);
        v.u64 = b;
        break;
      }
      case ValueType::STRING:
        v.str = read_string("string");
        break;
      case ValueType::ARRAY:
        read_array(v, depth + 1);
        break;
    }
    return v;
  }

  void read_array(Value& v, int depth) {
    uint64_t at = pos_;
    if (depth > kMaxArrayDepth) {
      error(ErrorKind::kInvalidInput,
            "arrays nested deeper than " + std::to_string(kMaxArrayDepth) + " levels", at);
    }
    v.elem_type = read_value_type("array element type");
    uint64_t count_at = pos_;
    auto count = read<uint64_t>("array count");
    if (count > left() / min_value_bytes(v.elem_type)) {
      error(ErrorKind::kInvalidInput,
            "array count " + std::to_string(count) + " of " +
                std::string(value_type_name(v.elem_type)) + " cannot fit in the " +
                std::to_string(left()) + " bytes left",
            count_at);
    }
    if (count > kMaxArrayElements - n_array_elements_) {
      error(ErrorKind::kResource,
            "more than " + std::to_string(kMaxArrayElements) + " array elements in the metadata",
            count_at);
    }
    n_array_elements_ += count;
    v.arr.reserve(count);
    indices_.push_back(0);
    for (uint64_t i = 0; i < count; ++i) {
      indices_.back() = i;
      v.arr.push_back(read_value(v.elem_type, depth));
    }
    indices_.pop_back();
  }

  void read_metadata() {
    std::unordered_map<std::string, uint64_t> seen;
    for (uint64_t i = 0; i < n_kv_; ++i) {
      field_ = "metadata key #" + std::to_string(i);
      uint64_t at = pos_;
      std::string key = read_string("key");
      if (key.empty()) error(ErrorKind::kInvalidInput, "empty key", at);
      field_ += " '" + printable(key) + "'";
      auto [it, fresh] = seen.emplace(key, i);
      if (!fresh) {
        error(ErrorKind::kInvalidInput,
              "duplicate key (first defined as key #" + std::to_string(it->second) + ")", at);
      }
      ValueType type = read_value_type("value type");
      value_offsets_.push_back(pos_);
      Value value = read_value(type, 0);
      out_.metadata_.push_back(KeyValue{std::move(key), std::move(value)});
    }
  }

  void read_alignment() {
    out_.alignment_ = kDefaultAlignment;
    for (size_t i = 0; i < out_.metadata_.size(); ++i) {
      const KeyValue& kv = out_.metadata_[i];
      if (kv.key != "general.alignment") continue;
      field_ = "metadata key #" + std::to_string(i) + " 'general.alignment'";
      if (kv.value.type != ValueType::UINT32) {
        error(ErrorKind::kInvalidInput,
              "expected u32, got " + std::string(value_type_name(kv.value.type)),
              value_offsets_[i]);
      }
      uint64_t a = kv.value.u64;
      if (a == 0 || (a & (a - 1)) != 0) {
        error(ErrorKind::kInvalidInput,
              "alignment " + std::to_string(a) + " is not a non-zero power of two",
              value_offsets_[i]);
      }
      out_.alignment_ = a;
    }
  }

  void read_tensor_infos() {
    std::unordered_map<std::string, uint64_t> seen;
    for (uint64_t i = 0; i < n_tensors_; ++i) {
      field_ = "tensor #" + std::to_string(i);
      TensorInfo t;
      uint64_t at = pos_;
      t.name = read_string("name");
      if (t.name.empty()) error(ErrorKind::kInvalidInput, "empty name", at);
      field_ += " '" + printable(t.name) + "'";
      auto [it, fresh] = seen.emplace(t.name, i);
      if (!fresh) {
        error(ErrorKind::kInvalidInput,
              "duplicate tensor name (first is tensor #" + std::to_string(it->second) + ")", at);
      }

      at = pos_;
      auto n_dims = read<uint32_t>("n_dims");
      if (n_dims > kMaxDims) {
        error(ErrorKind::kInvalidInput,
              "n_dims " + std::to_string(n_dims) + " exceeds the maximum of " +
                  std::to_string(kMaxDims),
              at);
      }
      uint64_t n_elements = 1;
      for (uint32_t d = 0; d < n_dims; ++d) {
        at = pos_;
        auto dim = read<uint64_t>("dimension " + std::to_string(d));
        if (dim == 0)
          error(ErrorKind::kInvalidInput, "dimension " + std::to_string(d) + " is zero", at);
        t.shape.push_back(dim);
        if (__builtin_mul_overflow(n_elements, dim, &n_elements) ||
            n_elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
          error(ErrorKind::kInvalidInput,
                "shape " + shape_string(t.shape) + " has more elements than int64 can count", at);
        }
      }

      at = pos_;
      auto type_id = read<uint32_t>("type");
      auto traits = ggml_type_traits(type_id);
      if (!traits)
        error(ErrorKind::kUnsupported, "unknown tensor type " + std::to_string(type_id), at);
      t.type = traits->type;
      uint64_t row = t.shape.empty() ? 1 : t.shape[0];
      auto row_bytes = ggml_row_bytes(t.type, row);
      if (!row_bytes) {
        error(ErrorKind::kInvalidInput,
              "row length " + std::to_string(row) + " is not a multiple of the " +
                  std::string(traits->name) + " block size " + std::to_string(traits->block_size),
              at);
      }
      if (__builtin_mul_overflow(*row_bytes, n_elements / row, &t.n_bytes)) {
        error(ErrorKind::kInvalidInput,
              "byte size of shape " + shape_string(t.shape) + " overflows", at);
      }

      at = pos_;
      t.offset = read<uint64_t>("offset");
      if (t.offset % out_.alignment_ != 0) {
        error(ErrorKind::kInvalidInput,
              "data offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
                  std::to_string(out_.alignment_),
              at);
      }
      out_.tensors_.push_back(std::move(t));
    }
    field_ = "tensor infos";
  }

  void place_tensor_data() {
    // pos_ <= size_ and alignment <= 2^31, so this cannot overflow.
    uint64_t a = out_.alignment_;
    out_.data_offset_ = (pos_ + a - 1) / a * a;
    for (size_t i = 0; i < out_.tensors_.size(); ++i) {
      TensorInfo& t = out_.tensors_[i];
      uint64_t start = 0, end = 0;
      if (__builtin_add_overflow(out_.data_offset_, t.offset, &start) ||
          __builtin_add_overflow(start, t.n_bytes, &end) || end > size_) {
        fail(ErrorKind::kInvalidInput, "gguf",
             out_.name_ + ": " + tensor_label(i) + ": data (offset " +
                 (start < out_.data_offset_ ? "overflow" : std::to_string(start)) + ", " +
                 std::to_string(t.n_bytes) + " bytes) extends past end of file (file size " +
                 std::to_string(size_) + ")");
      }
      t.data = data_ + start;
    }
    std::vector<size_t> order(out_.tensors_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t x, size_t y) {
      return out_.tensors_[x].offset < out_.tensors_[y].offset;
    });
    for (size_t k = 1; k < order.size(); ++k) {
      const TensorInfo& prev = out_.tensors_[order[k - 1]];
      const TensorInfo& cur = out_.tensors_[order[k]];
      if (cur.offset < prev.offset + prev.n_bytes) {
        fail(ErrorKind::kInvalidInput, "gguf",
             out_.name_ + ": " + tensor_label(order[k]) + ": data (offset " +
                 std::to_string(out_.data_offset_ + cur.offset) + ", " +
                 std::to_string(cur.n_bytes) + " bytes) overlaps " + tensor_label(order[k - 1]) +
                 " (offset " + std::to_string(out_.data_offset_ + prev.offset) + ", " +
                 std::to_string(prev.n_bytes) + " bytes)");
      }
    }
  }

  std::string tensor_label(size_t i) const {
    return "tensor #" + std::to_string(i) + " '" + printable(out_.tensors_[i].name) + "'";
  }
};

File File::parse(const uint8_t* data, size_t size, std::string name) {
  File f;
  f.name_ = std::move(name);
  f.base_ = data;
  f.size_ = size;
  if (data == nullptr) f.size_ = 0;
  Parser(f.base_, f.size_, f).run();
  return f;
}

File File::parse_owned(std::shared_ptr<const std::vector<uint8_t>> bytes, std::string name) {
  if (!bytes) fail(ErrorKind::kInternal, "gguf", name + ": parse_owned given no buffer");
  File f = parse(bytes->data(), bytes->size(), std::move(name));
  f.owned_ = std::move(bytes);
  return f;
}

File File::open(const std::string& path) {
  auto mapping = std::make_shared<MappedFile>(path);
  File f = parse(mapping->data(), mapping->size(), path);
  f.mapping_ = std::move(mapping);
  return f;
}

}  // namespace hearth::gguf
