#include "server/image_tokens.h"

#include "core/error.h"
#include "engine/prompt_images.h"
#include "server/openai_protocol.h"

namespace hearth::server {

ImageTokensHook image_tokens_hook(const model::VisionEncoder& encoder, const tokenizer::Tokenizer& tok,
                                  int64_t max_image_pixels) {
  const int32_t pad = engine::image_pad_id(tok);
  if (pad < 0)
    fail(ErrorKind::kInvalidInput, "serve", "the model has a vision encoder but its vocabulary has no <|image_pad|> token");
  return [&encoder, pad, max_image_pixels](PreparedChat& prepared, std::vector<int32_t>& tokens) {
    std::vector<engine::PromptImage> images;
    images.reserve(prepared.images.size());
    for (const MediaInput& m : prepared.images) {
      try {
        images.push_back(engine::prepare_image(m.bytes, m.where, encoder, max_image_pixels));
      } catch (const Error& e) {
        throw ApiException(invalid_request(e.what(), m.where));
      }
    }
    try {
      engine::expand_image_pads(tokens, pad, images, encoder.hparams().merge);
    } catch (const Error& e) {
      throw ApiException(invalid_request(e.what()));
    }
    prepared.prompt_images = std::move(images);
  };
}

}  // namespace hearth::server
