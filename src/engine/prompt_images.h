// Images in a tokenized prompt (Qwen3.5 and other Qwen-VL models): the chat template
// writes one image placeholder token (<|image_pad|>) per image; each is expanded here
// into as many tokens as its image becomes, and the engine later fills those rows with
// the vision encoder's output. The rows' token ids in the prefix cache's keys are
// derived from a hash of the image's pixels, so that the same image in a later turn
// reuses the cached prefix and another image at the same place does not.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/batch_layout.h"
#include "model/vision_encoder.h"
#include "tokenizer/tokenizer.h"
#include "vision/image.h"

namespace hearth::engine {

// One image of a request, preprocessed.
struct PromptImage {
  std::shared_ptr<const vision::Patches> patches;
  uint64_t hash = 0;       // of the patches' values (prefix-cache key)
  std::string where;       // for messages: "messages[1].content[0]"
  int64_t first_row = 0;   // set by expand_image_pads: its first prompt row
  int64_t n_tokens = 0;    // set by expand_image_pads: rows it fills
};

// A 64-bit hash of the patches (grid and values).
uint64_t hash_patches(const vision::Patches& p);

// Expands the k-th occurrence of `pad_id` in `prompt` into images[k]'s tokens
// (n_patches / merge^2 copies) and sets each image's first_row / n_tokens. Throws
// Error(kInvalidInput) when the prompt holds another number of placeholders than images.
void expand_image_pads(std::vector<int32_t>& prompt, int32_t pad_id, std::vector<PromptImage>& images,
                       int64_t merge);

// The prefix-cache key tokens of a prompt: image rows get negative ids derived from
// their image's hash and their place in it (never a real token id); other rows are the
// prompt's own.
std::vector<int32_t> prompt_key_tokens(const std::vector<int32_t>& prompt, const std::vector<PromptImage>& images);

// The id of the image placeholder token (<|image_pad|>), or -1 when the vocabulary has none.
int32_t image_pad_id(const tokenizer::Tokenizer& tok);

// Decodes and preprocesses one encoded image (PNG, JPEG, WebP, GIF) for `enc`; errors name
// `where`. max_pixels bounds the decoded image (width * height).
PromptImage prepare_image(std::string_view bytes, const std::string& where, const model::VisionEncoder& enc,
                          int64_t max_pixels);

// A prompt's images encoded for the model: their rows' embeddings (`embd`, which `media`'s
// spans point into: keep it alive and unmoved... a std::vector moved keeps its buffer) and
// the prompt's 3-D positions.
void encode_prompt_images(model::VisionEncoder& enc, int64_t n_prompt, const std::vector<PromptImage>& images,
                          std::vector<float>& embd, model::SeqMedia& media);

// The same in steps (the server's engine runs other work between them): start the
// encoder's job (images must outlive it), advance it with VisionEncoder::advance, then
// finish: the embeddings and positions as encode_prompt_images gives them.
std::unique_ptr<model::VisionEncoder::Job> start_prompt_images(model::VisionEncoder& enc,
                                                               const std::vector<PromptImage>& images);
void finish_prompt_images(model::VisionEncoder& enc, model::VisionEncoder::Job& job, int64_t n_prompt,
                          const std::vector<PromptImage>& images, std::vector<float>& embd, model::SeqMedia& media);

}  // namespace hearth::engine
