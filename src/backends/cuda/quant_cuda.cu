// The entry points of quant_cuda.h: argument checks, then dispatch by type family
// to the kernels of quant_float.cu, quant_legacy.cu and quant_kquants.cu.
#include "backends/cuda/quant_cuda.h"

#include <string>

#include "backends/cuda/quant_kernels.cuh"
#include "core/error.h"

namespace hearth::cuda {
namespace {

struct TypeInfo {
  GgmlType type;
  const char* name;
  int block_elems;
  int block_bytes;
  int align;  // bytes the kernels assume for the data pointer and row_bytes
};

constexpr TypeInfo kTypes[] = {
    {GgmlType::F32, "f32", 1, 4, 4},        {GgmlType::F16, "f16", 1, 2, 2},
    {GgmlType::BF16, "bf16", 1, 2, 2},      {GgmlType::Q4_0, "q4_0", 32, 18, 2},
    {GgmlType::Q4_1, "q4_1", 32, 20, 4},    {GgmlType::Q5_0, "q5_0", 32, 22, 2},
    {GgmlType::Q5_1, "q5_1", 32, 24, 8},    {GgmlType::Q8_0, "q8_0", 32, 34, 2},
    {GgmlType::Q2_K, "q2_K", 256, 84, 4},   {GgmlType::Q3_K, "q3_K", 256, 110, 2},
    {GgmlType::Q4_K, "q4_K", 256, 144, 16}, {GgmlType::Q5_K, "q5_K", 256, 176, 16},
    {GgmlType::Q6_K, "q6_K", 256, 210, 2},  {GgmlType::IQ4_NL, "iq4_nl", 32, 18, 2},
    {GgmlType::MXFP4, "mxfp4", 32, 17, 1},
};

const TypeInfo* find_type(GgmlType type) {
  for (const auto& t : kTypes) {
    if (t.type == type) return &t;
  }
  return nullptr;
}

[[noreturn]] void bad(const std::string& what) { fail(ErrorKind::kInvalidInput, "cuda quant", what); }

}  // namespace

// Checks the weight's description against what the kernels assume.
void check_device_weight(const DeviceWeight& w, const char* op) {
  const TypeInfo* t = find_type(w.type);
  if (t == nullptr) {
    fail(ErrorKind::kUnsupported, "cuda quant",
         std::string(op) + ": no CUDA kernel for tensor type id " +
             std::to_string(static_cast<uint32_t>(w.type)));
  }
  // The message prefix is built only on failure (this runs on every launch).
  auto where = [&] {
    return std::string(op) + " (" + t->name + ", " + std::to_string(w.n_rows) + " x " + std::to_string(w.n_cols) +
           "): ";
  };
  if (w.n_rows < 0 || w.n_cols <= 0 || w.n_cols % t->block_elems != 0) {
    bad(where() + "n_cols must be a positive multiple of " + std::to_string(t->block_elems));
  }
  int align = t->align;
  // The float types are read 8 elements (16 bytes) at a time when rows allow it.
  if (t->block_elems == 1 && w.n_cols % 8 == 0) align = 16;
  const uint64_t min_bytes = static_cast<uint64_t>(w.n_cols / t->block_elems) * t->block_bytes;
  if (w.row_bytes < min_bytes) {
    bad(where() + "row_bytes " + std::to_string(w.row_bytes) + " is less than a row's " +
        std::to_string(min_bytes));
  }
  if ((reinterpret_cast<uintptr_t>(w.data) | w.row_bytes) % static_cast<uint64_t>(align) != 0) {
    bad(where() + "data and row_bytes must be multiples of " + std::to_string(align) + " bytes");
  }
  if (w.n_rows > 0 && w.data == nullptr) bad(where() + "data is null");
}

namespace {

void run(const DeviceWeight& w, const qk::OpArgs& a, cudaStream_t stream) {
  if (!qk::run_float_op(w, a, stream) && !qk::run_legacy_op(w, a, stream) &&
      !qk::run_kquant_op(w, a, stream)) {
    fail(ErrorKind::kUnsupported, "cuda quant", "type id " + std::to_string(static_cast<uint32_t>(w.type)));
  }
}

}  // namespace

bool quant_supported(GgmlType type) { return find_type(type) != nullptr; }

void quant_matvec(const DeviceWeight& w, const float* x, int64_t n_tokens, float* y, cudaStream_t stream) {
  quant_matvec_multi(&w, 1, x, n_tokens, &y, stream);
}

void quant_matvec_multi(const DeviceWeight* ws, int n, const float* x, int64_t n_tokens, float* const* ys,
                        cudaStream_t stream) {
  if (n <= 0) return;
  for (int i = 0; i < n; ++i) {
    check_device_weight(ws[i], "quant_matvec");
    if (ws[i].n_cols != ws[0].n_cols) {
      bad("quant_matvec_multi: weight " + std::to_string(i) + " has " + std::to_string(ws[i].n_cols) +
          " columns, weight 0 " + std::to_string(ws[0].n_cols));
    }
  }
  if (n_tokens < 0) bad("quant_matvec: negative n_tokens " + std::to_string(n_tokens));
  if (n_tokens == 0) return;
  if (ws[0].n_cols % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 != 0) {
    bad("quant_matvec: x must be 16-byte aligned");
  }
  // One launch per run of consecutive weights of one type (at most qk::kMaxMulti each);
  // weights without rows are skipped.
  int i = 0;
  while (i < n) {
    DeviceWeight group[qk::kMaxMulti];
    float* group_y[qk::kMaxMulti];
    int k = 0;
    for (; i < n && k < qk::kMaxMulti && (k == 0 || ws[i].type == group[0].type); ++i) {
      if (ws[i].n_rows == 0) continue;
      group[k] = ws[i];
      group_y[k] = ys[i];
      ++k;
    }
    if (k == 0) continue;
    qk::OpArgs a{qk::Op::kMatvec};
    a.x = x;
    a.n_tokens = n_tokens;
    a.ws = group;
    a.n_ws = k;
    a.ys = group_y;
    run(group[0], a, stream);
  }
}

void dequantize_rows_f16(const DeviceWeight& w, int64_t row0, int64_t n_rows, void* dst_f16,
                         cudaStream_t stream) {
  check_device_weight(w, "dequantize_rows_f16");
  if (row0 < 0 || n_rows < 0 || row0 + n_rows > w.n_rows) {
    bad("dequantize_rows_f16: rows " + std::to_string(row0) + " + " + std::to_string(n_rows) +
        " out of " + std::to_string(w.n_rows));
  }
  if (reinterpret_cast<uintptr_t>(dst_f16) % 16 != 0) bad("dequantize_rows_f16: dst must be 16-byte aligned");
  qk::OpArgs a{qk::Op::kDequantF16};
  a.row0 = row0;
  a.n_rows = n_rows;
  a.dst = dst_f16;
  run(w, a, stream);
}

void dequantize_rows_f32(const DeviceWeight& w, int64_t row0, int64_t n_rows, float* dst,
                         cudaStream_t stream) {
  check_device_weight(w, "dequantize_rows_f32");
  if (row0 < 0 || n_rows < 0 || row0 + n_rows > w.n_rows) {
    bad("dequantize_rows_f32: rows " + std::to_string(row0) + " + " + std::to_string(n_rows) +
        " out of " + std::to_string(w.n_rows));
  }
  if (reinterpret_cast<uintptr_t>(dst) % 16 != 0) bad("dequantize_rows_f32: dst must be 16-byte aligned");
  qk::OpArgs a{qk::Op::kDequantF32};
  a.row0 = row0;
  a.n_rows = n_rows;
  a.dst = dst;
  run(w, a, stream);
}

void get_rows_f32(const DeviceWeight& w, const int32_t* ids, int64_t n_ids, float* out, cudaStream_t stream) {
  check_device_weight(w, "get_rows_f32");
  if (n_ids < 0) bad("get_rows_f32: negative n_ids");
  if (n_ids == 0) return;
  if (reinterpret_cast<uintptr_t>(out) % 16 != 0) bad("get_rows_f32: out must be 16-byte aligned");
  qk::OpArgs a{qk::Op::kGetRowsF32};
  a.ids = ids;
  a.n_rows = n_ids;
  a.dst = out;
  run(w, a, stream);
}

}  // namespace hearth::cuda
