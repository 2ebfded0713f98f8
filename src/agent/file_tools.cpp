#include "agent/file_tools.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <system_error>
#include <vector>

namespace hearth::agent {
namespace fs = std::filesystem;

namespace {

constexpr uintmax_t kMaxReadBytes = uintmax_t{16} << 20;

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) throw ToolError("cannot open '" + p.string() + "' for reading");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void check_regular(const fs::path& p) {
  std::error_code ec;
  const fs::file_status st = fs::status(p, ec);
  if (ec || !fs::exists(st)) throw ToolError("'" + p.string() + "' does not exist");
  if (fs::is_directory(st)) throw ToolError("'" + p.string() + "' is a directory (use list_dir)");
  if (!fs::is_regular_file(st)) throw ToolError("'" + p.string() + "' is not a regular file");
  const uintmax_t size = fs::file_size(p, ec);
  if (!ec && size > kMaxReadBytes)
    throw ToolError("'" + p.string() + "' is " + std::to_string(size) +
                    " bytes (more than 16 MiB)");
}

void spit(const fs::path& p, const std::string& content) {
  std::error_code ec;
  if (p.has_parent_path()) fs::create_directories(p.parent_path(), ec);
  if (ec)
    throw ToolError("cannot create folder '" + p.parent_path().string() + "': " + ec.message());
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  if (!f) throw ToolError("cannot open '" + p.string() + "' for writing");
  f << content;
  if (!f.flush()) throw ToolError("writing '" + p.string() + "' failed");
}

size_t count_occurrences(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + 1))
    ++n;
  return n;
}

// A NUL byte in the first 8 KiB: not text.
bool looks_binary(const std::string& text) { return text.find('\0') < 8192; }

struct CodeDeleter {
  void operator()(pcre2_code* c) const { pcre2_code_free(c); }
};
struct MatchDataDeleter {
  void operator()(pcre2_match_data* m) const { pcre2_match_data_free(m); }
};

}  // namespace

std::string read_file_tool(const std::string& path) {
  if (path.empty()) throw ToolError("'path' is empty");
  check_regular(path);
  return slurp(path);
}

std::string write_file_tool(const std::string& path, const std::string& content) {
  if (path.empty()) throw ToolError("'path' is empty");
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw ToolError("'" + path + "' is a directory");
  spit(path, content);
  return "wrote " + std::to_string(content.size()) + " bytes to " + path;
}

std::string edit_file_tool(const std::string& path, const std::string& old_text,
                           const std::string& new_text) {
  if (path.empty()) throw ToolError("'path' is empty");
  if (old_text.empty()) throw ToolError("'old_string' is empty");
  check_regular(path);
  std::string text = slurp(path);
  const size_t n = count_occurrences(text, old_text);
  if (n == 0) throw ToolError("'old_string' does not occur in " + path);
  if (n > 1)
    throw ToolError("'old_string' occurs " + std::to_string(n) + " times in " + path +
                    "; give more context so that it occurs once");
  const size_t pos = text.find(old_text);
  text.replace(pos, old_text.size(), new_text);
  spit(path, text);
  const size_t line =
      static_cast<size_t>(std::count(text.begin(), text.begin() + static_cast<long>(pos), '\n')) +
      1;
  return "replaced 1 occurrence in " + path + " (line " + std::to_string(line) + ")";
}

std::string list_dir_tool(const std::string& path) {
  const std::string dir = path.empty() ? "." : path;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw ToolError("'" + dir + "' is not a directory");
  std::vector<std::string> lines;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::error_code e2;
    if (it->is_directory(e2)) {
      lines.push_back(name + "/");
    } else {
      const uintmax_t size = it->is_regular_file(e2) ? it->file_size(e2) : 0;
      lines.push_back(name + "  " + std::to_string(e2 ? 0 : size));
    }
  }
  if (ec) throw ToolError("cannot list '" + dir + "': " + ec.message());
  std::sort(lines.begin(), lines.end());
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out.empty() ? "(empty folder)\n" : out;
}

std::string search_files_tool(const std::string& pattern, const std::string& path,
                              size_t max_results) {
  if (pattern.empty()) throw ToolError("'pattern' is empty");
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  std::unique_ptr<pcre2_code, CodeDeleter> re(
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                    PCRE2_UTF | PCRE2_MATCH_INVALID_UTF, &err, &err_offset, nullptr));
  if (!re) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw ToolError("bad regular expression at offset " + std::to_string(err_offset) + ": " +
                    reinterpret_cast<const char*>(msg));
  }
  std::unique_ptr<pcre2_match_data, MatchDataDeleter> md(
      pcre2_match_data_create_from_pattern(re.get(), nullptr));
  const std::string root = path.empty() ? "." : path;
  std::error_code ec;
  std::vector<fs::path> files;
  if (fs::is_regular_file(root, ec)) {
    files.push_back(root);
  } else if (fs::is_directory(root, ec)) {
    fs::recursive_directory_iterator it(root, fs::directory_options::skip_permission_denied, ec),
        end;
    for (; !ec && it != end; it.increment(ec)) {
      if (it->is_directory() && it->path().filename() == ".git") {
        it.disable_recursion_pending();
        continue;
      }
      std::error_code e2;
      if (it->is_regular_file(e2) && it->file_size(e2) <= kMaxReadBytes)
        files.push_back(it->path());
    }
  } else {
    throw ToolError("'" + root + "' does not exist");
  }
  std::sort(files.begin(), files.end());
  std::string out;
  size_t shown = 0, more = 0;
  for (const fs::path& f : files) {
    std::string text;
    try {
      text = slurp(f);
    } catch (const ToolError&) {
      continue;
    }
    if (looks_binary(text)) continue;
    size_t line_no = 0, pos = 0;
    while (pos < text.size()) {
      size_t nl = text.find('\n', pos);
      if (nl == std::string::npos) nl = text.size();
      ++line_no;
      const int rc = pcre2_match(re.get(), reinterpret_cast<PCRE2_SPTR>(text.data() + pos),
                                 nl - pos, 0, 0, md.get(), nullptr);
      if (rc >= 0) {
        if (shown < max_results) {
          std::string line = text.substr(pos, std::min<size_t>(nl - pos, 300));
          out += f.string() + ":" + std::to_string(line_no) + ": " + line + "\n";
          ++shown;
        } else {
          ++more;
        }
      }
      pos = nl + 1;
    }
  }
  if (shown == 0) return "no match for /" + pattern + "/ under " + root + "\n";
  if (more > 0) out += "[" + std::to_string(more) + " more matches not shown]\n";
  return out;
}

}  // namespace hearth::agent
