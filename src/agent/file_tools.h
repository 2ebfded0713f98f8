// The agent's file tools: read, write, edit (unique string replace), list a
// directory, search files for a regular expression (PCRE2). Each returns the
// text for the model or throws ToolError with a message for it.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

namespace hearth::agent {

// A tool failed in a way the model should hear about (bad path, no match...).
class ToolError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The file's text (refuses directories and files over 16 MiB).
std::string read_file_tool(const std::string& path);
// Writes `content` to `path` (creating parent folders); returns a one-line summary.
std::string write_file_tool(const std::string& path, const std::string& content);
// Replaces the single occurrence of `old_text` in the file with `new_text`;
// ToolError when it occurs 0 or more than 1 times (with the count).
std::string edit_file_tool(const std::string& path, const std::string& old_text,
                           const std::string& new_text);
// One line per entry, sorted: "name/" for folders, "name  SIZE" for files.
std::string list_dir_tool(const std::string& path);
// "FILE:LINE: TEXT" for each line matching `pattern` in the files under `path`
// (recursively; skips .git and binary files), at most `max_results` lines, then
// a line saying how many more matches there were.
std::string search_files_tool(const std::string& pattern, const std::string& path,
                              size_t max_results);

}  // namespace hearth::agent
