// Images in requests, up to the prepared chat: strict base64 and data: URLs (errors name
// the offset), file paths confined to the allowed media directories (realpath, symlinks,
// ".."), fetch_media's errors naming the request field, the image parts of the OpenAI,
// Anthropic and Responses parsers (order and `where`), load_images (too many images, a
// model without vision), and prepare_chat's placeholder check on the Qwen3.5 template
// (takes images) and the default model's ChatML template (does not).
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "core/mapped_file.h"
#include "engine/chat_prompt.h"
#include "format/gguf.h"
#include "server/anthropic_protocol.h"
#include "server/chat_request.h"
#include "server/media_fetch.h"
#include "server/openai_protocol.h"
#include "server/responses_protocol.h"
#include "tokenizer/tokenizer.h"

using namespace hearth::server;
using json = nlohmann::ordered_json;

namespace {

// The message of the std::invalid_argument `f` throws ("" when it does not throw).
template <class F>
std::string refusal(F f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

// The error of the ApiException `f` throws (status 0 when it does not throw).
template <class F>
ApiError api_error(F f) {
  try {
    f();
  } catch (const ApiException& e) {
    return e.error();
  }
  return ApiError{0, "", "", "", ""};
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(MediaBase64, DecodesStrictBase64) {
  EXPECT_EQ(decode_base64(""), "");
  EXPECT_EQ(decode_base64("aGk="), "hi");
  EXPECT_EQ(decode_base64("aGVsbG8="), "hello");
  EXPECT_EQ(decode_base64("aGVsbG8h"), "hello!");
  EXPECT_EQ(decode_base64("AP8="), std::string("\x00\xff", 2));
  EXPECT_EQ(decode_base64("+/+/"), "\xfb\xff\xbf");
}

TEST(MediaBase64, ErrorsNameTheOffset) {
  EXPECT_TRUE(has(refusal([] { decode_base64("aG*k"); }), "byte 2 is '*'")) << refusal([] { decode_base64("aG*k"); });
  EXPECT_TRUE(has(refusal([] { decode_base64("aGVsbG8*"); }), "byte 7"));
  // Whitespace and URL-safe letters are not base64 here.
  EXPECT_TRUE(has(refusal([] { decode_base64("aGVs\nbG8h"); }), "byte 4 is 0x0a"));
  EXPECT_TRUE(has(refusal([] { decode_base64("aGV-bG8h"); }), "byte 3 is '-'"));
  // Padding only at the very end.
  EXPECT_TRUE(has(refusal([] { decode_base64("aG==aGk="); }), "byte 2 is '=', padding before the end"));
  EXPECT_TRUE(has(refusal([] { decode_base64("a==="); }), "byte 1"));
  // A length that is not a multiple of 4: truncated or unpadded.
  EXPECT_TRUE(has(refusal([] { decode_base64("aGk"); }), "not a multiple of 4"));
  EXPECT_TRUE(has(refusal([] { decode_base64("aG%k="); }), "byte 2 is '%'"));
}

TEST(MediaDataUrl, ParsesAndRefuses) {
  EXPECT_EQ(decode_data_url("data:image/png;base64,aGk="), "hi");
  EXPECT_EQ(decode_data_url("DATA:Image/PNG;BASE64,aGk="), "hi");
  EXPECT_EQ(decode_data_url("data:;base64,aGk="), "hi");  // no media type
  EXPECT_EQ(decode_data_url("data:image/jpeg;name=x.jpg;base64,aGk="), "hi");
  EXPECT_TRUE(has(refusal([] { decode_data_url("data:image/png,aGk="); }), "not base64"));
  EXPECT_TRUE(has(refusal([] { decode_data_url("data:image/png;base64"); }), "no ','"));
  EXPECT_TRUE(has(refusal([] { decode_data_url("data:image/png;base64,"); }), "holds no data"));
  EXPECT_TRUE(has(refusal([] { decode_data_url("data:text/html;base64,aGk="); }), "'text/html' is not an image"));
  const std::string bad = refusal([] { decode_data_url("data:image/png;base64,aGVs!G8h"); });
  EXPECT_TRUE(has(bad, "invalid base64") && has(bad, "byte 4 is '!'")) << bad;
}

// A temporary tree: allowed/{a.png, sub/b.png, link -> ../outside/c.png, dirlink ->
// ../outside}, outside/c.png, allowed2/d.png (a name that starts like "allowed").
class MediaPaths : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/hearth_media_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    for (const char* d : {"/allowed", "/allowed/sub", "/outside", "/allowed2"}) ::mkdir((root_ + d).c_str(), 0755);
    write("/allowed/a.png", "AAAA");
    write("/allowed/sub/b.png", "BB");
    write("/outside/c.png", "CCC");
    write("/allowed2/d.png", "D");
    ASSERT_EQ(::symlink("../outside/c.png", (root_ + "/allowed/link").c_str()), 0);
    ASSERT_EQ(::symlink("../outside", (root_ + "/allowed/dirlink").c_str()), 0);
    ASSERT_EQ(::symlink("allowed", (root_ + "/alias").c_str()), 0);
    settings_.allowed_media_dirs = {root_ + "/allowed"};
  }
  void TearDown() override { std::system(("rm -rf '" + root_ + "'").c_str()); }
  void write(const std::string& rel, const std::string& bytes) { std::ofstream(root_ + rel) << bytes; }
  std::string confine(const std::string& rel) { return confine_path(root_ + rel, settings_.allowed_media_dirs); }
  std::string refused(const std::string& rel) {
    return refusal([&] { confine_path(root_ + rel, settings_.allowed_media_dirs); });
  }
  std::string root_;
  MediaSettings settings_;
};

TEST_F(MediaPaths, InsideTheAllowedDirectory) {
  char real[PATH_MAX];
  ASSERT_NE(::realpath((root_ + "/allowed").c_str(), real), nullptr);
  EXPECT_EQ(confine("/allowed/a.png"), std::string(real) + "/a.png");
  EXPECT_EQ(confine("/allowed/sub/../sub/./b.png"), std::string(real) + "/sub/b.png");
  EXPECT_EQ(confine("/allowed//sub/b.png"), std::string(real) + "/sub/b.png");
  // The allowed directory named through a symlink works both ways.
  EXPECT_EQ(confine("/alias/a.png"), std::string(real) + "/a.png");
  settings_.allowed_media_dirs = {root_ + "/alias"};
  EXPECT_EQ(confine("/allowed/a.png"), std::string(real) + "/a.png");
}

TEST_F(MediaPaths, EscapesAreRefused) {
  EXPECT_TRUE(has(refused("/outside/c.png"), "is outside the allowed media directories"));
  EXPECT_TRUE(has(refused("/allowed/../outside/c.png"), "is outside the allowed media directories"));
  EXPECT_TRUE(has(refused("/allowed/sub/../../outside/c.png"), "is outside"));
  EXPECT_TRUE(has(refused("/allowed2/d.png"), "is outside"));  // a prefix of the name is not inside
  EXPECT_TRUE(has(refused("/allowed/link"), "through a symbolic link"));
  EXPECT_TRUE(has(refused("/allowed/dirlink/c.png"), "through a symbolic link"));
  // A missing file inside is named; a relative path or no allowed directory is refused.
  EXPECT_EQ(refused("/allowed/missing.png"), "not found: " + root_ + "/allowed/missing.png");
  EXPECT_TRUE(has(refusal([] { confine_path("allowed/a.png", {"/tmp"}); }), "not an absolute path"));
  EXPECT_TRUE(has(refusal([&] { confine_path(root_ + "/allowed/a.png", {}); }), "--allowed-media-dir"));
}

TEST_F(MediaPaths, FetchMediaNamesTheField) {
  const std::string param = "messages[1].content[2].image_url";
  EXPECT_EQ(fetch_media("file://" + root_ + "/allowed/a.png", param, settings_), "AAAA");
  EXPECT_EQ(fetch_media("file://localhost" + root_ + "/allowed/sub/b.png", param, settings_), "BB");
  EXPECT_EQ(fetch_media("data:image/png;base64,aGk=", param, settings_), "hi");
  auto err = [&](const std::string& url) { return api_error([&] { fetch_media(url, param, settings_); }); };
  for (const std::string url : {"file://" + root_ + "/outside/c.png", "file://host" + root_ + "/allowed/a.png",
                                "file://" + root_ + "/allowed/missing.png", std::string("http://127.0.0.1:9/x.png"),
                                std::string("ftp://example.com/x.png"), std::string("data:image/png;base64,a*=="),
                                std::string("just text")}) {
    const ApiError e = err(url);
    EXPECT_EQ(e.status, 400) << url;
    EXPECT_EQ(e.param, param) << url;
    EXPECT_EQ(e.message.rfind(param + ": ", 0), 0u) << e.message;
  }
  EXPECT_TRUE(has(err("file://" + root_ + "/allowed/missing.png").message, "not found: "));
  EXPECT_TRUE(has(err("http://127.0.0.1:9/x.png").message, "--allow-remote-media"));
  EXPECT_TRUE(has(err("ftp://example.com/x.png").message, "scheme 'ftp' is not supported"));
  EXPECT_TRUE(has(err("file:" + root_ + "/allowed/a.png").message, "must be file:///absolute/path"));
  EXPECT_EQ(fetch_media("file://" + root_ + "/allowed/sub%2Fb.png", param, settings_), "BB");  // percent escapes
  EXPECT_TRUE(has(err("file://" + root_ + "/allowed/a%2.png").message, "bad percent escape"));
  EXPECT_TRUE(has(err("data:image/png;base64,a*==").message, "byte 1 is '*'"));
  // The size limit holds for files and data alike.
  settings_.max_bytes = 3;
  EXPECT_TRUE(has(err("file://" + root_ + "/allowed/a.png").message, "above the limit of 3"));
  EXPECT_TRUE(has(err("data:image/png;base64,aGVsbG8=").message, "above the limit of 3"));
  EXPECT_EQ(fetch_media("file://" + root_ + "/allowed/sub/b.png", param, settings_), "BB");
}

// The image parts of a conversation as (where, url) pairs.
std::vector<std::pair<std::string, std::string>> refs(const json& messages) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const json* p : image_parts(messages)) out.emplace_back((*p)["where"], (*p)["url"]);
  return out;
}

const std::string kPng = "data:image/png;base64,iVBORw0KGgo=";

TEST(MediaParse, OpenAIImageParts) {
  const ParsedRequest r = parse_chat_request(R"({"messages": [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": [{"type": "text", "text": "compare"},
      {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA", "detail": "high"}},
      {"type": "image_url", "image_url": "file:///srv/b.png"}]},
    {"role": "assistant", "content": "ok"},
    {"role": "tool", "tool_call_id": "c1", "content": [{"type": "image_url", "image_url": {"url": "http://x/c.png"}}]},
    {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]})");
  const json m = messages_for_template(r);
  using P = std::pair<std::string, std::string>;
  EXPECT_EQ(refs(m), (std::vector<P>{{"messages[1].content[1]", "data:image/png;base64,AAAA"},
                                     {"messages[1].content[2]", "file:///srv/b.png"},
                                     {"messages[3].content[0]", "http://x/c.png"}}));
  EXPECT_EQ(m[1]["content"][0], json({{"type", "text"}, {"text", "compare"}}));
  EXPECT_EQ(m[1]["content"][1]["param"], "messages[1].content[1].image_url");
  EXPECT_EQ(m[4]["content"], "a\nb");  // text-only content stays a string, as before
  EXPECT_EQ(m[0]["content"], "be brief");

  auto err = [](const std::string& body) { return api_error([&] { parse_chat_request(body); }); };
  ApiError e = err(R"({"messages": [{"role": "system", "content": [{"type": "image_url", "image_url": "x"}]}]})");
  EXPECT_EQ(e.param, "messages[0].content[0].type");
  EXPECT_TRUE(has(e.message, "images are allowed in user and tool messages only")) << e.message;
  e = err(R"({"messages": [{"role": "assistant", "content": [{"type": "image_url", "image_url": "x"}]}]})");
  EXPECT_TRUE(has(e.message, "not in a assistant message") || has(e.message, "assistant")) << e.message;
  e = err(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})");
  EXPECT_EQ(e.param, "messages[0].content[0].image_url");
  e = err(R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"detail": "low"}}]}]})");
  EXPECT_EQ(e.param, "messages[0].content[0].image_url.url");
  e = err(R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x", "detail": "max"}}]}]})");
  EXPECT_EQ(e.param, "messages[0].content[0].image_url.detail");
  e = err(R"({"messages": [{"role": "user", "content": [{"type": "input_audio"}]}]})");
  EXPECT_TRUE(has(e.message, "'input_audio' is not supported")) << e.message;
}

TEST(MediaParse, AnthropicImageBlocks) {
  const AnthropicRequest r = parse_anthropic_request(R"({"model": "m", "max_tokens": 8, "messages": [
    {"role": "user", "content": [{"type": "text", "text": "look"},
      {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}]},
    {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "shot", "input": {}}]},
    {"role": "user", "content": [
      {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "here"},
        {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}}]},
      {"type": "image", "source": {"type": "url", "url": "file:///srv/z.png"}},
      {"type": "text", "text": "and this"}]}]})",
                                                     AnthropicEndpoint::kMessages);
  using P = std::pair<std::string, std::string>;
  EXPECT_EQ(refs(r.messages), (std::vector<P>{{"messages[0].content[1]", kPng},
                                              {"messages[2].content[0].content[1]", "https://x/y.png"},
                                              {"messages[2].content[1]", "file:///srv/z.png"}}));
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[2]["role"], "tool");
  EXPECT_EQ(r.messages[2]["content"][0]["text"], "here");
  EXPECT_EQ(r.messages[3]["content"][1]["text"], "and this");
  EXPECT_EQ(image_parts(r.messages)[0]->value("param", ""), "messages[0].content[1].source");

  auto err = [](const std::string& content) {
    return api_error([&] {
      parse_anthropic_request(R"({"max_tokens": 8, "messages": [{"role": "user", "content": )" + content + "}]}",
                              AnthropicEndpoint::kMessages);
    });
  };
  ApiError e = err(R"([{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO$w0KGgo="}}])");
  EXPECT_EQ(e.param, "messages[0].content[0].source.data");
  EXPECT_TRUE(has(e.message, "byte 4 is '$'")) << e.message;
  e = err(R"([{"type": "image", "source": {"type": "base64", "media_type": "text/plain", "data": "aGk="}}])");
  EXPECT_EQ(e.param, "messages[0].content[0].source.media_type");
  e = err(R"([{"type": "image", "source": {"type": "file", "file_id": "f"}}])");
  EXPECT_EQ(e.param, "messages[0].content[0].source.type");
  e = err(R"([{"type": "image"}])");
  EXPECT_EQ(e.param, "messages[0].content[0].source");
  e = api_error([] {
    parse_anthropic_request(R"({"max_tokens": 8, "system": [{"type": "image", "source": {"type": "url", "url": "x"}}],
      "messages": [{"role": "user", "content": "hi"}]})",
                            AnthropicEndpoint::kMessages);
  });
  EXPECT_TRUE(has(e.message, "images are not allowed in system content")) << e.message;
}

TEST(MediaParse, ResponsesInputImages) {
  const ResponsesRequest r = parse_responses_request(R"({"instructions": "sys", "input": [
    {"role": "user", "content": [{"type": "input_text", "text": "what is it"},
      {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "auto"}]},
    {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "c", "output": [{"type": "input_image", "image_url": "http://h/i.png"}]}]})");
  const json m = conversation_messages(r.instructions, r.items);
  using P = std::pair<std::string, std::string>;
  EXPECT_EQ(refs(m), (std::vector<P>{{"input[0].content[1]", "data:image/png;base64,AAAA"},
                                     {"input[2].output[0]", "http://h/i.png"}}));
  EXPECT_EQ(m[0]["content"], "sys");
  EXPECT_EQ(m[1]["content"][0]["text"], "what is it");
  EXPECT_EQ(m[3]["role"], "tool");
  EXPECT_EQ(image_parts(m)[0]->value("param", ""), "input[0].content[1].image_url");

  auto err = [](const std::string& input) { return api_error([&] { parse_responses_request(R"({"input": )" + input + "}"); }); };
  ApiError e = err(R"([{"role": "system", "content": [{"type": "input_image", "image_url": "x"}]}])");
  EXPECT_EQ(e.param, "input[0].content[0].type");
  e = err(R"([{"role": "user", "content": [{"type": "input_image", "file_id": "file-1"}]}])");
  EXPECT_EQ(e.param, "input[0].content[0].file_id");
  e = err(R"([{"role": "user", "content": [{"type": "input_image", "image_url": {"url": "x"}}]}])");
  EXPECT_EQ(e.param, "input[0].content[0].image_url");
}

ChatInputs openai_inputs(const std::string& content) {
  return chat_inputs(parse_chat_request(R"({"messages": [{"role": "user", "content": )" + content + "}]}"));
}

TEST(MediaLoad, ReadsInOrderAndGatesOnVision) {
  ChatSettings s;
  const ChatInputs in = openai_inputs(R"([{"type": "text", "text": "x"},
    {"type": "image_url", "image_url": "data:image/png;base64,aGk="},
    {"type": "image_url", "image_url": {"url": "data:;base64,aGVsbG8="}}])");
  // No vision: a 400 naming the first image.
  ApiError e = api_error([&] { load_images(in, s, "smol"); });
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.message, "model 'smol' takes text only (no vision encoder): messages[0].content[1] is an image");
  // An unreadable image is named first, whatever the model.
  const ChatInputs broken = openai_inputs(R"([{"type": "image_url", "image_url": "data:image/png;base64,aGk="},
    {"type": "image_url", "image_url": "data:image/png;base64,aG?k"}])");
  e = api_error([&] { load_images(broken, s, "smol"); });
  EXPECT_EQ(e.param, "messages[0].content[1].image_url");
  EXPECT_TRUE(has(e.message, "byte 2 is '?'")) << e.message;
  // Vision: the bytes, in order, with where.
  s.vision = true;
  const std::vector<MediaInput> images = load_images(in, s, "vl");
  ASSERT_EQ(images.size(), 2u);
  EXPECT_EQ(images[0].bytes, "hi");
  EXPECT_EQ(images[0].where, "messages[0].content[1]");
  EXPECT_EQ(images[1].bytes, "hello");
  EXPECT_EQ(images[1].where, "messages[0].content[2]");
  // Too many.
  s.media.max_images = 1;
  e = api_error([&] { load_images(in, s, "vl"); });
  EXPECT_TRUE(has(e.message, "holds 2 images, more than the 1 allowed")) << e.message;
  // No images: nothing read, vision or not.
  s.vision = false;
  EXPECT_TRUE(load_images(openai_inputs("\"hi\""), s, "smol").empty());
}

TEST(MediaLoad, ExpandImageTokensCallsTheHook) {
  ChatSettings s;
  PreparedChat p;
  std::vector<int32_t> tokens = {1, 2, 3};
  expand_image_tokens(p, tokens, s);  // no images: nothing
  EXPECT_EQ(tokens.size(), 3u);
  p.images.push_back(MediaInput{"x", "messages[0].content[0]"});
  s.vision = true;
  EXPECT_EQ(api_error([&] { expand_image_tokens(p, tokens, s); }).status, 500);  // vision without a hook
  s.image_tokens = [](PreparedChat& prepared, std::vector<int32_t>& t) {
    t.insert(t.end(), prepared.images.size(), 7);
  };
  expand_image_tokens(p, tokens, s);
  EXPECT_EQ(tokens, (std::vector<int32_t>{1, 2, 3, 7}));
}

// prepare_chat on real templates with the default model's tokenizer.
class MediaTemplate : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* p = std::getenv("HEARTH_DEFAULT_MODEL");
    if (p == nullptr || *p == '\0') return;
    file_ = std::make_unique<hearth::gguf::File>(hearth::gguf::File::open(p));
    tok_ = std::make_unique<hearth::tokenizer::Tokenizer>(hearth::tokenizer::Tokenizer::from_gguf(*file_));
  }
  static void TearDownTestSuite() {
    tok_.reset();
    file_.reset();
  }
  void SetUp() override {
    if (!file_) GTEST_SKIP() << "HEARTH_DEFAULT_MODEL is not set";
  }
  static std::unique_ptr<hearth::engine::ChatPrompt> prompt(const std::string& name) {
    std::optional<std::string> src;
    if (!name.empty()) src = hearth::read_text_file(std::string(HEARTH_SHARED_DIR) + "/data/chat-templates/" + name);
    return std::make_unique<hearth::engine::ChatPrompt>(*file_, *tok_, src);
  }
  static PreparedChat prepare(const hearth::engine::ChatPrompt& chat, const ChatInputs& in) {
    ChatSettings settings;
    settings.caps = detect_template_caps(chat.source());
    return prepare_chat(in, chat, settings);
  }
  static std::unique_ptr<hearth::gguf::File> file_;
  static std::unique_ptr<hearth::tokenizer::Tokenizer> tok_;
};
std::unique_ptr<hearth::gguf::File> MediaTemplate::file_;
std::unique_ptr<hearth::tokenizer::Tokenizer> MediaTemplate::tok_;

size_t count(const std::string& s, const std::string& part) {
  size_t n = 0;
  for (size_t at = s.find(part); at != std::string::npos; at = s.find(part, at + 1)) ++n;
  return n;
}

TEST_F(MediaTemplate, QwenRendersOnePlaceholderPerImageInOrder) {
  const auto chat = prompt("Qwen3.5-4B.jinja");
  const PreparedChat p = prepare(*chat, openai_inputs(R"([{"type": "text", "text": "first"},
    {"type": "image_url", "image_url": "data:image/png;base64,aGk="}, {"type": "text", "text": "second"},
    {"type": "image_url", "image_url": "data:image/png;base64,aGk="}])"));
  EXPECT_EQ(count(p.prompt, "<|vision_start|><|image_pad|><|vision_end|>"), 2u) << p.prompt;
  const size_t a = p.prompt.find("first"), i1 = p.prompt.find("<|image_pad|>"), b = p.prompt.find("second"),
               i2 = p.prompt.find("<|image_pad|>", i1 + 1);
  EXPECT_TRUE(a < i1 && i1 < b && b < i2) << p.prompt;
  EXPECT_FALSE(has(p.prompt, "data:")) << p.prompt;  // the template sees no URL
  EXPECT_TRUE(p.images.empty());                       // (the route sets them)
  // Text-only: the content string renders as it always did.
  const PreparedChat text = prepare(*chat, openai_inputs("\"first\""));
  EXPECT_EQ(count(text.prompt, "<|image_pad|>"), 0u);
  EXPECT_TRUE(has(text.prompt, "<|im_start|>user\nfirst<|im_end|>")) << text.prompt;
}

TEST_F(MediaTemplate, QwenRendersAnthropicToolResultImages) {
  const auto chat = prompt("Qwen3.5-4B.jinja");
  const AnthropicRequest r = parse_anthropic_request(R"({"max_tokens": 8, "messages": [
    {"role": "user", "content": "take a screenshot"},
    {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "shot", "input": {}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [
      {"type": "text", "text": "done"}, {"type": "image", "source": {"type": "url", "url": "file:///a.png"}}]},
      {"type": "image", "source": {"type": "url", "url": "file:///b.png"}}, {"type": "text", "text": "compare"}]}],
    "tools": [{"name": "shot", "input_schema": {"type": "object"}}]})",
                                                     AnthropicEndpoint::kMessages);
  ChatInputs in;
  in.messages = r.messages;
  in.tools = r.tools;
  in.kwargs = r.chat_template_kwargs;
  const PreparedChat p = prepare(*chat, in);
  EXPECT_EQ(count(p.prompt, "<|image_pad|>"), 2u) << p.prompt;
  EXPECT_LT(p.prompt.find("<tool_response>"), p.prompt.find("<|image_pad|>")) << p.prompt;
  EXPECT_LT(p.prompt.find("<|image_pad|>"), p.prompt.find("compare")) << p.prompt;
}

TEST_F(MediaTemplate, ImagesInASystemMessageOrATextTemplateAre400s) {
  // The default model's ChatML template does not take images.
  const auto chat = prompt("");
  const ApiError e = api_error([&] {
    prepare(*chat, openai_inputs(R"([{"type": "text", "text": "x"}, {"type": "image_url", "image_url": "data:image/png;base64,aGk="}])"));
  });
  EXPECT_EQ(e.status, 400);
  EXPECT_TRUE(has(e.message, "the model's chat template does not take images")) << e.message;
  // The text-only template renders text-only requests.
  EXPECT_TRUE(has(prepare(*chat, openai_inputs("\"hi\"")).prompt, "hi"));
  // A Hermes-style tool result with an image (ChatML knows no tools): still a clean 400.
  ChatInputs in;
  in.messages = json::array({json{{"role", "user"}, {"content", "go"}},
                             json{{"role", "tool"}, {"tool_call_id", "c"},
                                  {"content", json::array({image_part("data:;base64,aGk=", "messages[1].content[0]",
                                                                      "messages[1].content[0].source")})}}});
  const ApiError t = api_error([&] { prepare(*chat, in); });
  EXPECT_EQ(t.status, 400);
  EXPECT_TRUE(has(t.message, "does not take images")) << t.message;
  // Qwen3.5 raises on an image in a system message (the parsers refuse them first; this
  // is what a template's refusal looks like).
  const auto qwen = prompt("Qwen3.5-4B.jinja");
  ChatInputs sys;
  sys.messages = json::array({json{{"role", "system"},
                                   {"content", json::array({image_part("data:;base64,aGk=", "messages[0].content[0]",
                                                                       "messages[0].content[0].image_url")})}},
                              json{{"role", "user"}, {"content", "hi"}}});
  const ApiError s = api_error([&] { prepare(*qwen, sys); });
  EXPECT_EQ(s.status, 400);
  EXPECT_TRUE(has(s.message, "does not take images")) << s.message;
}

}  // namespace
