#include "ops/step_desc.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <string>

#include "core/error.h"

namespace hearth::ops {

namespace {

std::atomic<uint64_t> g_serial{0};

size_t align_up(size_t n) { return (n + StepDesc::kAlign - 1) / StepDesc::kAlign * StepDesc::kAlign; }

[[noreturn]] void bad(const std::string& what) { fail(ErrorKind::kInternal, "step", "step description: " + what); }

int32_t to_i32(int64_t v, const char* what) {
  if (v < 0 || v > std::numeric_limits<int32_t>::max()) bad(std::string(what) + " " + std::to_string(v) + " out of range");
  return static_cast<int32_t>(v);
}

}  // namespace

void StepDesc::assign(const Inputs& in) {
  const auto n = static_cast<int64_t>(in.tokens.size());
  const auto ns = static_cast<int64_t>(in.seqs.size());
  const auto no = static_cast<int64_t>(in.out_rows.size());
  if (static_cast<int64_t>(in.positions.size()) != n || static_cast<int64_t>(in.slots.size()) != n)
    bad("positions / slots do not match the " + std::to_string(n) + " tokens");
  if (!in.pos3.empty() && static_cast<int64_t>(in.pos3.size()) != 3 * n) bad("pos3 is not [n_tokens, 3]");
  if (!in.state_slots.empty() && static_cast<int64_t>(in.state_slots.size()) != ns)
    bad("state slots do not match the " + std::to_string(ns) + " sequences");
  if (!in.reduce.empty() && static_cast<int64_t>(in.reduce.size()) != no) bad("reduce does not match the output rows");
  if (!in.penalties.empty() && static_cast<int64_t>(in.penalties.size()) != no * kMaxPenaltyTokens)
    bad("penalties do not match the output rows");
  if (in.block_size <= 0) bad("block size " + std::to_string(in.block_size));

  // The sequences: their block tables' lengths, and the row -> sequence map's checks.
  std::vector<StepSeq> seqs(static_cast<size_t>(ns));
  int64_t n_table = 0;
  for (int64_t s = 0; s < ns; ++s) {
    const AttentionSeq& a = in.seqs[s];
    if (a.first_row < 0 || a.n_tokens < 0 || a.first_row + a.n_tokens > n || a.pos0 < 0)
      bad("sequence " + std::to_string(s) + " (rows " + std::to_string(a.first_row) + " + " +
          std::to_string(a.n_tokens) + ") is out of the step's " + std::to_string(n) + " rows");
    const int64_t n_blocks = (a.pos0 + a.n_tokens + in.block_size - 1) / in.block_size;
    if (n_blocks > 0 && a.block_table == nullptr) bad("sequence " + std::to_string(s) + " has no block table");
    seqs[s] = StepSeq{to_i32(a.first_row, "first row"), to_i32(a.n_tokens, "rows"), to_i32(a.pos0, "position"),
                      to_i32(n_table, "table offset"), to_i32(n_blocks, "blocks")};
    n_table += n_blocks;
  }

  // Offsets: fixed-size sections first, the block tables last.
  Offsets o;
  size_t at = 0;
  auto section = [&](size_t& off, size_t bytes) {
    off = at;
    at = align_up(at + bytes);
  };
  const auto un = static_cast<size_t>(n), uns = static_cast<size_t>(ns), uno = static_cast<size_t>(no);
  section(o.tokens, sizeof(int32_t) * un);
  section(o.positions, sizeof(int32_t) * un);
  section(o.slots, sizeof(int32_t) * un);
  section(o.row_seq, sizeof(int32_t) * un);
  section(o.seqs, sizeof(StepSeq) * uns);
  section(o.gdn, sizeof(GdnSeq) * uns);
  section(o.out_rows, sizeof(int32_t) * uno);
  section(o.reduce, sizeof(RowReduce) * uno);
  section(o.penalties, sizeof(PenaltyToken) * uno * kMaxPenaltyTokens);
  section(o.pos3, in.pos3.empty() ? 0 : sizeof(int32_t) * 3 * un);
  section(o.tables, sizeof(int32_t) * static_cast<size_t>(n_table));

  words_.assign((at + sizeof(uint64_t) - 1) / sizeof(uint64_t), 0);  // zeros: padding and defaults alike
  size_ = at;
  off_ = o;
  n_tokens_ = n;
  n_seqs_ = ns;
  n_out_ = no;
  n_table_ = n_table;
  block_size_ = in.block_size;
  has_pos3_ = !in.pos3.empty();
  serial_ = ++g_serial;
  launch_key_ = in.launch_key;
  auto* base = reinterpret_cast<uint8_t*>(words_.data());
  auto put = [&](size_t off, const void* src, size_t bytes) {
    if (bytes > 0) std::memcpy(base + off, src, bytes);
  };
  put(o.tokens, in.tokens.data(), sizeof(int32_t) * un);
  put(o.positions, in.positions.data(), sizeof(int32_t) * un);
  put(o.slots, in.slots.data(), sizeof(int32_t) * un);
  auto* row_seq = reinterpret_cast<int32_t*>(base + o.row_seq);
  std::fill(row_seq, row_seq + n, -1);
  for (int64_t s = 0; s < ns; ++s) {
    for (int64_t t = 0; t < seqs[s].n_tokens; ++t) row_seq[seqs[s].first_row + t] = static_cast<int32_t>(s);
  }
  put(o.seqs, seqs.data(), sizeof(StepSeq) * uns);
  auto* gdn = reinterpret_cast<GdnSeq*>(base + o.gdn);
  for (int64_t s = 0; s < ns; ++s)
    gdn[s] = GdnSeq{seqs[s].first_row, seqs[s].n_tokens, in.state_slots.empty() ? -1 : in.state_slots[s]};
  put(o.out_rows, in.out_rows.data(), sizeof(int32_t) * uno);
  auto* reduce = reinterpret_cast<RowReduce*>(base + o.reduce);
  for (int64_t r = 0; r < no; ++r) reduce[r] = in.reduce.empty() ? RowReduce{} : in.reduce[r];
  put(o.penalties, in.penalties.data(), sizeof(PenaltyToken) * in.penalties.size());
  put(o.pos3, in.pos3.data(), sizeof(int32_t) * in.pos3.size());
  auto* tables = reinterpret_cast<int32_t*>(base + o.tables);
  attn_seqs_.resize(uns);
  for (int64_t s = 0; s < ns; ++s) {
    const AttentionSeq& a = in.seqs[s];
    std::copy(a.block_table, a.block_table + seqs[s].n_blocks, tables + seqs[s].table_off);
    attn_seqs_[s] = AttentionSeq{a.first_row, a.n_tokens, a.pos0, tables + seqs[s].table_off};
  }
}

}  // namespace hearth::ops
