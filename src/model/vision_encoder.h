// The Qwen3-VL / Qwen3.5 vision tower (no deepstack), bound from a projector GGUF in
// llama.cpp's `clip` layout (projector type qwen3vl_merger: v.patch_embd.weight(.1),
// v.position_embd, v.blk.N.{ln1,attn_qkv,attn_out,ln2,ffn_up,ffn_down}, v.post_ln,
// mm.0 / mm.2), whether llama.cpp wrote it (`--mmproj`) or Hearth converted it from a
// Hugging Face folder. Per image: the patches (vision::Patches) through the Conv3d patch
// embedding (a matrix product over C x T x P x P), plus the learned position table
// bilinearly resampled (align_corners) to the image's grid, then `depth` pre-LayerNorm
// blocks (fused qkv, 2-D axial RoPE, attention within the image, GELU-tanh MLP), then
// the merger: LayerNorm, each 2x2 window's patches as one row, Linear, GELU, Linear to
// the language model's width. The math runs through ops::Backend.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "model/weights.h"
#include "ops/backend.h"
#include "vision/image.h"

namespace hearth::model {

struct VisionHparams {
  int64_t n_embd = 0, n_ff = 0, n_layer = 0, n_head = 0, head_dim = 0;
  int64_t patch = 16, temporal = 2, merge = 2;
  int64_t n_pos_side = 0;  // the learned position table is n_pos_side x n_pos_side
  int64_t n_out = 0;       // the language model's width (clip.vision.projection_dim)
  float eps = 1e-6f;
  float rope_theta = 10000.0f;
  vision::PreprocessConfig pre;  // from clip.vision.image_mean / image_std / min / max pixels
  int64_t patch_floats() const { return 3 * temporal * patch * patch; }
};

// Throws Error(kInvalidInput) when the encoder's output width is not the language model's
// (a projector of another model).
void check_projector_fits(const class VisionEncoder& enc, int64_t lm_n_embd, const std::string& projector_name);

// True when `file` is a projector this encoder reads (clip, projector qwen3vl_merger).
bool is_qwen3vl_projector(const gguf::File& file);

class VisionEncoder {
 public:
  // Throws Error naming the file and key / tensor when the projector is not one this
  // encoder reads or a tensor is missing or malformed.
  VisionEncoder(const gguf::File& file, ops::Backend& backend);

  const VisionHparams& hparams() const { return hp_; }
  // Language-model tokens an image of these patches becomes.
  int64_t n_tokens(const vision::Patches& p) const { return p.n_patches() / (hp_.merge * hp_.merge); }

  // The images' embeddings, one after another: [sum of n_tokens, n_out] in host memory.
  // Throws Error(kInvalidInput) for patches of another shape than the model's.
  std::vector<float> encode(const std::vector<const vision::Patches*>& images);

  // The same encoding in steps, so that a server can run other work between them (the
  // bits are those of encode()). start() checks the patches (throwing as encode() does) and
  // uploads them; each advance() runs the next `units` of the n_units() units (the blocks,
  // then the merger) and says whether the job is done; result() then gives the embeddings.
  // The patches must outlive the job; the job must not outlive the encoder.
  struct Job {
    int64_t n = 0, n_merged = 0;  // patches, output rows
    std::vector<int32_t> pos3, pos1;  // the RoPE positions the blocks read (host memory)
    std::vector<ops::FullAttentionSeg> segs;
    std::unique_ptr<ops::Buffer> x, cur, q, k, v, att, ff, out;
    int64_t next = 0;  // the next unit: block `next`, or the merger after the last block
    bool done = false;
  };
  std::unique_ptr<Job> start(const std::vector<const vision::Patches*>& images);
  bool advance(Job& job, int64_t units);
  int64_t n_units() const { return static_cast<int64_t>(blocks_.size()) + 1; }
  std::vector<float> result(Job& job);

 private:
  struct Block {
    ops::WeightView ln1_w, ln1_b, ln2_w, ln2_b;
    ops::WeightView q, k, v, q_b, k_b, v_b, out, out_b;
    ops::WeightView up, up_b, down, down_b;
  };
  // The position table resampled to a gh x gw grid, rows in the patches' order.
  void position_rows(int64_t gh, int64_t gw, float* out) const;
  static ops::WeightView f32_view(const std::string& name, const float* data, int64_t n_cols, int64_t n_rows);

  const gguf::File& file_;
  ops::Backend& be_;
  VisionHparams hp_;
  OwnedWeights owned_;
  std::deque<std::vector<float>> store_;  // weights derived at load (patch kernel, qkv bias thirds)
  ops::WeightView patch_w_, patch_b_, post_w_, post_b_, mm0_, mm0_b_, mm2_, mm2_b_;
  std::vector<float> pos_table_;  // [n_pos_side^2, n_embd]
  std::vector<Block> blocks_;
};

}  // namespace hearth::model
