// The web page's routes; see ui_page.h.
#include "server/ui_page.h"

#include <string>

#include "server/ui_assets.h"

namespace hearth::server {
namespace {

const UiFile* find_file(std::string_view name) {
  for (const UiFile& f : ui_files()) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

// The page loads nothing but its own files and talks only to this server; a script in
// model output that reached the DOM (the page never puts model text in as HTML) still
// could not run: no inline script, no eval, no other origin.
constexpr const char* kContentSecurityPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

void send_file(const UiFile& f, httplib::Response& res) {
  res.set_header("Content-Security-Policy", kContentSecurityPolicy);
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("Referrer-Policy", "no-referrer");
  res.set_header("Cache-Control", "no-cache");  // a new binary's page is picked up at once
  res.set_content(std::string(f.bytes), std::string(ui_content_type(f.name)));
}

}  // namespace

std::string_view ui_content_type(std::string_view name) {
  if (ends_with(name, ".html")) return "text/html; charset=utf-8";
  if (ends_with(name, ".css")) return "text/css; charset=utf-8";
  if (ends_with(name, ".js")) return "text/javascript; charset=utf-8";
  return "application/octet-stream";
}

void add_ui_routes(httplib::Server& svr) {
  auto page = [](const httplib::Request&, httplib::Response& res) {
    const UiFile* f = find_file("index.html");
    if (f == nullptr) {  // (a build without src/server/ui/index.html)
      res.status = 404;
      return;
    }
    send_file(*f, res);
  };
  svr.Get("/", page);
  svr.Get("/ui", page);
  svr.Get("/ui/", page);
  svr.Get(R"(/ui/([A-Za-z0-9._-]+))", [](const httplib::Request& req, httplib::Response& res) {
    const UiFile* f = find_file(req.matches[1].str());
    if (f == nullptr) {
      res.status = 404;  // the error handler writes the body
      return;
    }
    send_file(*f, res);
  });
}

}  // namespace hearth::server
