// The web page of `hearth serve`: GET / and /ui answer the page (index.html), /ui/NAME
// its script and style sheet, all from the bytes built into the binary (ui_assets.h).
//
// The page is a static shell: the same bytes for every server, with no model name,
// number or setting in it. Everything it shows it fetches from the API (GET /v1/status,
// GET /v1/models, POST /v1/chat/completions), and those routes need the API key when
// --api-key is set; so the shell is served without the key (the page must load to ask
// for it), and nothing about the server is. --no-ui leaves these routes out (404).
#pragma once

#include <httplib.h>

#include <string_view>

namespace hearth::server {

// The Content-Type of a page file by its extension (.html, .css, .js).
std::string_view ui_content_type(std::string_view name);

// Registers GET /, /ui, /ui/ and /ui/NAME on `svr`.
void add_ui_routes(httplib::Server& svr);

}  // namespace hearth::server
