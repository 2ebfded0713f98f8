#include "store/hub_http.h"

#include <curl/curl.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>

namespace hearth::store {
namespace {

void init_once() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct Sink {
  std::string* text = nullptr;  // get_text: the body; download: the error body (capped)
  FILE* file = nullptr;
  bool ok_status = true;        // the body is content (2xx), not an error page
  std::string write_error;
  uint64_t base = 0, done = 0;
  const std::function<void(uint64_t, uint64_t)>* progress = nullptr;
  CURL* curl = nullptr;
};

size_t on_data(char* data, size_t size, size_t n, void* user) {
  auto* s = static_cast<Sink*>(user);
  const size_t bytes = size * n;
  long status = 0;
  curl_easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, &status);
  if (s->file != nullptr && status / 100 == 2) {
    if (std::fwrite(data, 1, bytes, s->file) != bytes) {
      s->write_error = std::strerror(errno);
      return 0;  // stops the transfer
    }
    s->done += bytes;
    if (s->progress && *s->progress) {
      curl_off_t len = -1;
      curl_easy_getinfo(s->curl, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &len);
      (*s->progress)(s->base + s->done, len > 0 ? s->base + static_cast<uint64_t>(len) : 0);
    }
    return bytes;
  }
  if (s->text != nullptr && s->text->size() < (s->file ? 4096u : (256u << 20))) s->text->append(data, bytes);
  return bytes;
}

HttpReply perform(const std::string& url, const std::string& token, Sink& sink, uint64_t from) {
  init_once();
  HttpReply reply;
  std::unique_ptr<CURL, void (*)(CURL*)> curl(curl_easy_init(), curl_easy_cleanup);
  sink.curl = curl.get();
  sink.text = &reply.body;
  curl_slist* headers = nullptr;
  if (!token.empty()) headers = curl_slist_append(headers, ("Authorization: Bearer " + token).c_str());
  headers = curl_slist_append(headers, "User-Agent: hearth");
  curl_easy_setopt(curl.get(), CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl.get(), CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl.get(), CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(curl.get(), CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt(curl.get(), CURLOPT_CONNECTTIMEOUT, 30L);
  curl_easy_setopt(curl.get(), CURLOPT_LOW_SPEED_LIMIT, 1L);   // a stalled transfer ends
  curl_easy_setopt(curl.get(), CURLOPT_LOW_SPEED_TIME, 60L);
  curl_easy_setopt(curl.get(), CURLOPT_WRITEFUNCTION, on_data);
  curl_easy_setopt(curl.get(), CURLOPT_WRITEDATA, &sink);
  if (from > 0) curl_easy_setopt(curl.get(), CURLOPT_RANGE, (std::to_string(from) + "-").c_str());
  const CURLcode rc = curl_easy_perform(curl.get());
  curl_easy_getinfo(curl.get(), CURLINFO_RESPONSE_CODE, &reply.status);
  if (!sink.write_error.empty()) {
    reply.error = "cannot write: " + sink.write_error;
  } else if (rc != CURLE_OK) {
    reply.error = curl_easy_strerror(rc);
  }
  curl_slist_free_all(headers);
  return reply;
}

}  // namespace

HttpReply http_get_text(const std::string& url, const std::string& token) {
  Sink sink;
  return perform(url, token, sink, 0);
}

HttpReply http_download(const std::string& url, const std::string& token, const std::string& path,
                        const std::function<void(uint64_t, uint64_t)>& progress) {
  std::error_code ec;
  const uint64_t have = std::filesystem::exists(path, ec) ? std::filesystem::file_size(path, ec) : 0;
  // Opened for appending: bytes already there stay (a 200 reply truncates below).
  FILE* f = std::fopen(path.c_str(), "ab");
  if (f == nullptr) {
    HttpReply r;
    r.error = "cannot open " + path + ": " + std::strerror(errno);
    return r;
  }
  Sink sink;
  sink.file = f;
  sink.base = have;
  sink.progress = &progress;
  HttpReply r = perform(url, token, sink, have);
  std::fclose(f);
  if (have > 0 && r.status == 200) {
    // The server ignored Range and sent the whole file after what we had: keep the tail.
    std::filesystem::path p(path);
    const uint64_t size = std::filesystem::file_size(p, ec);
    std::FILE* in = std::fopen(path.c_str(), "rb");
    std::string tail;
    if (in != nullptr && size > have) {
      tail.resize(size - have);
      std::fseek(in, static_cast<long>(have), SEEK_SET);
      tail.resize(std::fread(tail.data(), 1, tail.size(), in));
    }
    if (in != nullptr) std::fclose(in);
    std::FILE* out = std::fopen(path.c_str(), "wb");
    if (out != nullptr) {
      std::fwrite(tail.data(), 1, tail.size(), out);
      std::fclose(out);
    }
  }
  return r;
}

}  // namespace hearth::store
