// Images in the agent's conversation: reading an image file for the view_image tool
// or for an image the user attaches (the same path rules as the file tools: relative
// to the working directory or absolute; a regular file, PNG / JPEG / WebP / GIF by
// its signature, within a size limit), the OpenAI image_url part that carries it, and
// the bookkeeping of image parts in the messages (counting, keeping only the most
// recent ones, replacing them all with a note when the model takes text only).
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>

namespace hearth::agent {

// The server's default --max-media-bytes: a larger image would be refused anyway.
constexpr size_t kMaxImageBytes = size_t{20} << 20;

struct ImageFile {
  std::string path;
  std::string media_type;  // image/png, image/jpeg, image/webp, image/gif
  std::string bytes;
};

// Reads and checks one image; ToolError naming the path and what is wrong (empty
// path, missing, a directory, not a regular file, empty, over `max_bytes`, not one
// of the four formats: its first bytes in hex).
ImageFile read_image_file(const std::string& path, size_t max_bytes = kMaxImageBytes);

// "shot.png (image/png, 12345 bytes)".
std::string describe_image(const ImageFile& image);

// {"type": "image_url", "image_url": {"url": "data:<type>;base64,..."}}.
nlohmann::ordered_json image_part(const ImageFile& image);

// True for an OpenAI image part ({"type": "image_url", ...}).
bool is_image_part(const nlohmann::ordered_json& part);

// Image parts in the messages' content lists.
size_t count_images(const nlohmann::ordered_json& messages);

// Replaces all but the `keep` most recent image parts with a text part saying the
// image was shown earlier (servers cap images per request: --max-images-per-request).
// Returns the number replaced.
size_t keep_recent_images(nlohmann::ordered_json& messages, size_t keep);

// Replaces every image part with the text part `note`. Returns the number replaced.
size_t replace_images(nlohmann::ordered_json& messages, const std::string& note);

// The JSON size of a message with each image's data counted as `image_chars`
// characters instead of its base64 length (for token estimates and trimming shares).
size_t message_chars(const nlohmann::ordered_json& message, size_t image_chars = 4096);

}  // namespace hearth::agent
