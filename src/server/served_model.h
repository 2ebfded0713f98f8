// What the HTTP routes use of one model while they serve a request: its engine,
// tokenizer, chat template and chat settings, and the id answered when a request names
// none. A request holds its model through a ModelLease for as long as it runs (its
// stream included): while any lease lives, the model registry does not unload it.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "engine/chat_prompt.h"
#include "engine/serve_engine.h"
#include "server/chat_request.h"
#include "tokenizer/tokenizer.h"

namespace hearth::server {

struct ServedModel {
  engine::ServeEngine* engine = nullptr;
  const tokenizer::Tokenizer* tok = nullptr;
  const engine::ChatPrompt* chat = nullptr;
  const ChatSettings* settings = nullptr;
  std::string id;  // the model's id (/v1/models), echoed when a request names no model
};

// Keeps one model loaded while it lives (the registry counts it as a request in flight).
using ModelLease = std::shared_ptr<const ServedModel>;

// The model a request's "model" field picks (nullopt: the field was absent), loaded and
// leased. Throws ApiException: 404 for a name no model answers to (listing the names),
// 503 (Retry-After) when the model did not finish loading in time, 500 when it failed to load.
using ModelPicker = std::function<ModelLease(const std::optional<std::string>& name)>;

}  // namespace hearth::server
