#include "agent/transcript.h"

#include <fstream>

#include "core/error.h"

namespace hearth::agent {

using json = nlohmann::ordered_json;

TranscriptWriter::TranscriptWriter(std::string path) : path_(std::move(path)) {
  f_ = std::fopen(path_.c_str(), "a");
  if (f_ == nullptr)
    fail(ErrorKind::kIo, "agent", "cannot open transcript '" + path_ + "' for appending");
}

TranscriptWriter::~TranscriptWriter() {
  if (f_ != nullptr) std::fclose(f_);
}

void TranscriptWriter::line(const json& j) {
  const std::string s = j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  std::fwrite(s.data(), 1, s.size(), f_);
  std::fflush(f_);
}

void TranscriptWriter::message(const json& m) { line(m); }

void TranscriptWriter::clear() { line(json{{"event", "clear"}}); }

json load_transcript(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(ErrorKind::kIo, "agent", "--resume: cannot open '" + path + "'");
  json messages = json::array();
  std::string text;
  size_t line_no = 0;
  const auto bad = [&](const std::string& why) {
    fail(ErrorKind::kInvalidInput, "agent",
         "--resume: " + path + ":" + std::to_string(line_no) + ": " + why);
  };
  while (std::getline(f, text)) {
    ++line_no;
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    json j;
    try {
      j = json::parse(text);
    } catch (const json::parse_error& e) {
      bad("not JSON at offset " + std::to_string(e.byte > 0 ? e.byte - 1 : 0));
    }
    if (!j.is_object()) bad("expected an object");
    if (j.contains("event")) {
      if (j["event"] != "clear") bad("unknown event " + j["event"].dump());
      messages = json::array();
      continue;
    }
    if (!j.contains("role") || !j["role"].is_string()) bad("a message needs a string 'role'");
    const std::string role = j["role"].get<std::string>();
    if (role != "system" && role != "user" && role != "assistant" && role != "tool")
      bad("unknown role '" + role + "'");
    messages.push_back(std::move(j));
  }
  return messages;
}

}  // namespace hearth::agent
