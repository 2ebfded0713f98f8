// The files of the web page (src/server/ui), built into the binary: their bytes are
// written into a generated source at build time (cmake/embed_files.cmake), so the page
// needs no file, CDN or network at run time.
#pragma once

#include <string_view>
#include <vector>

namespace hearth::server {

struct UiFile {
  std::string_view name;   // the file's name in src/server/ui ("index.html", "app.js")
  std::string_view bytes;  // its content
};

// Every file of the page, by name (sorted).
const std::vector<UiFile>& ui_files();

}  // namespace hearth::server
