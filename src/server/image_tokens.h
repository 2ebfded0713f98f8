// The vision hook of the chat routes (ChatSettings::image_tokens) for a model with a
// vision encoder: each image of a request is decoded and preprocessed (a 400 naming its
// content part when it does not decode or is too large), its <|image_pad|> placeholder
// expanded into the image's tokens, and the images kept with the prepared chat for the
// engine (PreparedChat::prompt_images -> GenRequest::images).
#pragma once

#include <cstdint>

#include "model/vision_encoder.h"
#include "server/chat_request.h"
#include "tokenizer/tokenizer.h"

namespace hearth::server {

// Throws Error(kInvalidInput) when the vocabulary has no <|image_pad|> token.
ImageTokensHook image_tokens_hook(const model::VisionEncoder& encoder, const tokenizer::Tokenizer& tok,
                                  int64_t max_image_pixels);

}  // namespace hearth::server
