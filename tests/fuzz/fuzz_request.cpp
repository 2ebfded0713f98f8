// libFuzzer target for what `hearth serve` does with a request's bytes before any model
// work: the HTTP framing check (RequestFramer, fed in pieces of fuzzer-chosen sizes) and
// the JSON request parsers of every route (OpenAI chat/completions and completions,
// Anthropic messages and count_tokens, the Responses API), the same functions the routes call, then the
// template inputs built from a parsed request. The first byte picks the parser; the rest
// is the body. ApiException (a 4xx for the client) is the expected way to reject bad
// input; anything else (crash, sanitizer report, other exception, time-out) is a bug.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "server/anthropic_protocol.h"
#include "server/openai_protocol.h"
#include "server/request_framing.h"
#include "server/responses_protocol.h"

namespace {

void fuzz_framing(const uint8_t* data, size_t size) {
  // Small limits so that the size checks are reached.
  hearth::server::RequestFramer framer(512, 4096);
  size_t i = 0;
  while (i < size) {
    // Each piece's length is taken from the data itself (1..16 bytes).
    const size_t n = std::min<size_t>(size - i, 1 + (data[i] & 15));
    const bool ok = framer.feed(reinterpret_cast<const char*>(data + i), n);
    i += n;
    if (!ok) {
      if (framer.error().status < 400 || framer.error().message.empty()) __builtin_trap();
      return;
    }
    if (framer.complete()) framer.reset();  // keep-alive: the next request follows
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // (The kept corpus was written for data[0] % 5; the Responses parser took the top bytes.)
  const uint8_t mode = data[0] < 250 ? data[0] % 5 : 5;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  using namespace hearth::server;
  try {
    switch (mode) {
      case 0: {
        const ParsedRequest r = parse_chat_request(body);
        (void)messages_for_template(r);
        break;
      }
      case 1:
        (void)parse_completion_request(body);
        break;
      case 2: {
        const AnthropicRequest r = parse_anthropic_request(body, AnthropicEndpoint::kMessages);
        (void)anthropic_template_extra(r);
        break;
      }
      case 3:
        (void)parse_anthropic_request(body, AnthropicEndpoint::kCountTokens);
        break;
      case 5: {
        const ResponsesRequest r = parse_responses_request(body);
        (void)conversation_messages(r.instructions, r.items);
        break;
      }
      default:
        fuzz_framing(data + 1, size - 1);
        break;
    }
  } catch (const ApiException& e) {
    if (e.error().status < 400 || e.error().status >= 500 || e.error().message.empty())
      __builtin_trap();
  }
  return 0;
}
