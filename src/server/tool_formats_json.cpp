// JSON tool-call syntaxes: the call object {"name": ..., "arguments" | "parameters": {...}}
// (Hermes inside <tool_call>, Llama 3.x bare or after <|python_tag|>, Mistral's array
// after [TOOL_CALLS]) and Mistral's NAME[ARGS]{...} form. Arguments are streamed as the
// scanner finds safe cut points; see tool_call_parsers.h.
#include <nlohmann/json.hpp>
#include <optional>

#include "server/tool_call_parsers.h"

namespace hearth::server {
namespace {

using json = nlohmann::ordered_json;
using Status = CallParser::Status;

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// The string a complete JSON string literal holds; nullopt when it is not one.
std::optional<std::string> string_of(const std::string& literal) {
  try {
    json j = json::parse(literal);
    if (j.is_string()) return j.get<std::string>();
  } catch (const json::exception&) {
  }
  return std::nullopt;
}

// Arguments given as a complete JSON value: an object as is, a string holding an object
// (some models double-encode) parsed; anything else is an empty object.
std::string object_text(const std::string& value) {
  try {
    json j = json::parse(value);
    if (j.is_string()) j = json::parse(j.get<std::string>());
    if (j.is_object()) return j.dump(-1, ' ', false, json::error_handler_t::replace);
  } catch (const json::exception&) {
  }
  return "{}";
}

class JsonObjectCall final : public CallParser {
 public:
  Status push(char c, CallSink& sink) override {
    switch (st_) {
      case St::kOpen:
        if (is_ws(c)) return Status::kMore;
        if (c != '{') return Status::kFail;
        st_ = St::kKeyOrClose;
        return Status::kMore;
      case St::kKeyOrClose:
      case St::kKey:
        if (is_ws(c)) return Status::kMore;
        if (c == '}' && st_ == St::kKeyOrClose) return close(sink);
        if (c != '"') return error(c, sink);
        key_ = JsonScanner();
        key_.push(c);
        st_ = St::kKeyText;
        return Status::kMore;
      case St::kKeyText: {
        const auto r = key_.push(c);
        if (r == JsonScanner::Result::kError) return error(c, sink);
        if (r == JsonScanner::Result::kComplete) {
          key_name_ = string_of(key_.text()).value_or("");
          st_ = St::kColon;
        }
        return Status::kMore;
      }
      case St::kColon:
        if (is_ws(c)) return Status::kMore;
        if (c != ':') return error(c, sink);
        st_ = St::kValueStart;
        return Status::kMore;
      case St::kValueStart:
        if (is_ws(c)) return Status::kMore;
        kind_ = key_name_ == "name"                                       ? Kind::kName
                : (key_name_ == "arguments" || key_name_ == "parameters") ? Kind::kArgs
                                                                          : Kind::kSkip;
        val_ = JsonScanner();
        streaming_ = kind_ == Kind::kArgs && begun_ && !args_done_ && c == '{';
        emitted_ = 0;
        st_ = St::kValue;
        [[fallthrough]];
      case St::kValue: {
        const auto r = val_.push(c);
        if (r == JsonScanner::Result::kMore) return Status::kMore;
        if (r == JsonScanner::Result::kError) return error(c, sink);
        if (!value_done(sink)) return Status::kFail;
        st_ = St::kCommaOrClose;
        if (r == JsonScanner::Result::kEnded) return push(c, sink);
        return Status::kMore;
      }
      case St::kCommaOrClose:
        if (is_ws(c)) return Status::kMore;
        if (c == ',') {
          st_ = St::kKey;
          return Status::kMore;
        }
        if (c == '}') return close(sink);
        return error(c, sink);
      case St::kDone:
        break;
    }
    give_back_ += c;
    return Status::kDone;
  }

  void flush(CallSink& sink) override {
    if (streaming_ && val_.safe_len() > emitted_) {
      sink.args(val_.text().substr(emitted_, val_.safe_len() - emitted_));
      emitted_ = val_.safe_len();
    }
  }

  void finish(CallSink& sink) override {
    if (!begun_ || st_ == St::kDone) return;
    if (streaming_) {
      if (val_.finish()) {
        sink.args(val_.text().substr(emitted_));
      } else {
        sink.args(val_.text().substr(emitted_, val_.safe_len() - emitted_) + val_.heal());
      }
      streaming_ = false;
      args_done_ = true;
    }
    if (!args_done_) sink.args("{}");
    sink.end();
    st_ = St::kDone;
  }

  bool committed() const override { return begun_; }

 private:
  enum class St {
    kOpen,
    kKeyOrClose,
    kKey,
    kKeyText,
    kColon,
    kValueStart,
    kValue,
    kCommaOrClose,
    kDone
  };
  enum class Kind { kName, kArgs, kSkip };

  // A value ended: record the name / arguments. False: the name is not a string.
  bool value_done(CallSink& sink) {
    if (kind_ == Kind::kName) {
      auto name = string_of(val_.text());
      if (!name || name->empty()) return begun_;  // committed: keep the first name
      if (!begun_) {
        begun_ = true;
        sink.begin(*name);
        if (have_buffered_args_) {
          sink.args(buffered_args_);
          args_done_ = true;
        }
      }
    } else if (kind_ == Kind::kArgs) {
      if (streaming_) {
        sink.args(val_.text().substr(emitted_));
        streaming_ = false;
        args_done_ = true;
      } else if (begun_ && !args_done_) {
        sink.args(object_text(val_.text()));
        args_done_ = true;
      } else if (!begun_) {
        buffered_args_ = object_text(val_.text());
        have_buffered_args_ = true;
      }
    }
    return true;
  }

  Status close(CallSink& sink) {
    if (!begun_) return Status::kFail;
    if (!args_done_) sink.args("{}");
    sink.end();
    st_ = St::kDone;
    return Status::kDone;
  }

  // A byte that cannot continue the call: before the name, not a call; after it, the
  // call closes with what it has and the byte goes back to the text.
  Status error(char c, CallSink& sink) {
    if (!begun_) return Status::kFail;
    finish(sink);
    give_back_ += c;
    return Status::kDone;
  }

  St st_ = St::kOpen;
  Kind kind_ = Kind::kSkip;
  JsonScanner key_, val_;
  std::string key_name_;
  bool begun_ = false, args_done_ = false, streaming_ = false;
  std::string buffered_args_;
  bool have_buffered_args_ = false;
  size_t emitted_ = 0;
};

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-' || c == '.';
}

class MistralCall final : public CallParser {
 public:
  Status push(char c, CallSink& sink) override {
    switch (st_) {
      case St::kLead:
        if (is_ws(c)) return Status::kMore;
        if (c == '[') {
          st_ = St::kElemStart;
          return Status::kMore;
        }
        if (!is_name_char(c)) return Status::kFail;
        name_ += c;
        st_ = St::kName;
        return Status::kMore;
      case St::kElemStart:
        if (is_ws(c)) return Status::kMore;
        if (c == ']' && n_calls_ == 0) return done({});
        if (c != '{') return n_calls_ > 0 ? done(std::string(1, c)) : Status::kFail;
        inner_ = make_json_object_call_parser();
        elem_raw_.clear();
        st_ = St::kElem;
        [[fallthrough]];
      case St::kElem: {
        elem_raw_ += c;
        const Status s = inner_->push(c, sink);
        if (s == Status::kMore) return s;
        if (s == Status::kFail) return n_calls_ > 0 ? done(elem_raw_) : Status::kFail;
        ++n_calls_;
        std::string gb = inner_->take_give_back();
        inner_.reset();
        if (!gb.empty()) return done(gb);
        st_ = St::kElemSep;
        return Status::kMore;
      }
      case St::kElemSep:
        if (is_ws(c)) return Status::kMore;
        if (c == ',') {
          st_ = St::kElemStart;
          return Status::kMore;
        }
        if (c == ']') return done({});
        return done(std::string(1, c));
      case St::kName:
        if (c == '[') {
          tag_ = "[";
          st_ = St::kTag;
          return Status::kMore;
        }
        if (!is_name_char(c) || name_.size() >= 256) return Status::kFail;
        name_ += c;
        return Status::kMore;
      case St::kTag: {
        tag_ += c;
        if (tag_ == "[ARGS]") {
          begun_ = true;
          sink.begin(name_);
          st_ = St::kArgs;
          return Status::kMore;
        }
        if (tag_ == "[CALL_ID]") {
          st_ = St::kCallId;
          return Status::kMore;
        }
        if (std::string_view("[ARGS]").starts_with(tag_) ||
            std::string_view("[CALL_ID]").starts_with(tag_)) {
          return Status::kMore;
        }
        return Status::kFail;
      }
      case St::kCallId:
        if (c == '[') {
          tag_ = "[";
          st_ = St::kTag;
        } else if (is_ws(c) || id_len_++ > 64) {
          return Status::kFail;
        }
        return Status::kMore;
      case St::kArgs: {
        if (!val_.started() && is_ws(c)) return Status::kMore;
        if (!val_.started() && c != '{') {
          finish(sink);
          return done(std::string(1, c));
        }
        const auto r = val_.push(c);
        if (r == JsonScanner::Result::kMore) return Status::kMore;
        if (r == JsonScanner::Result::kComplete) {
          sink.args(val_.text().substr(emitted_));
          sink.end();
          st_ = St::kDone;
          return done({});
        }
        finish(sink);
        return done(std::string(1, c));
      }
      case St::kDone:
        break;
    }
    return done(std::string(1, c));
  }

  void flush(CallSink& sink) override {
    if (inner_) inner_->flush(sink);
    if (st_ == St::kArgs && val_.safe_len() > emitted_) {
      sink.args(val_.text().substr(emitted_, val_.safe_len() - emitted_));
      emitted_ = val_.safe_len();
    }
  }

  void finish(CallSink& sink) override {
    if (inner_ && inner_->committed()) inner_->finish(sink);
    inner_.reset();
    if (st_ == St::kArgs) {
      if (!val_.started()) {
        sink.args("{}");
      } else {
        sink.args(val_.text().substr(emitted_, val_.safe_len() - emitted_) + val_.heal());
      }
      sink.end();
      st_ = St::kDone;
    }
  }

  bool committed() const override {
    return begun_ || n_calls_ > 0 || (inner_ && inner_->committed());
  }

 private:
  enum class St { kLead, kElemStart, kElem, kElemSep, kName, kTag, kCallId, kArgs, kDone };

  Status done(std::string give_back) {
    give_back_ += give_back;
    st_ = St::kDone;
    return Status::kDone;
  }

  St st_ = St::kLead;
  std::unique_ptr<CallParser> inner_;
  std::string elem_raw_, name_, tag_;
  int n_calls_ = 0, id_len_ = 0;
  bool begun_ = false;
  JsonScanner val_;
  size_t emitted_ = 0;
};

}  // namespace

std::unique_ptr<CallParser> make_json_object_call_parser() {
  return std::make_unique<JsonObjectCall>();
}

std::unique_ptr<CallParser> make_mistral_call_parser() { return std::make_unique<MistralCall>(); }

}  // namespace hearth::server
