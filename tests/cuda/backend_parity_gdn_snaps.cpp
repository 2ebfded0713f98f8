// CUDA back-end: Gated DeltaNet state snapshots written inside the call
// (GdnStates::snaps, speculative verification's checkpoint after each drafted row)
// against the model's other way, the rows run in passes with the states copied between
// them (model/hybrid_model.cpp's passes, which the CPU back-end takes): the outputs, the
// live states and every snapshot slot bit for bit. Shared set-up: parity_common.h.
#include <cstring>
#include <string>
#include <vector>

#include "parity_common.h"

namespace {

using namespace parity;

struct Snap {
  int64_t seq, after, slot;
};

// One GPU run of a conv + delta-rule layer over `seqs`, from the states `init`: with
// in_call the snapshots go to the ops; else the rows run in passes as the model runs
// them for a back-end without gdn_snapshots() (pass k: each sequence's rows up to its
// k-th snapshot, then the copies).
struct Run {
  std::vector<float> conv_out, o, states;
};

Run run_layer(const ops::GdnShape& sh, const std::vector<float>& init, int64_t per, const std::vector<float>& xv,
              const std::vector<ops::GdnSeq>& seqs, const std::vector<std::vector<Snap>>& snaps, bool in_call) {
  ops::Backend& be = gpu();
  const int64_t C = sh.conv_channels(), HV = sh.n_v_heads, K = sh.conv_kernel;
  int64_t n = 0;
  for (const auto& q : seqs) n = std::max<int64_t>(n, q.first_row + q.n_tokens);
  auto dev = [&](const std::vector<float>& v) {
    auto b = be.alloc(static_cast<int64_t>(v.size()));
    be.copy_from_host(v.data(), static_cast<int64_t>(v.size()), *b, 0);
    return b;
  };
  auto state = dev(init);
  auto x = dev(xv);
  auto conv = dev(std::vector<float>(static_cast<size_t>(n * C), 0.0f));
  auto o = dev(std::vector<float>(static_cast<size_t>(n * sh.value_dim()), 0.0f));
  auto a = dev(randn(static_cast<size_t>(n * HV), 44));
  auto b = dev(randn(static_cast<size_t>(n * HV), 45));
  std::vector<float> av = randu(static_cast<size_t>(HV), 46, 0.05f, 1.6f);
  for (auto& v : av) v = -v;
  const auto A = make_weight(GgmlType::F32, av, 1, HV);
  const auto dt = make_weight(GgmlType::F32, randn(static_cast<size_t>(HV), 47), 1, HV);
  const auto conv_w = make_weight(GgmlType::F32, randn(static_cast<size_t>(C * K), 42, 0.5f), C, K);
  ops::GdnStates st{state->data(), state->data() + sh.conv_state_floats(), per};
  if (in_call) {
    std::vector<ops::GdnSnap> list;
    for (size_t s = 0; s < snaps.size(); ++s) {
      for (const Snap& sn : snaps[s]) {
        list.push_back({static_cast<int32_t>(s), static_cast<int32_t>(sn.after), static_cast<int32_t>(sn.slot)});
      }
    }
    st.snaps = list.data();
    st.n_snaps = static_cast<int64_t>(list.size());
    const auto ns = static_cast<int64_t>(seqs.size());
    be.ssm_conv_silu(x->data(), C, conv_w->g, st, seqs.data(), ns, conv->data());
    be.gated_delta_net(conv->data(), a->data(), b->data(), A->g, dt->g, sh, st, seqs.data(), ns, o->data());
  } else {
    size_t passes = 1;
    for (const auto& s : snaps) passes = std::max(passes, s.size() + 1);
    for (size_t pass = 0; pass < passes; ++pass) {
      std::vector<ops::GdnSeq> part;
      for (size_t s = 0; s < seqs.size(); ++s) {
        const size_t k = snaps[s].size();
        if (pass > k) continue;
        const int64_t from = pass == 0 ? 0 : snaps[s][pass - 1].after;
        const int64_t to = pass < k ? snaps[s][pass].after : seqs[s].n_tokens;
        part.push_back({static_cast<int32_t>(seqs[s].first_row + from), static_cast<int32_t>(to - from),
                        seqs[s].state_slot});
      }
      const auto np = static_cast<int64_t>(part.size());
      be.ssm_conv_silu(x->data(), C, conv_w->g, st, part.data(), np, conv->data());
      be.gated_delta_net(conv->data(), a->data(), b->data(), A->g, dt->g, sh, st, part.data(), np, o->data());
      for (size_t s = 0; s < seqs.size(); ++s) {
        if (pass < snaps[s].size()) {
          be.copy(state->data() + seqs[s].state_slot * per, per, state->data() + snaps[s][pass].slot * per);
        }
      }
    }
  }
  Run r;
  auto host = [&](ops::Buffer& buf, int64_t count) {
    std::vector<float> v(static_cast<size_t>(count));
    be.copy_to_host(buf, 0, count, v.data());
    return v;
  };
  r.conv_out = host(*conv, n * C);
  r.o = host(*o, n * sh.value_dim());
  r.states = host(*state, static_cast<int64_t>(init.size()));
  return r;
}

bool same_bits(const std::vector<float>& x, const std::vector<float>& y) {
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), 4 * x.size()) == 0;
}

void check_snapshots(const ops::GdnShape& sh, const std::vector<int64_t>& lens, bool every_row, const char* what) {
  const int64_t C = sh.conv_channels();
  const int64_t per = sh.conv_state_floats() + sh.ssm_state_floats();
  const auto ns = static_cast<int64_t>(lens.size());
  std::vector<ops::GdnSeq> seqs;
  std::vector<std::vector<Snap>> snaps(static_cast<size_t>(ns));
  int64_t row = 0, slot = ns;  // sequence s in slot ns - 1 - s; snapshots in slots ns ..
  for (int64_t s = 0; s < ns; ++s) {
    seqs.push_back({static_cast<int32_t>(row), static_cast<int32_t>(lens[s]), static_cast<int32_t>(ns - 1 - s)});
    row += lens[s];
    // Verification rows: a snapshot after every row but the last; a prompt (every_row
    // false for the longer ones): one in the middle only.
    for (int64_t after = 1; after < lens[s]; ++after) {
      if (every_row || lens[s] <= 9 || after == lens[s] / 2) snaps[static_cast<size_t>(s)].push_back({s, after, slot++});
    }
  }
  const std::vector<float> init = randn(static_cast<size_t>(slot * per), 41, 0.1f);
  const std::vector<float> x = randn(static_cast<size_t>(row * C), 43);
  const Run passes = run_layer(sh, init, per, x, seqs, snaps, false);
  const Run one = run_layer(sh, init, per, x, seqs, snaps, true);
  EXPECT_TRUE(same_bits(one.conv_out, passes.conv_out)) << what << ": conv outputs";
  EXPECT_TRUE(same_bits(one.o, passes.o)) << what << ": delta-rule outputs";
  for (int64_t s = 0; s < slot; ++s) {
    const std::vector<float> a(one.states.begin() + s * per, one.states.begin() + (s + 1) * per);
    const std::vector<float> b(passes.states.begin() + s * per, passes.states.begin() + (s + 1) * per);
    EXPECT_TRUE(same_bits(a, b)) << what << ": state slot " << s << (s < ns ? " (live)" : " (snapshot)");
  }
  // The snapshots are states indeed (not left as they were).
  EXPECT_FALSE(same_bits(std::vector<float>(one.states.begin() + ns * per, one.states.begin() + (ns + 1) * per),
                         std::vector<float>(init.begin() + ns * per, init.begin() + (ns + 1) * per)))
      << what;
}

TEST(CudaParity, GatedDeltaNetSnapshotsInOneCall) {
  NEED_GPU();
  const ops::GdnShape big{16, 32, 128, 128, 4, true, 1e-6f};  // Qwen3.5-9B
  const ops::GdnShape tiny{2, 4, 16, 24, 4, false, 1e-6f};    // the Qwen3-Next fixture
  // Verification of 4 and 2 drafts beside a plain decode token and a prompt chunk.
  check_snapshots(big, {5, 1, 3, 20}, false, "9B verify");
  check_snapshots(big, {9, 9}, true, "9B 8 drafts");
  check_snapshots(tiny, {5, 2, 1, 33}, false, "tiny");
}

// A snapshot out of order or range is refused with a message, before anything runs.
TEST(CudaParity, GatedDeltaNetSnapshotsChecked) {
  NEED_GPU();
  const ops::GdnShape tiny{2, 4, 16, 24, 4, false, 1e-6f};
  const int64_t C = tiny.conv_channels(), K = tiny.conv_kernel;
  const int64_t per = tiny.conv_state_floats() + tiny.ssm_state_floats();
  auto state = gpu().alloc(3 * per);
  auto x = gpu().alloc(4 * C);
  auto out = gpu().alloc(4 * C);
  const auto conv_w = make_weight(GgmlType::F32, randn(static_cast<size_t>(C * K), 42, 0.5f), C, K);
  const std::vector<ops::GdnSeq> seqs = {{0, 4, 0}};
  for (const ops::GdnSnap bad : {ops::GdnSnap{0, 4, 1}, ops::GdnSnap{0, 0, 1}, ops::GdnSnap{1, 2, 1},
                                 ops::GdnSnap{0, 2, 0}}) {
    ops::GdnStates st{state->data(), state->data() + tiny.conv_state_floats(), per, &bad, 1};
    try {
      gpu().ssm_conv_silu(x->data(), C, conv_w->g, st, seqs.data(), 1, out->data());
      ADD_FAILURE() << "snapshot (" << bad.seq << ", " << bad.after << ", " << bad.slot << ") was taken";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("out of order or range"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
