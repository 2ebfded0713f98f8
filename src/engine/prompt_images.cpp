#include "engine/prompt_images.h"

#include <cstring>

#include "core/error.h"
#include "model/mrope_positions.h"

namespace hearth::engine {
namespace {

uint64_t mix(uint64_t h, uint64_t v) {
  // splitmix64 of (h ^ v): enough to spread the pixels' bits over the whole word.
  uint64_t z = h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

uint64_t hash_patches(const vision::Patches& p) {
  uint64_t h = mix(mix(mix(0x6a09e667f3bcc909ULL, static_cast<uint64_t>(p.grid_t)), static_cast<uint64_t>(p.grid_h)),
                   static_cast<uint64_t>(p.grid_w));
  const size_t n = p.data.size();
  const auto* bytes = reinterpret_cast<const unsigned char*>(p.data.data());
  size_t i = 0;
  for (; i + 8 <= n * sizeof(float); i += 8) {
    uint64_t w;
    std::memcpy(&w, bytes + i, 8);
    h = mix(h, w);
  }
  for (; i < n * sizeof(float); ++i) h = mix(h, bytes[i]);
  return h;
}

void expand_image_pads(std::vector<int32_t>& prompt, int32_t pad_id, std::vector<PromptImage>& images,
                       int64_t merge) {
  size_t n_pads = 0;
  for (int32_t t : prompt) n_pads += t == pad_id ? 1 : 0;
  if (n_pads != images.size())
    fail(ErrorKind::kInvalidInput, "vision",
         "the prompt holds " + std::to_string(n_pads) + " image placeholders for " + std::to_string(images.size()) +
             " images (the chat template must write one <|image_pad|> per image, and text must not contain it)");
  std::vector<int32_t> out;
  out.reserve(prompt.size());
  size_t k = 0;
  for (int32_t t : prompt) {
    if (t != pad_id) {
      out.push_back(t);
      continue;
    }
    PromptImage& img = images[k++];
    img.first_row = static_cast<int64_t>(out.size());
    img.n_tokens = img.patches->n_patches() / (merge * merge);
    out.insert(out.end(), static_cast<size_t>(img.n_tokens), pad_id);
  }
  prompt = std::move(out);
}

std::vector<int32_t> prompt_key_tokens(const std::vector<int32_t>& prompt, const std::vector<PromptImage>& images) {
  std::vector<int32_t> key = prompt;
  for (const PromptImage& img : images) {
    for (int64_t j = 0; j < img.n_tokens; ++j) {
      const uint64_t h = mix(img.hash, static_cast<uint64_t>(j));
      key[static_cast<size_t>(img.first_row + j)] = -1 - static_cast<int32_t>(h & 0x7ffffffeULL);
    }
  }
  return key;
}

int32_t image_pad_id(const tokenizer::Tokenizer& tok) {
  tokenizer::EncodeOptions o;
  o.add_special = false;
  o.parse_special = true;
  const std::vector<int32_t> ids = tok.encode("<|image_pad|>", o);
  return ids.size() == 1 ? ids[0] : -1;
}

PromptImage prepare_image(std::string_view bytes, const std::string& where, const model::VisionEncoder& enc,
                          int64_t max_pixels) {
  vision::DecodeLimits lim;
  lim.max_pixels = max_pixels;
  const vision::Image img = vision::decode_image(bytes, where, lim);
  auto patches = std::make_shared<vision::Patches>(vision::preprocess(img, enc.hparams().pre));
  PromptImage p;
  p.hash = hash_patches(*patches);
  p.patches = std::move(patches);
  p.where = where;
  return p;
}

void encode_prompt_images(model::VisionEncoder& enc, int64_t n_prompt, const std::vector<PromptImage>& images,
                          std::vector<float>& embd, model::SeqMedia& media) {
  const auto job = start_prompt_images(enc, images);
  while (!enc.advance(*job, enc.n_units())) {
  }
  finish_prompt_images(enc, *job, n_prompt, images, embd, media);
}

std::unique_ptr<model::VisionEncoder::Job> start_prompt_images(model::VisionEncoder& enc,
                                                               const std::vector<PromptImage>& images) {
  std::vector<const vision::Patches*> ps;
  for (const PromptImage& img : images) ps.push_back(img.patches.get());
  return enc.start(ps);
}

void finish_prompt_images(model::VisionEncoder& enc, model::VisionEncoder::Job& job, int64_t n_prompt,
                          const std::vector<PromptImage>& images, std::vector<float>& embd, model::SeqMedia& media) {
  std::vector<model::ImageGrid> grids;
  const int64_t m = enc.hparams().merge;
  for (const PromptImage& img : images) {
    grids.push_back({img.first_row, img.patches->grid_t, img.patches->grid_h / m, img.patches->grid_w / m});
    if (grids.back().n_tokens() != img.n_tokens)
      fail(ErrorKind::kInternal, "vision", img.where + ": the image's rows disagree with its grid");
  }
  embd = enc.result(job);
  const int64_t width = enc.hparams().n_out;
  int64_t off = 0;
  media.spans.clear();
  for (const PromptImage& img : images) {
    media.spans.push_back({img.first_row, img.n_tokens, embd.data() + off * width});
    off += img.n_tokens;
  }
  model::qwen_vl_positions(n_prompt, grids, media);
}

}  // namespace hearth::engine
