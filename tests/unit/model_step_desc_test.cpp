// The step description (ops/step_desc.h) that BatchLayout fills for every step: its
// arena must hold exactly the layout's arrays (tokens, positions, KV slots, the
// attention sequences with their block tables, the row -> sequence map, the state
// slots, the output rows with how each is returned, the 3-D positions), for a single
// sequence, a batch, a hybrid batch with state slots and an image-bearing prompt; its
// sections must sit at offsets that depend only on the step's counts (what lets a
// recorded CUDA graph read a later step's upload); bad inputs are refused.
#include <gtest/gtest.h>

#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "core/error.h"
#include "model/batch_layout.h"
#include "model/kv_cache.h"
#include "ops/step_desc.h"

namespace {

namespace model = hearth::model;
namespace ops = hearth::ops;

model::Hparams tiny_hparams(bool hybrid) {
  model::Hparams hp;
  hp.n_vocab = 64;
  hp.n_embd = 16;
  hp.n_layer = 2;
  hp.n_head = 2;
  hp.n_head_kv = 1;
  hp.head_dim = 8;
  hp.n_ff = 32;
  hp.n_rot = 8;
  if (hybrid) {
    hp.recurrent = {1, 0};
    hp.gdn = ops::GdnShape{1, 1, 4, 4, 4};
  }
  return hp;
}

// Every array of the layout against the description's copy of it.
void expect_matches(const model::BatchLayout& lay, int64_t block_size) {
  const ops::StepDesc& d = lay.desc;
  const auto n = static_cast<size_t>(lay.n_tokens());
  ASSERT_EQ(d.n_tokens(), lay.n_tokens());
  ASSERT_EQ(d.n_seqs(), static_cast<int64_t>(lay.attn_seqs.size()));
  ASSERT_EQ(d.n_out(), static_cast<int64_t>(lay.out_rows.size()));
  EXPECT_EQ(d.block_size(), block_size);
  EXPECT_EQ(std::vector<int32_t>(d.tokens(), d.tokens() + n), lay.tokens);
  EXPECT_EQ(std::vector<int32_t>(d.positions(), d.positions() + n), lay.positions);
  EXPECT_EQ(std::vector<int32_t>(d.slots(), d.slots() + n), lay.slots);
  EXPECT_EQ(std::vector<int32_t>(d.out_rows(), d.out_rows() + d.n_out()), lay.out_rows);
  for (size_t s = 0; s < lay.attn_seqs.size(); ++s) {  // the Gated DeltaNet ops' view of the sequences
    const ops::GdnSeq& g = d.gdn_seqs()[s];
    EXPECT_EQ(g.first_row, lay.attn_seqs[s].first_row) << s;
    EXPECT_EQ(g.n_tokens, lay.attn_seqs[s].n_tokens) << s;
    EXPECT_EQ(g.state_slot, lay.state_slots[s]) << s;
  }
  if (lay.pos3.empty()) {
    EXPECT_EQ(d.pos3(), nullptr);
  } else {
    ASSERT_NE(d.pos3(), nullptr);
    EXPECT_EQ(std::vector<int32_t>(d.pos3(), d.pos3() + 3 * n), lay.pos3);
  }
  std::vector<int32_t> row_seq(n, -1);
  int64_t table_off = 0;
  for (size_t s = 0; s < lay.attn_seqs.size(); ++s) {
    const ops::AttentionSeq& a = lay.attn_seqs[s];
    const ops::StepSeq& ss = d.seqs()[s];
    EXPECT_EQ(ss.first_row, a.first_row) << "sequence " << s;
    EXPECT_EQ(ss.n_tokens, a.n_tokens) << "sequence " << s;
    EXPECT_EQ(ss.pos0, a.pos0) << "sequence " << s;
    const int64_t n_blocks = (a.pos0 + a.n_tokens + block_size - 1) / block_size;
    EXPECT_EQ(ss.n_blocks, n_blocks) << "sequence " << s;
    EXPECT_EQ(ss.table_off, table_off) << "sequence " << s;
    for (int64_t b = 0; b < n_blocks; ++b) EXPECT_EQ(d.tables()[table_off + b], a.block_table[b]) << "sequence " << s;
    // The host view the ops take: the same sequence, its table inside the arena.
    const ops::AttentionSeq& h = d.attn_seqs()[s];
    EXPECT_EQ(h.first_row, a.first_row);
    EXPECT_EQ(h.n_tokens, a.n_tokens);
    EXPECT_EQ(h.pos0, a.pos0);
    EXPECT_EQ(h.block_table, d.tables() + table_off);
    EXPECT_TRUE(n_blocks == 0 || d.holds(h.block_table, sizeof(int32_t) * n_blocks));
    table_off += n_blocks;
    for (int64_t t = 0; t < a.n_tokens; ++t) row_seq[static_cast<size_t>(a.first_row + t)] = static_cast<int32_t>(s);
  }
  EXPECT_EQ(d.n_table(), table_off);
  EXPECT_EQ(std::vector<int32_t>(d.row_seq(), d.row_seq() + n), row_seq);
  ASSERT_EQ(lay.reduce.size(), lay.out_rows.size());
  for (size_t r = 0; r < lay.reduce.size(); ++r) {
    const ops::RowReduce &x = d.reduce()[r], &y = lay.reduce[r];
    EXPECT_EQ(x.kind, y.kind) << "output row " << r;
    EXPECT_EQ(x.scale, y.scale) << "output row " << r;
    EXPECT_EQ(x.u, y.u) << "output row " << r;
    EXPECT_EQ(x.top_k, y.top_k) << "output row " << r;
    EXPECT_EQ(x.top_p, y.top_p) << "output row " << r;
    EXPECT_EQ(x.min_p, y.min_p) << "output row " << r;
    EXPECT_EQ(x.n_penalty, y.n_penalty) << "output row " << r;
    EXPECT_EQ(x.repeat_penalty, y.repeat_penalty) << "output row " << r;
    EXPECT_EQ(x.presence_penalty, y.presence_penalty) << "output row " << r;
    EXPECT_EQ(x.frequency_penalty, y.frequency_penalty) << "output row " << r;
  }
  ASSERT_EQ(lay.penalties.size(), lay.out_rows.size() * ops::kMaxPenaltyTokens);
  for (size_t i = 0; i < lay.penalties.size(); ++i) {
    EXPECT_EQ(d.penalties()[i].token, lay.penalties[i].token) << i;
    EXPECT_EQ(d.penalties()[i].count, lay.penalties[i].count) << i;
  }
  // Every array lies inside the arena (what the CUDA back-end looks pointers up in).
  EXPECT_TRUE(n == 0 || d.holds(d.tokens(), 4 * n));
  EXPECT_TRUE(n == 0 || d.holds(d.slots(), 4 * n));
  EXPECT_TRUE(d.n_out() == 0 || d.holds(d.penalties(), sizeof(ops::PenaltyToken) * d.n_out() * ops::kMaxPenaltyTokens));
  EXPECT_FALSE(d.holds(lay.tokens.data(), 4));
}

TEST(StepDesc, SingleSequenceMatchesTheLayout) {
  hearth::cpu::CpuBackend be(1);
  const model::Hparams hp = tiny_hparams(false);
  model::KvCache cache(be, hp, 256);
  cache.seq().n_past = 37;  // a table of 3 blocks of 16 for positions 37 .. 41
  model::BatchLayout lay;
  ops::RowReduce draw{ops::RowKind::kDraw, 1.25f, 0.5, 40, 0.9f, 0.05f, 2, 1.1f, 0.2f, 0.1f};
  const std::vector<ops::PenaltyToken> pens = {{7, 2}, {9, 1}};
  lay.single(cache, {3, 4, 5, 6, 7}, false, draw, pens);
  expect_matches(lay, model::KvCache::kBlockSize);
  EXPECT_EQ(lay.desc.n_table(), 3);
  EXPECT_EQ(lay.desc.reduce()[0].kind, ops::RowKind::kDraw);
  EXPECT_EQ(lay.desc.penalties()[1].token, 9);
  // A prompt returning every row's logits.
  lay.single(cache, {1, 2, 3}, true);
  expect_matches(lay, model::KvCache::kBlockSize);
  EXPECT_EQ(lay.desc.n_out(), 3);
}

TEST(StepDesc, BatchMatchesTheLayout) {
  hearth::cpu::CpuBackend be(1);
  const model::Hparams hp = tiny_hparams(false);
  constexpr int64_t kBs = 8;
  model::KvPool pool(be, hp, ops::KvType::F32, kBs, 64);
  std::vector<model::SeqKv> kv(4);
  kv[0].blocks = {5, 9, 2};
  kv[0].n_past = 17;
  kv[1].blocks = {11};
  kv[1].n_past = 0;
  kv[2].blocks = {20, 21};
  kv[2].n_past = 3;
  kv[3].blocks = {30, 31, 32, 33};
  kv[3].n_past = 25;
  const std::vector<int32_t> t0 = {10}, t1 = {11, 12, 13, 14}, t3 = {15};
  std::vector<model::BatchSeq> seqs;
  seqs.push_back({&kv[0], t0.data(), 1, true, true});                  // greedy decode row
  seqs.push_back({&kv[1], t1.data(), 4, true});                        // a prompt chunk
  seqs.push_back({&kv[2], nullptr, 0, false});                         // nothing this step: skipped
  model::BatchSeq drawn{&kv[3], t3.data(), 1, true};
  drawn.draw = ops::RowReduce{ops::RowKind::kDraw, 2.0f, 0.25, 0, 1.0f, 0.0f, 1};
  drawn.penalties = {{15, 3}};
  seqs.push_back(drawn);
  model::BatchLayout lay;
  lay.batch(pool, seqs);
  ASSERT_EQ(lay.attn_seqs.size(), 3u);
  expect_matches(lay, kBs);
  EXPECT_EQ(lay.desc.n_table(), 3 + 1 + 4);
  EXPECT_EQ(lay.desc.reduce()[0].kind, ops::RowKind::kArgmax);
  EXPECT_EQ(lay.desc.penalties()[2 * ops::kMaxPenaltyTokens].token, 15);
}

TEST(StepDesc, HybridBatchKeepsStateSlots) {
  hearth::cpu::CpuBackend be(1);
  const model::Hparams hp = tiny_hparams(true);
  model::KvPool pool(be, hp, ops::KvType::F32, 16, 16, 4);
  std::vector<model::SeqKv> kv(2);
  kv[0].blocks = {0, 1};
  kv[0].n_past = 20;
  kv[0].state_slot = 2;
  kv[1].blocks = {4};
  kv[1].state_slot = 0;
  const std::vector<int32_t> t0 = {1}, t1 = {2, 3, 4, 5, 6, 7};
  std::vector<model::BatchSeq> seqs = {{&kv[0], t0.data(), 1, true, true}, {&kv[1], t1.data(), 6, true}};
  seqs[1].snaps = {{3, 3}};  // a state snapshot after 3 of the 6 rows into slot 3
  model::BatchLayout lay;
  lay.batch(pool, seqs);
  expect_matches(lay, 16);
  EXPECT_EQ(lay.desc.gdn_seqs()[0].state_slot, 2);
  EXPECT_EQ(lay.desc.gdn_seqs()[1].state_slot, 0);
  EXPECT_EQ(lay.desc.gdn_seqs()[1].first_row, 1);
  EXPECT_EQ(lay.desc.gdn_seqs()[1].n_tokens, 6);

  // The launch key (what a recorded step is keyed on besides the counts): the same
  // batch over the same pool without snapshots has another one than with them, and
  // another snapshot slot or point another again; another pool another again.
  const uint64_t with_snap = lay.desc.launch_key();
  seqs[1].snaps = {};
  lay.batch(pool, seqs);
  const uint64_t plain = lay.desc.launch_key();
  EXPECT_NE(plain, with_snap);
  seqs[1].snaps = {{3, 1}};
  lay.batch(pool, seqs);
  EXPECT_NE(lay.desc.launch_key(), with_snap);
  EXPECT_NE(lay.desc.launch_key(), plain);
  seqs[1].snaps = {{2, 3}};
  lay.batch(pool, seqs);
  EXPECT_NE(lay.desc.launch_key(), with_snap);
  seqs[1].snaps = {};
  lay.batch(pool, seqs);
  EXPECT_EQ(lay.desc.launch_key(), plain);
  model::KvPool other(be, hp, ops::KvType::F32, 16, 16, 4);
  lay.batch(other, seqs);
  EXPECT_NE(lay.desc.launch_key(), plain);
}

TEST(StepDesc, ImagePromptCarriesItsPositions) {
  hearth::cpu::CpuBackend be(1);
  const model::Hparams hp = tiny_hparams(false);
  model::KvCache cache(be, hp, 64);
  model::SeqMedia media;
  // Six prompt rows: two text rows, a 2x2 image, then the tail shifted.
  media.pos3 = {0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 2, 3, 2, 3, 2, 2, 3, 3};
  media.tail_shift = -2;
  const std::vector<float> embd(4 * static_cast<size_t>(hp.n_embd), 0.5f);
  media.spans.push_back({2, 4, embd.data()});
  model::BatchLayout lay;
  lay.set_embd_width(hp.n_embd);
  lay.single(cache, {5, 6, 7, 8, 9, 10, 11, 12}, false, {}, {}, &media);
  ASSERT_FALSE(lay.pos3.empty());
  expect_matches(lay, model::KvCache::kBlockSize);
  EXPECT_EQ(lay.desc.tokens()[3], 0);       // an image row: its token is not read
  EXPECT_EQ(lay.desc.positions()[7], 5);    // row 7: 7 + tail_shift
  EXPECT_EQ(lay.desc.pos3()[5 * 3 + 2], 3);
}

// A decode step of the same batch whose tables grew by a block: every section where it was.
TEST(StepDesc, OffsetsDependOnlyOnTheCounts) {
  hearth::cpu::CpuBackend be(1);
  const model::Hparams hp = tiny_hparams(false);
  model::KvPool pool(be, hp, ops::KvType::F32, 16, 64);
  std::vector<model::SeqKv> kv(3);
  for (int s = 0; s < 3; ++s) {
    kv[s].blocks = {static_cast<int32_t>(10 * s), static_cast<int32_t>(10 * s + 1)};
    kv[s].n_past = 14 + s;
  }
  const std::vector<int32_t> toks = {1, 2, 3};
  auto step = [&](model::BatchLayout& lay) {
    std::vector<model::BatchSeq> seqs;
    for (int s = 0; s < 3; ++s) seqs.push_back({&kv[s], &toks[s], 1, true, true});
    lay.batch(pool, seqs);
  };
  model::BatchLayout a, b;
  step(a);
  for (auto& k : kv) k.n_past += 5;  // past a block boundary: the tables grow
  step(b);
  expect_matches(b, 16);
  EXPECT_GT(b.desc.n_table(), a.desc.n_table());
  EXPECT_GT(b.desc.size(), a.desc.size());
  const ops::StepDesc::Offsets &oa = a.desc.offsets(), &ob = b.desc.offsets();
  EXPECT_EQ(oa.tokens, ob.tokens);
  EXPECT_EQ(oa.positions, ob.positions);
  EXPECT_EQ(oa.slots, ob.slots);
  EXPECT_EQ(oa.row_seq, ob.row_seq);
  EXPECT_EQ(oa.seqs, ob.seqs);
  EXPECT_EQ(oa.gdn, ob.gdn);
  EXPECT_EQ(oa.out_rows, ob.out_rows);
  EXPECT_EQ(oa.reduce, ob.reduce);
  EXPECT_EQ(oa.penalties, ob.penalties);
  EXPECT_EQ(oa.tables, ob.tables);
  EXPECT_NE(a.desc.serial(), b.desc.serial());
  for (size_t off : {oa.positions, oa.slots, oa.row_seq, oa.seqs, oa.gdn, oa.reduce, oa.tables}) {
    EXPECT_EQ(off % ops::StepDesc::kAlign, 0u);
  }
}

TEST(StepDesc, RefusesInconsistentInputs) {
  ops::StepDesc d;
  const std::vector<int32_t> toks = {1, 2}, one = {0};
  ops::StepDesc::Inputs in;
  in.tokens = toks;
  in.positions = one;  // one position for two tokens
  in.slots = toks;
  EXPECT_THROW(d.assign(in), hearth::Error);
  in.positions = toks;
  const int32_t table[] = {4};
  const std::vector<ops::AttentionSeq> seqs = {{1, 2, 0, table}};  // rows 1..2 of a 2-row step
  in.seqs = seqs;
  EXPECT_THROW(d.assign(in), hearth::Error);
  const std::vector<ops::AttentionSeq> ok = {{0, 2, 3, table}};
  in.seqs = ok;
  d.assign(in);
  EXPECT_EQ(d.n_seqs(), 1);
  EXPECT_EQ(d.gdn_seqs()[0].state_slot, -1);  // none given: -1
  d.clear();
  EXPECT_EQ(d.n_tokens(), 0);
  EXPECT_EQ(d.n_seqs(), 0);
}

}  // namespace
