#include "agent/image_tool.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <system_error>

#include "agent/file_tools.h"
#include "bench/image_payload.h"

namespace hearth::agent {
namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace {

std::string hex_head(const std::string& bytes) {
  std::string out;
  char b[4];
  for (size_t i = 0; i < bytes.size() && i < 8; ++i) {
    std::snprintf(b, sizeof b, "%s%02x", i ? " " : "", static_cast<unsigned char>(bytes[i]));
    out += b;
  }
  return out;
}

}  // namespace

ImageFile read_image_file(const std::string& path, size_t max_bytes) {
  if (path.empty()) throw ToolError("'path' is empty");
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) throw ToolError("'" + path + "' does not exist");
  if (fs::is_directory(st)) throw ToolError("'" + path + "' is a directory (use list_dir)");
  if (!fs::is_regular_file(st)) throw ToolError("'" + path + "' is not a regular file");
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) throw ToolError("cannot read the size of '" + path + "': " + ec.message());
  if (size == 0) throw ToolError("'" + path + "' is empty");
  if (size > max_bytes)
    throw ToolError("'" + path + "' is " + std::to_string(size) + " bytes, more than the " +
                    std::to_string(max_bytes) + " an image may have");
  std::ifstream f(path, std::ios::binary);
  if (!f) throw ToolError("cannot open '" + path + "' for reading");
  ImageFile img;
  img.path = path;
  img.bytes.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  img.media_type = bench::image_media_type(img.bytes);
  if (img.media_type.empty())
    throw ToolError("'" + path + "' is not a PNG, JPEG, WebP or GIF image (it starts with " +
                    hex_head(img.bytes) + ")");
  return img;
}

std::string describe_image(const ImageFile& image) {
  return image.path + " (" + image.media_type + ", " + std::to_string(image.bytes.size()) + " bytes)";
}

json image_part(const ImageFile& image) {
  return json{{"type", "image_url"},
              {"image_url", {{"url", "data:" + image.media_type + ";base64," + bench::base64_encode(image.bytes)}}}};
}

bool is_image_part(const json& part) {
  return part.is_object() && part.contains("type") && part["type"] == "image_url";
}

namespace {

// Calls f(part) for each image part, newest message first, last part first.
template <typename F>
void each_image_newest_first(json& messages, F f) {
  if (!messages.is_array()) return;
  for (size_t i = messages.size(); i-- > 0;) {
    json& m = messages[i];
    if (!m.is_object() || !m.contains("content") || !m["content"].is_array()) continue;
    json& parts = m["content"];
    for (size_t k = parts.size(); k-- > 0;)
      if (is_image_part(parts[k])) f(parts[k]);
  }
}

}  // namespace

size_t count_images(const json& messages) {
  size_t n = 0;
  each_image_newest_first(const_cast<json&>(messages), [&](json&) { ++n; });
  return n;
}

size_t keep_recent_images(json& messages, size_t keep) {
  size_t seen = 0, replaced = 0;
  each_image_newest_first(messages, [&](json& part) {
    if (++seen <= keep) return;
    part = json{{"type", "text"},
                {"text", "[an image shown earlier was left out here; view it again to see it]"}};
    ++replaced;
  });
  return replaced;
}

size_t replace_images(json& messages, const std::string& note) {
  size_t replaced = 0;
  each_image_newest_first(messages, [&](json& part) {
    part = json{{"type", "text"}, {"text", note}};
    ++replaced;
  });
  return replaced;
}

size_t message_chars(const json& message, size_t image_chars) {
  size_t chars = message.dump().size();
  if (!message.is_object() || !message.contains("content") || !message["content"].is_array()) return chars;
  for (const json& part : message["content"]) {
    if (!is_image_part(part)) continue;
    const size_t url = part.dump().size();
    chars = chars - url + image_chars;
  }
  return chars;
}

}  // namespace hearth::agent
