#include "model/vision_encoder.h"

#include <cmath>
#include <cstring>
#include <string>

#include "core/error.h"
#include "quant/dequant_ref.h"

namespace hearth::model {
namespace {

[[noreturn]] void bad(const gguf::File& f, const std::string& what) {
  fail(ErrorKind::kInvalidInput, "vision", f.name() + ": " + what);
}

int64_t need_int(const gguf::File& f, const std::string& key) {
  const auto v = f.find_int(key);
  if (!v) bad(f, "projector key '" + key + "' is missing");
  if (*v <= 0) bad(f, "projector key '" + key + "' must be positive, got " + std::to_string(*v));
  return *v;
}

std::string projector_type(const gguf::File& f) {
  if (auto t = f.find_string("clip.vision.projector_type")) return *t;
  return f.find_string("clip.projector_type").value_or("");
}

// A small tensor's values as f32 on the host, whatever its stored type.
std::vector<float> host_f32(const gguf::File& f, const std::string& name, const std::vector<uint64_t>& expect) {
  const ops::WeightView w = tensor_view(f, name, expect);
  int64_t n = 1;
  for (uint64_t d : expect) n *= static_cast<int64_t>(d);
  std::vector<float> out(static_cast<size_t>(n));
  if (!can_dequantize(w.type))
    fail(ErrorKind::kUnsupported, "vision", f.name() + ": tensor '" + name + "' has type " +
                                                std::string(ggml_type_name(w.type)) + ", which Hearth cannot read");
  dequantize_row_ref(w.type, w.data, out.data(), n);
  return out;
}

}  // namespace

void check_projector_fits(const VisionEncoder& enc, int64_t lm_n_embd, const std::string& projector_name) {
  if (enc.hparams().n_out != lm_n_embd)
    fail(ErrorKind::kInvalidInput, "vision",
         projector_name + ": the projector gives embeddings of width " + std::to_string(enc.hparams().n_out) +
             ", but the model's width is " + std::to_string(lm_n_embd) + " (a projector of another model?)");
}

bool is_qwen3vl_projector(const gguf::File& file) {
  return file.find_string("general.architecture").value_or("") == "clip" && projector_type(file) == "qwen3vl_merger";
}

VisionEncoder::VisionEncoder(const gguf::File& file, ops::Backend& backend) : file_(file), be_(backend) {
  const std::string arch = file.find_string("general.architecture").value_or("");
  if (arch != "clip") bad(file, "not a projector file (general.architecture is '" + arch + "', expected 'clip')");
  const std::string pt = projector_type(file);
  if (pt != "qwen3vl_merger")
    fail(ErrorKind::kUnsupported, "vision",
         file.name() + ": projector type '" + pt + "' is not supported (Hearth reads qwen3vl_merger: Qwen3-VL / Qwen3.5)");
  if (file.find_bool("clip.has_vision_encoder") == false) bad(file, "clip.has_vision_encoder is false");
  hp_.n_embd = need_int(file, "clip.vision.embedding_length");
  hp_.n_ff = need_int(file, "clip.vision.feed_forward_length");
  hp_.n_layer = need_int(file, "clip.vision.block_count");
  hp_.n_head = need_int(file, "clip.vision.attention.head_count");
  hp_.patch = need_int(file, "clip.vision.patch_size");
  hp_.n_out = need_int(file, "clip.vision.projection_dim");
  hp_.merge = file.find_int("clip.vision.spatial_merge_size").value_or(2);
  hp_.eps = static_cast<float>(file.find_float("clip.vision.attention.layer_norm_epsilon").value_or(1e-6));
  const int64_t image_size = need_int(file, "clip.vision.image_size");
  if (hp_.n_embd % hp_.n_head != 0)
    bad(file, "clip.vision.embedding_length " + std::to_string(hp_.n_embd) + " is not a multiple of the " +
                  std::to_string(hp_.n_head) + " heads");
  hp_.head_dim = hp_.n_embd / hp_.n_head;
  if (hp_.head_dim % 4 != 0) bad(file, "vision head size " + std::to_string(hp_.head_dim) + " is not a multiple of 4");
  if (image_size % hp_.patch != 0) bad(file, "clip.vision.image_size is not a multiple of the patch size");
  if (hp_.merge != 2) fail(ErrorKind::kUnsupported, "vision", file.name() + ": spatial merge size other than 2");
  hp_.n_pos_side = image_size / hp_.patch;

  vision::PreprocessConfig& pre = hp_.pre;
  pre.patch_size = static_cast<int32_t>(hp_.patch);
  pre.temporal_patch_size = static_cast<int32_t>(hp_.temporal);
  pre.merge_size = static_cast<int32_t>(hp_.merge);
  if (auto v = file.find_int("clip.vision.image_min_pixels")) pre.min_pixels = *v;
  if (auto v = file.find_int("clip.vision.image_max_pixels")) pre.max_pixels = *v;
  for (const char* key : {"clip.vision.image_mean", "clip.vision.image_std"}) {
    const gguf::Value* v = file.find(key);
    if (v == nullptr) continue;
    const auto& arr = v->as_array(key);
    if (arr.size() != 3) bad(file, std::string(key) + " must hold 3 values");
    float* dst = std::string(key).ends_with("mean") ? pre.image_mean : pre.image_std;
    for (int c = 0; c < 3; ++c) dst[c] = static_cast<float>(arr[c].as_float(key));
  }

  const uint64_t E = hp_.n_embd, F = hp_.n_ff, P = hp_.patch;
  // The Conv3d kernel as one [E, 3 * T * P * P] matrix in the patches' (C, T, P, P) order,
  // from the two per-frame Conv2d kernels llama.cpp stores.
  {
    const std::vector<float> w0 = host_f32(file, "v.patch_embd.weight", {P, P, 3, E});
    const std::vector<float> w1 = host_f32(file, "v.patch_embd.weight.1", {P, P, 3, E});
    const int64_t pf = hp_.patch_floats(), pp = static_cast<int64_t>(P * P);
    std::vector<float>& w = store_.emplace_back(static_cast<size_t>(E * pf));
    for (int64_t o = 0; o < static_cast<int64_t>(E); ++o)
      for (int64_t c = 0; c < 3; ++c)
        for (int64_t t = 0; t < 2; ++t)
          std::memcpy(&w[o * pf + (c * 2 + t) * pp], &(t == 0 ? w0 : w1)[(o * 3 + c) * pp], pp * sizeof(float));
    patch_w_ = be_.prepare_weight(f32_view("v.patch_embd", w.data(), pf, static_cast<int64_t>(E)));
  }
  patch_b_ = owned_.f32(file, be_, "v.patch_embd.bias", {E});
  pos_table_ = host_f32(file, "v.position_embd.weight", {E, static_cast<uint64_t>(hp_.n_pos_side * hp_.n_pos_side)});
  post_w_ = owned_.f32(file, be_, "v.post_ln.weight", {E});
  post_b_ = owned_.f32(file, be_, "v.post_ln.bias", {E});
  mm0_ = bind_tensor(file, be_, "mm.0.weight", {4 * E, 4 * E});
  mm0_b_ = owned_.f32(file, be_, "mm.0.bias", {4 * E});
  mm2_ = bind_tensor(file, be_, "mm.2.weight", {4 * E, static_cast<uint64_t>(hp_.n_out)});
  mm2_b_ = owned_.f32(file, be_, "mm.2.bias", {static_cast<uint64_t>(hp_.n_out)});

  for (int64_t l = 0; l < hp_.n_layer; ++l) {
    const std::string p = "v.blk." + std::to_string(l) + ".";
    Block b;
    b.ln1_w = owned_.f32(file, be_, p + "ln1.weight", {E});
    b.ln1_b = owned_.f32(file, be_, p + "ln1.bias", {E});
    b.ln2_w = owned_.f32(file, be_, p + "ln2.weight", {E});
    b.ln2_b = owned_.f32(file, be_, p + "ln2.bias", {E});
    // The fused qkv product split into its q, k and v rows (and bias thirds).
    const ops::WeightView qkv = tensor_view(file, p + "attn_qkv.weight", {E, 3 * E});
    ops::WeightView* parts[3] = {&b.q, &b.k, &b.v};
    ops::WeightView* biases[3] = {&b.q_b, &b.k_b, &b.v_b};
    const std::vector<float> qkv_b = host_f32(file, p + "attn_qkv.bias", {3 * E});
    for (int i = 0; i < 3; ++i) {
      std::vector<int64_t> rows(E);
      for (uint64_t r = 0; r < E; ++r) rows[r] = static_cast<int64_t>(i * E + r);
      *parts[i] = owned_.rows(be_, qkv, rows, p + "attn_qkv." + "qkv"[i]);
      std::vector<float>& bias = store_.emplace_back(qkv_b.begin() + i * E, qkv_b.begin() + (i + 1) * E);
      *biases[i] = be_.prepare_weight(f32_view(p + "attn_qkv.bias." + "qkv"[i], bias.data(), E, 1));
    }
    b.out = bind_tensor(file, be_, p + "attn_out.weight", {E, E});
    b.out_b = owned_.f32(file, be_, p + "attn_out.bias", {E});
    b.up = bind_tensor(file, be_, p + "ffn_up.weight", {E, F});
    b.up_b = owned_.f32(file, be_, p + "ffn_up.bias", {F});
    b.down = bind_tensor(file, be_, p + "ffn_down.weight", {F, E});
    b.down_b = owned_.f32(file, be_, p + "ffn_down.bias", {E});
    blocks_.push_back(std::move(b));
  }
}

ops::WeightView VisionEncoder::f32_view(const std::string& name, const float* data, int64_t n_cols, int64_t n_rows) {
  ops::WeightView w;
  w.name = name;
  w.type = GgmlType::F32;
  w.data = data;
  w.n_cols = n_cols;
  w.n_rows = n_rows;
  w.row_bytes = static_cast<uint64_t>(n_cols) * 4;
  return w;
}

void VisionEncoder::position_rows(int64_t gh, int64_t gw, float* out) const {
  // torch.linspace(0, N - 1, g) sampled bilinearly (align_corners): floor / ceil neighbours.
  const int64_t N = hp_.n_pos_side, E = hp_.n_embd, m = hp_.merge;
  auto axis = [&](int64_t g, int64_t i, int64_t& lo, int64_t& hi, double& frac) {
    const double x = g == 1 ? 0.0 : static_cast<double>(i) * static_cast<double>(N - 1) / static_cast<double>(g - 1);
    lo = static_cast<int64_t>(x);
    hi = std::min(lo + 1, N - 1);
    frac = x - static_cast<double>(lo);
  };
  int64_t row = 0;
  for (int64_t bh = 0; bh < gh / m; ++bh)
    for (int64_t bw = 0; bw < gw / m; ++bw)
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < m; ++j, ++row) {
          int64_t h0, h1, w0, w1;
          double dh, dw;
          axis(gh, bh * m + i, h0, h1, dh);
          axis(gw, bw * m + j, w0, w1, dw);
          const float* t00 = &pos_table_[(h0 * N + w0) * E];
          const float* t01 = &pos_table_[(h0 * N + w1) * E];
          const float* t10 = &pos_table_[(h1 * N + w0) * E];
          const float* t11 = &pos_table_[(h1 * N + w1) * E];
          const double a = (1 - dh) * (1 - dw), b = (1 - dh) * dw, c = dh * (1 - dw), d = dh * dw;
          float* o = out + row * E;
          for (int64_t e = 0; e < E; ++e)
            o[e] = static_cast<float>(a * t00[e] + b * t01[e] + c * t10[e] + d * t11[e]);
        }
}

std::vector<float> VisionEncoder::encode(const std::vector<const vision::Patches*>& images) {
  const auto job = start(images);
  while (!advance(*job, n_units())) {
  }
  return result(*job);
}

std::unique_ptr<VisionEncoder::Job> VisionEncoder::start(const std::vector<const vision::Patches*>& images) {
  const int64_t E = hp_.n_embd, F = hp_.n_ff, m = hp_.merge;
  const int64_t pf = hp_.patch_floats();
  auto job = std::make_unique<Job>();
  int64_t n = 0;
  for (size_t i = 0; i < images.size(); ++i) {
    const vision::Patches& p = *images[i];
    if (p.patch_floats != pf || p.grid_t <= 0 || p.grid_h % m != 0 || p.grid_w % m != 0 ||
        static_cast<int64_t>(p.data.size()) != p.n_patches() * pf)
      fail(ErrorKind::kInvalidInput, "vision",
           "image " + std::to_string(i) + ": patches of " + std::to_string(p.patch_floats) + " floats on a " +
               std::to_string(p.grid_h) + " x " + std::to_string(p.grid_w) + " grid do not fit this encoder (" +
               std::to_string(pf) + " floats per patch, grid a multiple of " + std::to_string(m) + ")");
    n += p.n_patches();
  }
  job->n = n;
  job->n_merged = n / (m * m);
  if (n == 0) {
    job->done = true;
    return job;
  }

  // Host side: the patches, the resampled position rows, the rotary positions, the segments.
  std::vector<float> host(static_cast<size_t>(n * std::max(pf, E)));
  job->pos3.resize(static_cast<size_t>(n * 3));
  job->pos1.resize(static_cast<size_t>(n));
  std::vector<int32_t>& pos3 = job->pos3;
  std::vector<int32_t>& pos1 = job->pos1;
  job->x = be_.alloc(n * E);
  job->cur = be_.alloc(n * E);
  job->q = be_.alloc(n * E);
  job->k = be_.alloc(n * E);
  job->v = be_.alloc(n * E);
  job->att = be_.alloc(n * E);
  job->ff = be_.alloc(n * std::max(F, E));
  auto inp = be_.alloc(n * pf);
  int64_t row = 0;
  for (const vision::Patches* p : images) {
    std::memcpy(&host[row * pf], p->data.data(), p->data.size() * sizeof(float));
    job->segs.push_back({row, p->n_patches()});
    int64_t r = row;
    for (int64_t t = 0; t < p->grid_t; ++t)
      for (int64_t bh = 0; bh < p->grid_h / m; ++bh)
        for (int64_t bw = 0; bw < p->grid_w / m; ++bw)
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < m; ++j, ++r) {
              pos3[r * 3] = 0;
              pos3[r * 3 + 1] = static_cast<int32_t>(bh * m + i);
              pos3[r * 3 + 2] = static_cast<int32_t>(bw * m + j);
              pos1[r] = static_cast<int32_t>(r - row);
            }
    row += p->n_patches();
  }
  float* x = job->x->data();
  float* cur = job->cur->data();
  be_.begin_step(0);  // many ops, run as they come (no recorded step)
  be_.copy_from_host(host.data(), n * pf, *inp, 0);
  be_.matmul(patch_w_, inp->data(), n, x);
  be_.add_bias(x, patch_b_, n);
  row = 0;
  for (const vision::Patches* p : images) {
    const int64_t per_frame = int64_t{p->grid_h} * p->grid_w;
    position_rows(p->grid_h, p->grid_w, &host[row * E]);
    for (int64_t t = 1; t < p->grid_t; ++t)
      std::memcpy(&host[(row + t * per_frame) * E], &host[row * E], per_frame * E * sizeof(float));
    row += p->n_patches();
  }
  be_.copy_from_host(host.data(), n * E, *job->cur, 0);
  be_.add(x, cur, n * E);
  return job;
}

bool VisionEncoder::advance(Job& job, int64_t units) {
  if (job.done) return true;
  const int64_t E = hp_.n_embd, F = hp_.n_ff, H = hp_.n_head, D = hp_.head_dim;
  const int64_t n = job.n, n_merged = job.n_merged;
  float *x = job.x->data(), *cur = job.cur->data(), *q = job.q->data(), *k = job.k->data(), *v = job.v->data(),
        *att = job.att->data(), *ff = job.ff->data();
  ops::RopeParams rope;
  rope.n_rot = D;
  rope.freq_base = hp_.rope_theta;
  rope.neox = true;
  rope.multi = ops::RopeMulti::kVision;
  rope.sections[0] = static_cast<int32_t>(D / 4);
  rope.sections[1] = static_cast<int32_t>(D / 4);
  rope.pos3 = job.pos3.data();
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  be_.begin_step(0);  // (other work may have opened a step of its own since the last call)
  const auto n_blocks = static_cast<int64_t>(blocks_.size());
  for (; units > 0 && job.next < n_blocks; --units, ++job.next) {
    const Block& b = blocks_[static_cast<size_t>(job.next)];
    be_.layer_norm(x, b.ln1_w, b.ln1_b, n, E, hp_.eps, cur);
    const ops::WeightView* ws[3] = {&b.q, &b.k, &b.v};
    float* ys[3] = {q, k, v};
    be_.matmul_multi(ws, 3, cur, n, ys);
    be_.add_bias(q, b.q_b, n);
    be_.add_bias(k, b.k_b, n);
    be_.add_bias(v, b.v_b, n);
    be_.rope(q, n, H, D, job.pos1.data(), rope);
    be_.rope(k, n, H, D, job.pos1.data(), rope);
    be_.attention_full(q, k, v, job.segs.data(), static_cast<int64_t>(job.segs.size()), H, D, scale, att);
    be_.matmul(b.out, att, n, cur);
    be_.add_bias(cur, b.out_b, n);
    be_.add(x, cur, n * E);
    be_.layer_norm(x, b.ln2_w, b.ln2_b, n, E, hp_.eps, cur);
    be_.matmul(b.up, cur, n, ff);
    be_.add_bias(ff, b.up_b, n);
    be_.gelu(ff, n * F, true);
    be_.matmul(b.down, ff, n, cur);
    be_.add_bias(cur, b.down_b, n);
    be_.add(x, cur, n * E);
  }
  if (units > 0 && job.next == n_blocks) {
    // The merger: LayerNorm per patch, then each window's m * m patches as one row.
    be_.layer_norm(x, post_w_, post_b_, n, E, hp_.eps, cur);
    be_.matmul(mm0_, cur, n_merged, q);
    be_.add_bias(q, mm0_b_, n_merged);
    be_.gelu(q, n_merged * hp_.merge * hp_.merge * E, false);
    job.out = be_.alloc(n_merged * hp_.n_out);
    be_.matmul(mm2_, q, n_merged, job.out->data());
    be_.add_bias(job.out->data(), mm2_b_, n_merged);
    ++job.next;
    job.done = true;
    // The block buffers are no longer needed: give their memory back now.
    job.x.reset();
    job.cur.reset();
    job.q.reset();
    job.k.reset();
    job.v.reset();
    job.att.reset();
    job.ff.reset();
  }
  return job.done;
}

std::vector<float> VisionEncoder::result(Job& job) {
  if (!job.done) fail(ErrorKind::kInternal, "vision", "result() of an encoding that is not done");
  std::vector<float> result(static_cast<size_t>(job.n_merged * hp_.n_out));
  if (job.out) be_.copy_to_host(*job.out, 0, job.n_merged * hp_.n_out, result.data());
  return result;
}
}  // namespace hearth::model
