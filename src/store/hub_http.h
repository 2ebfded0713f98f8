// The few HTTP requests `hearth pull` makes to a Hugging Face hub (libcurl): a JSON
// document, and a file downloaded into a partial file, resumed with a Range request.
// Redirects are followed (the hub sends LFS files to a CDN); the token goes only to the
// hub's own host (libcurl drops it on a redirect to another host).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace hearth::store {

struct HttpReply {
  long status = 0;     // 0 when no answer came (see error)
  std::string body;    // the document (get_text) or the first bytes of an error body
  std::string error;   // libcurl's message when the transfer failed
};

// GET url (Authorization: Bearer token when token is not empty).
HttpReply http_get_text(const std::string& url, const std::string& token);

// GET url into `path`, appending from its current size with a Range request when it
// already holds bytes (a server that ignores Range and answers 200 restarts the file).
// `progress(done, total)` is called as bytes arrive (total 0 when unknown). The reply's
// status is the final one; a write error (disk full) is in `error`.
HttpReply http_download(const std::string& url, const std::string& token, const std::string& path,
                        const std::function<void(uint64_t, uint64_t)>& progress);

}  // namespace hearth::store
