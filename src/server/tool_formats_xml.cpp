// The <tool_call> block: Hermes JSON inside it, or the Qwen3.5 / Qwen3-Coder XML form
//   <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n</function>\n</tool_call>
// (format: Qwen3-Coder's chat template and the qwen3_coder parsers of vLLM / SGLang, as
// summarised in shared/reference/agent-protocols.md). XML values are typed by the
// tool's schema; a string parameter is streamed as it is written, others when complete.
// A missing </parameter> ends at the next <parameter= or </function>.
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <set>
#include <span>
#include <string_view>

#include "server/tool_call_parsers.h"

namespace hearth::server {
namespace {

using json = nlohmann::ordered_json;
using Status = CallParser::Status;

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string trim(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && is_ws(s[a])) ++a;
  while (b > a && is_ws(s[b - 1])) --b;
  return s.substr(a, b - a);
}

// The JSON types a parameter schema allows: "type" (a string or a list), else the
// types of anyOf / oneOf branches; an enum of strings alone counts as "string".
std::set<std::string> schema_types(const json& schema) {
  std::set<std::string> out;
  if (!schema.is_object()) return out;
  if (auto it = schema.find("type"); it != schema.end()) {
    if (it->is_string()) out.insert(it->get<std::string>());
    if (it->is_array()) {
      for (const auto& t : *it) {
        if (t.is_string()) out.insert(t.get<std::string>());
      }
    }
  }
  for (const char* key : {"anyOf", "oneOf"}) {
    if (auto it = schema.find(key); it != schema.end() && it->is_array()) {
      for (const auto& branch : *it) {
        for (auto& t : schema_types(branch)) out.insert(t);
      }
    }
  }
  if (out.empty()) {
    if (auto it = schema.find("enum"); it != schema.end() && it->is_array() && !it->empty()) {
      bool all_strings = true;
      for (const auto& v : *it) all_strings = all_strings && v.is_string();
      if (all_strings) out.insert("string");
    }
  }
  // Aliases models' schemas use.
  std::set<std::string> norm;
  for (const auto& t : out) {
    if (t == "str" || t == "text" || t == "varchar" || t == "char" || t == "enum") {
      norm.insert("string");
    } else if (t == "int" || t == "long" || t == "short" || t == "uint" || t.starts_with("int")) {
      norm.insert("integer");
    } else if (t == "float" || t == "double" || t == "num") {
      norm.insert("number");
    } else if (t == "bool") {
      norm.insert("boolean");
    } else if (t == "dict" || t == "map") {
      norm.insert("object");
    } else if (t == "list") {
      norm.insert("array");
    } else {
      norm.insert(t);
    }
  }
  return norm;
}

class XmlCall final : public CallParser {
 public:
  XmlCall(const ToolSchemas& schemas, bool strict) : schemas_(schemas), strict_(strict) {}

  Status push(char c, CallSink& sink) override {
    switch (st_) {
      case St::kOpen: {
        static constexpr std::string_view kOpenTag = "<function=";
        if (c != kOpenTag[pos_]) return Status::kFail;
        if (++pos_ == kOpenTag.size()) st_ = St::kName;
        return Status::kMore;
      }
      case St::kName:
        if (c == '>') {
          if (trim(name_).empty()) return Status::kFail;
          name_ = trim(name_);
          begun_ = true;
          sink.begin(name_);
          st_ = St::kBody;
          return Status::kMore;
        }
        if (c == '\n' || c == '<' || name_.size() >= 256) return Status::kFail;
        name_ += c;
        return Status::kMore;
      case St::kBody: {
        if (tag_.empty() && is_ws(c)) return Status::kMore;
        tag_ += c;
        if (tag_ == "<parameter=") {
          tag_.clear();
          key_.clear();
          st_ = St::kKey;
          return Status::kMore;
        }
        if (tag_ == "</function>") return close(sink, {});
        if (std::string_view("<parameter=").starts_with(tag_) ||
            std::string_view("</function>").starts_with(tag_)) {
          return Status::kMore;
        }
        std::string rest = std::move(tag_);
        tag_.clear();
        return close(sink, rest);
      }
      case St::kKey:
        if (c == '>') {
          key_ = trim(key_);
          schema_ = schemas_.param_schema(name_, key_);
          is_string_ = param_is_string(schema_);
          value_.clear();
          tag_.clear();
          streamed_ = 0;
          opened_ = false;
          first_ = true;
          st_ = St::kValue;
          return Status::kMore;
        }
        if (c == '\n' || c == '<' || key_.size() >= 256) return close(sink, std::string(1, c));
        key_ += c;
        return Status::kMore;
      case St::kValue:
        if (first_) {
          first_ = false;
          // The value starts on its own line; under a grammar, after one layout whitespace
          // character of any kind (its max_whitespace_cnt).
          if (c == '\n' || (strict_ && is_ws(c))) return Status::kMore;
        }
        if (tag_.empty() && c != '<') {
          value_ += c;
          return Status::kMore;
        }
        tag_ += c;
        for (;;) {
          static constexpr std::string_view kLenient[] = {"</parameter>", "<parameter=", "</function>"};
          for (std::string_view end : std::span(kLenient, strict_ ? 1 : 3)) {
            if (tag_ == end) {
              tag_.clear();
              end_value(sink);
              if (end == "</parameter>") {
                st_ = St::kBody;
              } else if (end == "<parameter=") {
                key_.clear();
                st_ = St::kKey;
              } else {
                return close(sink, {});
              }
              return Status::kMore;
            }
            if (end.starts_with(tag_)) return Status::kMore;
          }
          value_ += tag_[0];
          tag_.erase(0, 1);
          if (tag_.empty()) return Status::kMore;
        }
      case St::kDone:
        break;
    }
    give_back_ += c;
    return Status::kDone;
  }

  void flush(CallSink& sink) override {
    if (st_ != St::kValue || !is_string_) return;
    size_t avail = value_.size();
    if (avail > 0 && (value_[avail - 1] == '\n' || (strict_ && is_ws(value_[avail - 1])))) --avail;  // may be layout
    avail = utf8_whole_prefix(std::string_view(value_).substr(0, avail));
    if (avail <= streamed_ && opened_) return;
    std::string out = open_string();
    if (avail > streamed_)
      out += json_escape(std::string_view(value_).substr(streamed_, avail - streamed_));
    streamed_ = std::max(streamed_, avail);
    if (!out.empty()) sink.args(out);
  }

  void finish(CallSink& sink) override {
    if (!begun_ || st_ == St::kDone) return;
    if (st_ == St::kValue) {
      value_ += tag_;
      tag_.clear();
      end_value(sink);
    }
    close(sink, {});
  }

  bool committed() const override { return begun_; }

 private:
  enum class St { kOpen, kName, kBody, kKey, kValue, kDone };

  std::string separator() { return n_params_ == 0 ? "{" : ","; }

  // The start of a streamed string parameter: `{"key":"` (or `,"key":"`), once.
  std::string open_string() {
    if (opened_) return {};
    opened_ = true;
    std::string out = separator() + "\"" + json_escape(key_) + "\":\"";
    ++n_params_;
    return out;
  }

  void end_value(CallSink& sink) {
    std::string v = value_;
    if (!v.empty() && (v.back() == '\n' || (strict_ && is_ws(v.back())))) v.pop_back();
    if (is_string_) {
      std::string out = open_string();
      if (v.size() > streamed_) out += json_escape(std::string_view(v).substr(streamed_));
      out += '"';
      sink.args(out);
    } else {
      sink.args(separator() + "\"" + json_escape(key_) +
                "\":" + dump(convert_param_value(v, schema_)));
      ++n_params_;
    }
    value_.clear();
  }

  Status close(CallSink& sink, std::string give_back) {
    sink.args(n_params_ == 0 ? "{}" : "}");
    sink.end();
    st_ = St::kDone;
    give_back_ += give_back;
    return Status::kDone;
  }

  const ToolSchemas& schemas_;
  const bool strict_;  // a value ends only at </parameter>
  St st_ = St::kOpen;
  size_t pos_ = 0;
  std::string name_, key_, value_, tag_;
  const json* schema_ = nullptr;
  bool begun_ = false, is_string_ = true, opened_ = false, first_ = false;
  size_t streamed_ = 0;
  int n_params_ = 0;
};

// <tool_call> ... </tool_call> around a JSON object or one or more XML functions.
class TaggedCall final : public CallParser {
 public:
  TaggedCall(const ToolSchemas& schemas, bool strict) : schemas_(schemas), strict_(strict) {}

  Status push(char c, CallSink& sink) override {
    switch (st_) {
      case St::kLead:
        if (is_ws(c)) return Status::kMore;
        if (c == '{') {
          inner_ = make_json_object_call_parser();
        } else if (c == '<') {
          inner_ = std::make_unique<XmlCall>(schemas_, strict_);
        } else {
          return Status::kFail;
        }
        st_ = St::kInner;
        inner_raw_.clear();
        [[fallthrough]];
      case St::kInner: {
        inner_raw_ += c;
        const Status s = inner_->push(c, sink);
        if (s == Status::kMore) return s;
        if (s == Status::kFail) {
          if (n_calls_ == 0) return Status::kFail;
          give_back_ += inner_raw_;
          st_ = St::kDone;
          return Status::kDone;
        }
        ++n_calls_;
        std::string gb = inner_->take_give_back();
        inner_.reset();
        st_ = St::kClose;
        for (const char g : gb) {
          const Status t = push(g, sink);
          if (t != Status::kMore) return t;  // (kClose never fails)
        }
        return Status::kMore;
      }
      case St::kClose: {
        if (tag_.empty() && is_ws(c)) return Status::kMore;
        tag_ += c;
        if (tag_ == "</tool_call>") {
          st_ = St::kDone;
          return Status::kDone;
        }
        if (tag_ == "<function=") {
          inner_ = std::make_unique<XmlCall>(schemas_, strict_);
          inner_raw_.clear();
          st_ = St::kInner;
          const std::string t = std::move(tag_);
          tag_.clear();
          for (const char g : t) {
            const Status r = push(g, sink);
            if (r != Status::kMore) return r;
          }
          return Status::kMore;
        }
        if (std::string_view("</tool_call>").starts_with(tag_) ||
            std::string_view("<function=").starts_with(tag_)) {
          return Status::kMore;
        }
        give_back_ += tag_;
        st_ = St::kDone;
        return Status::kDone;
      }
      case St::kDone:
        break;
    }
    give_back_ += c;
    return Status::kDone;
  }

  void flush(CallSink& sink) override {
    if (inner_) inner_->flush(sink);
  }

  void finish(CallSink& sink) override {
    if (inner_ && inner_->committed()) inner_->finish(sink);
    inner_.reset();
  }

  bool committed() const override { return n_calls_ > 0 || (inner_ && inner_->committed()); }

 private:
  enum class St { kLead, kInner, kClose, kDone };
  const ToolSchemas& schemas_;
  const bool strict_;
  St st_ = St::kLead;
  std::unique_ptr<CallParser> inner_;
  std::string inner_raw_, tag_;
  int n_calls_ = 0;
};

}  // namespace

const json* ToolSchemas::param_schema(const std::string& name, const std::string& param) const {
  if (!tools_.is_array()) return nullptr;
  for (const auto& tool : tools_) {
    if (!tool.is_object()) continue;
    const json* fn = &tool;
    if (auto it = tool.find("function"); it != tool.end() && it->is_object()) fn = &*it;
    auto n = fn->find("name");
    if (n == fn->end() || !n->is_string() || n->get<std::string>() != name) continue;
    for (const char* key : {"parameters", "input_schema"}) {
      auto p = fn->find(key);
      if (p == fn->end() || !p->is_object()) continue;
      auto props = p->find("properties");
      if (props == p->end() || !props->is_object()) return nullptr;
      auto s = props->find(param);
      return s == props->end() ? nullptr : &*s;
    }
    return nullptr;
  }
  return nullptr;
}

bool param_is_string(const json* schema) {
  if (schema == nullptr) return true;
  if (schema->contains("enum")) return false;  // a closed set: converted whole (trimmed to a member)
  const auto types = schema_types(*schema);
  return types.empty() || (types.size() == 1 && types.count("string") == 1);
}

json convert_param_value(const std::string& raw, const json* schema) {
  if (schema == nullptr) return raw;
  const auto types = schema_types(*schema);
  if (types.empty()) return raw;
  const std::string t = trim(raw);
  const bool has_string = types.count("string") > 0;
  if ((t == "null" || t == "None") && (types.count("null") > 0 || !has_string)) return nullptr;
  if (has_string) {
    // An enum value with the layout's whitespace around it (a grammar allows one character
    // after the tag) is the enum value.
    if (auto e = schema->find("enum"); e != schema->end() && e->is_array() && t != raw) {
      const bool raw_in = std::find(e->begin(), e->end(), json(raw)) != e->end();
      if (!raw_in && std::find(e->begin(), e->end(), json(t)) != e->end()) return t;
    }
    return raw;
  }
  if (types.count("integer") > 0) {
    errno = 0;
    char* end = nullptr;
    const long long v = std::strtoll(t.c_str(), &end, 10);
    if (!t.empty() && end == t.c_str() + t.size() && errno == 0) return v;
  }
  if (types.count("number") > 0 || types.count("integer") > 0) {
    if (is_json_scalar(t) && t != "true" && t != "false" && t != "null") {
      // A number beyond a double ("1e999" from the model) makes nlohmann throw
      // out_of_range: then the value stays the model's text, as for other mismatches.
      const json j = json::parse(t, nullptr, false);
      if (j.is_number_float()) {
        const double d = j.get<double>();
        if (d == static_cast<double>(static_cast<long long>(d)) && std::abs(d) < 9e15) {
          return static_cast<long long>(d);
        }
      }
      if (types.count("number") > 0 && j.is_number()) return j;
    }
  }
  if (types.count("boolean") > 0) {
    std::string lower;
    for (char ch : t) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (lower == "true") return true;
    if (lower == "false") return false;
  }
  if (types.count("object") > 0 || types.count("array") > 0) {
    try {
      json j = json::parse(t);
      if ((j.is_object() && types.count("object") > 0) ||
          (j.is_array() && types.count("array") > 0)) {
        return j;
      }
    } catch (const json::exception&) {
    }
  }
  return raw;
}

std::unique_ptr<CallParser> make_tagged_call_parser(const ToolSchemas& schemas, bool strict) {
  return std::make_unique<TaggedCall>(schemas, strict);
}

}  // namespace hearth::server
