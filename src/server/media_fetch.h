// The bytes behind an image reference of a request (OpenAI image_url, Anthropic image
// source, Responses input_image), under the server's media settings: data: URLs (strict
// base64), file:// paths only inside an --allowed-media-dir, http(s):// URLs only with
// --allow-remote-media (libcurl, size limit enforced while downloading, timeout, few
// redirects and only to http(s)). Every refusal is an ApiException (400) whose message
// starts with the request field that held the reference. Nothing here decodes images.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hearth::server {

// `hearth serve`'s media options, fixed at start-up.
struct MediaSettings {
  std::vector<std::string> allowed_media_dirs;  // --allowed-media-dir (file:// only inside one)
  bool allow_remote = false;                    // --allow-remote-media (http(s) URLs)
  int64_t max_bytes = 20LL << 20;               // --max-media-bytes: one image's encoded size
  int timeout_ms = 10000;                       // --media-timeout-ms: one download, all of it
  int max_images = 8;                           // --max-images-per-request
};

// Strict base64 (RFC 4648 alphabet, '=' padding required, nothing else: no whitespace,
// no URL-safe letters). Throws std::invalid_argument naming the 0-based offset of the
// first bad character ("byte 12 is '*', not a base64 character").
std::string decode_base64(std::string_view text);

// The bytes of a data: URL "data:[<media type>][;params];base64,<data>" (the media type
// may be missing; when given it must be image/* or application/octet-stream). Throws
// std::invalid_argument saying what is wrong (offsets within the base64 data).
std::string decode_data_url(std::string_view url);

// The canonical path of `path` (an absolute path) when it lies inside one of `dirs`, both
// resolved by realpath (so neither ".." nor a symlink leads out). Throws
// std::invalid_argument: no allowed dirs, a relative path, a path outside them, a missing
// file that would be inside ("not found: PATH"; a missing file outside is "outside").
std::string confine_path(const std::string& path, const std::vector<std::string>& dirs);

// The bytes an image reference stands for. `url`: a data:, file:// or http(s):// URL;
// `param`: the request field that held it (e.g. "messages[1].content[2].image_url"),
// which starts every error message ("messages[1].content[2].image_url: ...").
std::string fetch_media(const std::string& url, const std::string& param, const MediaSettings& settings);

}  // namespace hearth::server
