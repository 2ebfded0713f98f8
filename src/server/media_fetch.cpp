// Image references resolved to bytes; see media_fetch.h.
#include "server/media_fetch.h"

#include <curl/curl.h>
#include <sys/stat.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <stdexcept>

#include "server/openai_protocol.h"

namespace hearth::server {
namespace {

[[noreturn]] void refuse(const std::string& message) { throw std::invalid_argument(message); }

int base64_value(unsigned char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

// A character for an error message: printable ASCII as is, else its code.
std::string show_char(unsigned char c) {
  if (c >= 0x20 && c < 0x7f) return std::string("'") + static_cast<char>(c) + "'";
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%02x", c);
  return buf;
}

bool starts_with_ci(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(s[i])) != prefix[i]) return false;
  }
  return true;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// "%2F" and the like decoded (a file URL's path); a bad escape is refused.
std::string percent_decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    auto hex = [](char c) {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    const int hi = i + 2 < s.size() ? hex(s[i + 1]) : -1;
    const int lo = i + 2 < s.size() ? hex(s[i + 2]) : -1;
    if (hi < 0 || lo < 0) {
      refuse("bad percent escape at byte " + std::to_string(i) + " of the path");
    }
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  if (out.find('\0') != std::string::npos) refuse("the path holds a NUL byte");
  return out;
}

// `path` (absolute) with "." and ".." segments and repeated slashes removed, lexically
// (".." above the root stays at the root).
std::string lexically_normal(const std::string& path) {
  std::vector<std::string> parts;
  size_t i = 0;
  while (i < path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    const std::string seg = path.substr(i, j - i);
    if (seg == "..") {
      if (!parts.empty()) parts.pop_back();
    } else if (!seg.empty() && seg != ".") {
      parts.push_back(seg);
    }
    i = j + 1;
  }
  std::string out;
  for (const auto& p : parts) out += "/" + p;
  return out.empty() ? "/" : out;
}

// True when `path` is `dir` or lies below it (both normal absolute paths).
bool inside(const std::string& path, const std::string& dir) {
  if (dir == "/") return true;
  return path == dir || (path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 && path[dir.size()] == '/');
}

std::string read_file(const std::string& path, int64_t max_bytes) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) refuse("cannot read " + path + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) refuse(path + " is not a regular file");
  if (st.st_size > max_bytes) {
    refuse(path + " is " + std::to_string(st.st_size) + " bytes, above the limit of " + std::to_string(max_bytes) +
           " (--max-media-bytes)");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) refuse("cannot open " + path + ": " + std::strerror(errno));
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (in.gcount() != static_cast<std::streamsize>(bytes.size())) refuse("cannot read all of " + path);
  return bytes;
}

// libcurl's global state, set up once (curl_global_init is not safe to race).
void curl_init_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) throw std::runtime_error("curl_global_init failed");
  });
}

struct Download {
  std::string bytes;
  int64_t max_bytes = 0;
  bool too_large = false;
};

size_t on_data(char* data, size_t size, size_t n, void* user) {
  auto* d = static_cast<Download*>(user);
  const size_t len = size * n;
  if (static_cast<int64_t>(d->bytes.size() + len) > d->max_bytes) {
    d->too_large = true;
    return 0;  // aborts the transfer (CURLE_WRITE_ERROR)
  }
  d->bytes.append(data, len);
  return len;
}

std::string download(const std::string& url, const MediaSettings& s) {
  curl_init_once();
  CURL* curl = curl_easy_init();
  if (curl == nullptr) refuse("cannot start a download (curl_easy_init failed)");
  struct Cleanup {
    CURL* c;
    ~Cleanup() { curl_easy_cleanup(c); }
  } cleanup{curl};
  Download d;
  d.max_bytes = s.max_bytes;
  char errbuf[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(curl, CURLOPT_MAXREDIRS, 3L);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(s.timeout_ms));
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);  // (many server threads: no SIGALRM for timeouts)
  curl_easy_setopt(curl, CURLOPT_MAXFILESIZE_LARGE, static_cast<curl_off_t>(s.max_bytes));
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_data);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &d);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(curl, CURLOPT_USERAGENT, "hearth");
  const CURLcode rc = curl_easy_perform(curl);
  const std::string limit = std::to_string(s.max_bytes) + " bytes (--max-media-bytes)";
  if (d.too_large || rc == CURLE_FILESIZE_EXCEEDED) refuse("the download of " + url + " is larger than " + limit);
  if (rc == CURLE_OPERATION_TIMEDOUT) {
    refuse("the download of " + url + " timed out after " + std::to_string(s.timeout_ms) + " ms");
  }
  if (rc == CURLE_TOO_MANY_REDIRECTS) refuse(url + " redirects more than 3 times");
  if (rc == CURLE_UNSUPPORTED_PROTOCOL) refuse(url + " redirects to a scheme other than http or https");
  if (rc != CURLE_OK) {
    refuse("cannot download " + url + ": " + (errbuf[0] != 0 ? std::string(errbuf) : curl_easy_strerror(rc)));
  }
  long status = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  if (status < 200 || status >= 300) refuse("the download of " + url + " answered HTTP " + std::to_string(status));
  return std::move(d.bytes);
}

}  // namespace

std::string decode_base64(std::string_view text) {
  if (text.size() % 4 != 0) {
    // Name the first character that cannot be where it is, else the missing padding.
    for (size_t i = 0; i < text.size(); ++i) {
      if (base64_value(static_cast<unsigned char>(text[i])) < 0 && text[i] != '=') {
        refuse("byte " + std::to_string(i) + " is " + show_char(static_cast<unsigned char>(text[i])) +
               ", not a base64 character");
      }
    }
    refuse("the base64 data is " + std::to_string(text.size()) +
           " characters, not a multiple of 4 (truncated, or '=' padding missing)");
  }
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    int v[4];
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      const auto c = static_cast<unsigned char>(text[i + k]);
      const bool last_group = i + 4 == text.size();
      if (c == '=' && last_group && k >= 2) {
        ++pad;
        v[k] = 0;
        continue;
      }
      if (pad > 0 || (c == '=')) {
        refuse("byte " + std::to_string(i + k) + " is " + show_char(c) +
               (c == '=' ? ", padding before the end of the data" : " after the '=' padding"));
      }
      v[k] = base64_value(c);
      if (v[k] < 0) refuse("byte " + std::to_string(i + k) + " is " + show_char(c) + ", not a base64 character");
    }
    const uint32_t triple = (uint32_t(v[0]) << 18) | (uint32_t(v[1]) << 12) | (uint32_t(v[2]) << 6) | uint32_t(v[3]);
    out += static_cast<char>((triple >> 16) & 0xff);
    if (pad < 2) out += static_cast<char>((triple >> 8) & 0xff);
    if (pad < 1) out += static_cast<char>(triple & 0xff);
  }
  return out;
}

std::string decode_data_url(std::string_view url) {
  if (!starts_with_ci(url, "data:")) refuse("not a data: URL");
  const size_t comma = url.find(',');
  if (comma == std::string_view::npos) refuse("the data: URL has no ',' before its data");
  const std::string header = lower(url.substr(5, comma - 5));  // "image/png;base64"
  std::string media_type = header.substr(0, header.find(';'));
  bool base64 = false;
  for (size_t at = header.find(';'); at != std::string::npos;) {
    const size_t next = header.find(';', at + 1);
    const std::string param = header.substr(at + 1, next == std::string::npos ? std::string::npos : next - at - 1);
    if (param == "base64") base64 = true;
    at = next;
  }
  if (!base64) refuse("the data: URL is not base64 (expected data:image/...;base64,...)");
  if (!media_type.empty() && media_type.rfind("image/", 0) != 0 && media_type != "application/octet-stream") {
    refuse("the data: URL's media type '" + media_type + "' is not an image type");
  }
  const std::string_view data = url.substr(comma + 1);
  if (data.empty()) refuse("the data: URL holds no data");
  try {
    return decode_base64(data);
  } catch (const std::invalid_argument& e) {
    refuse(std::string("invalid base64 in the data: URL: ") + e.what() + " (offsets count from the first byte after ',')");
  }
}

std::string confine_path(const std::string& path, const std::vector<std::string>& dirs) {
  if (dirs.empty()) refuse("file paths are refused: the server allows no media directory (--allowed-media-dir)");
  if (path.empty() || path[0] != '/') refuse("'" + path + "' is not an absolute path");
  // The file's canonical path (symlinks and ".." resolved as the file system does) must lie
  // inside an allowed dir's canonical path. The path as written, normalized, only picks the
  // message: "not found" for a missing file that would be inside, "outside" otherwise (so
  // nothing tells whether a file outside exists).
  const std::string lexical = lexically_normal(path);
  std::vector<std::string> canon_dirs;
  bool lexically_inside = false;
  for (const std::string& d : dirs) {
    char buf[PATH_MAX];
    const std::string canon = ::realpath(d.c_str(), buf) != nullptr ? std::string(buf) : std::string();
    if (!canon.empty()) canon_dirs.push_back(canon);
    if (inside(lexical, lexically_normal(d)) || (!canon.empty() && inside(lexical, canon))) lexically_inside = true;
  }
  const std::string outside = path + " is outside the allowed media directories (--allowed-media-dir)";
  char buf[PATH_MAX];
  if (::realpath(path.c_str(), buf) == nullptr) {
    const int err = errno;
    if (!lexically_inside) refuse(outside);
    if (err == ENOENT || err == ENOTDIR) refuse("not found: " + path);
    refuse("cannot resolve " + path + ": " + std::strerror(err));
  }
  const std::string real = buf;
  for (const std::string& d : canon_dirs) {
    if (inside(real, d)) return real;
  }
  if (lexically_inside) refuse(path + " leads outside the allowed media directories (through a symbolic link)");
  refuse(outside);
}

std::string fetch_media(const std::string& url, const std::string& param, const MediaSettings& s) {
  try {
    if (starts_with_ci(url, "data:")) {
      std::string bytes = decode_data_url(url);
      if (static_cast<int64_t>(bytes.size()) > s.max_bytes) {
        refuse("the image is " + std::to_string(bytes.size()) + " bytes, above the limit of " +
               std::to_string(s.max_bytes) + " (--max-media-bytes)");
      }
      return bytes;
    }
    if (starts_with_ci(url, "file:")) {
      if (!starts_with_ci(url, "file://")) {
        refuse("a file URL must be file:///absolute/path, got '" + url + "'");
      }
      std::string_view rest = std::string_view(url).substr(7);
      // file:///abs/path or file://localhost/abs/path; no other host.
      if (starts_with_ci(rest, "localhost/")) rest.remove_prefix(9);
      if (rest.empty() || rest[0] != '/') {
        refuse("a file URL must be file:///absolute/path (no host), got '" + url + "'");
      }
      const std::string path = percent_decode(rest.substr(0, rest.find_first_of("?#")));
      return read_file(confine_path(path, s.allowed_media_dirs), s.max_bytes);
    }
    if (starts_with_ci(url, "http://") || starts_with_ci(url, "https://")) {
      if (!s.allow_remote) refuse("remote images are refused: the server was not started with --allow-remote-media");
      return download(url, s);
    }
    const size_t colon = url.find(':');
    const std::string shown = url.size() > 64 ? url.substr(0, 64) + "..." : url;
    refuse(colon == std::string::npos || colon > 16
               ? "'" + shown + "' is not a URL (expected a data:, file:// or http(s):// URL)"
               : "the URL scheme '" + url.substr(0, colon) + "' is not supported (data:, file://, http(s)://)");
  } catch (const std::invalid_argument& e) {
    throw ApiException(invalid_request(param + ": " + e.what(), param));
  }
}

}  // namespace hearth::server
