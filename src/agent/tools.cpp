#include "agent/tools.h"

#include <algorithm>

#include "agent/file_tools.h"
#include "agent/image_tool.h"
#include "agent/output_cap.h"
#include "agent/shell_tool.h"

namespace hearth::agent {

using json = nlohmann::ordered_json;

namespace {

json function_tool(const char* name, const char* description, json properties, json required) {
  return json{{"type", "function"},
              {"function",
               {{"name", name},
                {"description", description},
                {"parameters",
                 {{"type", "object"},
                  {"properties", std::move(properties)},
                  {"required", std::move(required)}}}}}};
}

json str_prop(const char* description) {
  return json{{"type", "string"}, {"description", description}};
}

const char* const kToolNames[] = {"run_shell", "read_file", "write_file",  "edit_file",
                                  "list_dir",  "search_files", "view_image"};

// The string field `key` of the arguments; ToolError naming it when absent or not a string.
std::string get_string(const json& args, const char* key, bool required = true) {
  auto it = args.find(key);
  if (it == args.end() || it->is_null()) {
    if (required) throw ToolError(std::string("missing argument '") + key + "'");
    return "";
  }
  if (!it->is_string()) throw ToolError(std::string("argument '") + key + "' must be a string");
  return it->get<std::string>();
}

}  // namespace

json tool_schemas(bool images) {
  json tools = json::array();
  tools.push_back(function_tool("run_shell",
                                "Run a shell command (/bin/sh -c) and return its combined output",
                                {{"command", str_prop("The command line to run")}}, {"command"}));
  tools.push_back(function_tool("read_file", "Read a text file",
                                {{"path", str_prop("Path of the file")}}, {"path"}));
  tools.push_back(function_tool(
      "write_file", "Write a text file (replaces its content)",
      {{"path", str_prop("Path of the file")}, {"content", str_prop("The new content")}},
      {"path", "content"}));
  tools.push_back(function_tool("edit_file", "Replace one unique occurrence of a string in a file",
                                {{"path", str_prop("Path of the file")},
                                 {"old_string", str_prop("Exact text to replace; must occur once")},
                                 {"new_string", str_prop("Replacement text")}},
                                {"path", "old_string", "new_string"}));
  tools.push_back(function_tool("list_dir", "List a directory",
                                {{"path", str_prop("Directory path")}}, {"path"}));
  tools.push_back(function_tool("search_files",
                                "Search files under a directory for a regular expression",
                                {{"pattern", str_prop("Regular expression (PCRE)")},
                                 {"path", str_prop("Directory to search (default: current)")}},
                                {"pattern"}));
  if (images)
    tools.push_back(function_tool(
        "view_image",
        "Look at an image file (a screenshot, diagram, chart or photo: PNG, JPEG, WebP or GIF); "
        "the image is shown to you with the result",
        {{"path", str_prop("Path of the image file")}}, {"path"}));
  return tools;
}

bool is_known_tool(const std::string& name) {
  return std::find(std::begin(kToolNames), std::end(kToolNames), name) != std::end(kToolNames);
}

bool shell_command_allowed(const std::string& command, const std::vector<std::string>& allow) {
  if (command.find_first_of(";|&`$<>\n\r()") != std::string::npos) return false;
  const std::string program = command_program(command);
  return !program.empty() && std::find(allow.begin(), allow.end(), program) != allow.end();
}

json ToolResult::content() const {
  if (image.is_null()) return text;
  return json::array({json{{"type", "text"}, {"text", text}}, image});
}

std::string run_tool(const std::string& name, const std::string& arguments,
                     const ToolPolicy& policy, const ConfirmFn& confirm,
                     const std::atomic<bool>* stop) {
  return run_tool_call(name, arguments, policy, confirm, stop).text;
}

ToolResult run_tool_call(const std::string& name, const std::string& arguments,
                         const ToolPolicy& policy, const ConfirmFn& confirm,
                         const std::atomic<bool>* stop) {
  const auto text = [](std::string s) { return ToolResult{std::move(s), nullptr}; };
  try {
    if (!is_known_tool(name)) throw ToolError("unknown tool '" + name + "'");
    json args = arguments.empty() ? json::object() : json::parse(arguments, nullptr, false);
    if (args.is_discarded())
      throw ToolError("the arguments are not valid JSON: " + arguments.substr(0, 200));
    if (!args.is_object()) throw ToolError("the arguments must be a JSON object");
    const auto ask = [&](const std::string& question) {
      if (!policy.yes && !confirm(question)) throw ToolError("the user declined to run this");
    };
    if (name == "run_shell") {
      const std::string command = get_string(args, "command");
      if (command.find_first_not_of(" \t\r\n") == std::string::npos)
        throw ToolError("'command' is empty");
      if (!shell_command_allowed(command, policy.allow)) ask("Run: " + command);
      return text(format_shell_result(run_shell(command, policy.shell_timeout_s, stop),
                                      policy.output_chars, policy.shell_timeout_s));
    }
    if (name == "view_image") {
      if (!policy.images)
        throw ToolError("the served model takes text only (no vision encoder): it cannot be shown images");
      const ImageFile img = read_image_file(get_string(args, "path"), policy.max_image_bytes);
      return ToolResult{"image " + describe_image(img) + " attached", image_part(img)};
    }
    if (name == "read_file")
      return text(cap_output(read_file_tool(get_string(args, "path")), policy.output_chars));
    if (name == "write_file") {
      const std::string path = get_string(args, "path"), content = get_string(args, "content");
      ask("Write " + std::to_string(content.size()) + " bytes to " + path);
      return text(write_file_tool(path, content));
    }
    if (name == "edit_file") {
      const std::string path = get_string(args, "path");
      const std::string old_text = get_string(args, "old_string"),
                        new_text = get_string(args, "new_string");
      ask("Edit " + path + " (replace " + std::to_string(old_text.size()) + " bytes with " +
          std::to_string(new_text.size()) + ")");
      return text(edit_file_tool(path, old_text, new_text));
    }
    if (name == "list_dir")
      return text(cap_output(list_dir_tool(get_string(args, "path", false)), policy.output_chars));
    return text(cap_output(search_files_tool(get_string(args, "pattern"),
                                             get_string(args, "path", false), policy.max_search_results),
                           policy.output_chars));
  } catch (const ToolError& e) {
    return text(std::string("error: ") + e.what());
  } catch (const std::exception& e) {  // a failure to start a process, a filesystem error
    return text(std::string("error: ") + e.what());
  }
}

}  // namespace hearth::agent
