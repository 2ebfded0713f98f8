// The assistant-output parser: text split into reasoning and content at <think> /
// </think>, tool calls handed to the parser of the template's syntax at their start
// marker (tool_call_parsers.h). Text that may be the start of a marker is held back
// until the next bytes decide; whitespace next to a tag (the "\n\n" after </think>,
// before a call) is dropped, all other text is passed on as written.
#include <algorithm>
#include <regex>

#include "server/chat_output.h"
#include "server/openai_protocol.h"
#include "server/tool_call_parsers.h"

namespace hearth::server {
namespace {

using json = nlohmann::ordered_json;
using Kind = OutputEvent::Kind;

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";
constexpr std::string_view kBareFunction = "<function=";

class Parser final : public OutputParser, private CallSink {
 public:
  explicit Parser(const OutputOptions& options) : opts_(options), schemas_(opts_.tools) {
    tools_on_ = opts_.parse_tools && opts_.tool_format != ToolFormat::kNone;
    const bool in_reasoning = opts_.parse_reasoning && opts_.starts_in_reasoning;
    mode_ = in_reasoning ? Mode::kReasoning : Mode::kContent;
    skip_ws_ = in_reasoning;
    think_allowed_ = opts_.parse_reasoning && !in_reasoning;
    hold_ws_ = tools_on_ || opts_.parse_reasoning;
    switch (tools_on_ ? opts_.tool_format : ToolFormat::kNone) {
      case ToolFormat::kHermes:
      case ToolFormat::kQwenXml:
        call_marker_ = "<tool_call>";
        break;
      case ToolFormat::kMistral:
        call_marker_ = "[TOOL_CALLS]";
        break;
      case ToolFormat::kLlama3Json:
        call_marker_ = "<|python_tag|>";
        break;
      case ToolFormat::kNone:
        break;
    }
  }

  std::vector<OutputEvent> feed(std::string_view text) override {
    if (!finished_) {
      buf_.append(text);
      run(false);
    }
    return std::move(events_);
  }

  std::vector<OutputEvent> finish() override {
    if (!finished_) {
      run(true);
      finished_ = true;
    }
    return std::move(events_);
  }

 private:
  enum class Mode { kReasoning, kContent, kCall };

  // ---- CallSink: a call's events wait in held_ until its end.
  void begin(const std::string& name) override {
    OutputEvent e;
    e.kind = Kind::kToolCallBegin;
    e.index = call_index_ = n_calls_++;
    e.id = make_response_id("call_");
    e.name = name;
    held_.push_back(std::move(e));
  }
  void args(const std::string& fragment) override {
    if (fragment.empty()) return;
    if (!held_.empty() && held_.back().kind == Kind::kToolCallArgs &&
        held_.back().index == call_index_) {
      held_.back().text += fragment;
      return;
    }
    OutputEvent e;
    e.kind = Kind::kToolCallArgs;
    e.index = call_index_;
    e.text = fragment;
    held_.push_back(std::move(e));
  }
  void end() override {
    OutputEvent e;
    e.kind = Kind::kToolCallEnd;
    e.index = call_index_;
    held_.push_back(std::move(e));
    for (auto& h : held_) events_.push_back(std::move(h));
    held_.clear();
  }

  // Generation ended inside a call (its name known or not): what was held of it is
  // dropped and one kToolCallCut says so. A parser between calls (all ended) cut nothing.
  void call_cut() {
    if (held_.empty() && call_->committed()) return;
    OutputEvent e;
    e.kind = Kind::kToolCallCut;
    e.index = held_.empty() ? n_calls_++ : held_.front().index;
    if (!held_.empty()) e.name = held_.front().name;
    e.text = marker_ + call_raw_;
    held_.clear();
    events_.push_back(std::move(e));
  }

  // ---- text
  void push_text(Kind kind, std::string s) {
    if (s.empty()) return;
    if (!events_.empty() && events_.back().kind == kind) {
      events_.back().text += s;
      return;
    }
    OutputEvent e;
    e.kind = kind;
    e.text = std::move(s);
    events_.push_back(std::move(e));
  }

  // Text of the current mode: leading whitespace skipped after a tag, trailing
  // whitespace held until more text shows it is not the last before a tag.
  void emit_text(Mode mode, std::string_view s) {
    if (s.empty()) return;
    if (skip_ws_) {
      size_t i = 0;
      while (i < s.size() && is_ws(s[i])) ++i;
      s.remove_prefix(i);
      if (s.empty()) return;
      skip_ws_ = false;
    }
    std::string out;
    if (hold_ws_) {
      out = std::move(ws_hold_);
      ws_hold_.clear();
      out.append(s);
      size_t t = out.size();
      while (t > 0 && is_ws(out[t - 1])) --t;
      ws_hold_ = out.substr(t);
      out.resize(t);
    } else {
      out.assign(s);
    }
    if (out.empty()) return;
    if (mode == Mode::kContent) seen_content_ = true;
    push_text(mode == Mode::kReasoning ? Kind::kReasoning : Kind::kContent, std::move(out));
  }

  // Whitespace before a tag is dropped (kept aside in case the tag turns out not to be one).
  void drop_ws() {
    pre_marker_ws_ = std::move(ws_hold_);
    ws_hold_.clear();
  }

  void start_call(std::string_view marker, std::unique_ptr<CallParser> parser) {
    drop_ws();
    origin_ = mode_;
    marker_.assign(marker);
    call_ = std::move(parser);
    call_raw_.clear();
    mode_ = Mode::kCall;
  }

  // The call was not one: its marker is text of the mode it came from, the bytes after
  // it are parsed again (a marker-less call gives up its first byte instead).
  void call_failed(std::string rest) {
    mode_ = origin_;
    call_.reset();
    ws_hold_ = std::move(pre_marker_ws_);
    std::string again = std::move(call_raw_);
    call_raw_.clear();
    if (marker_.empty()) {
      emit_text(mode_, std::string_view(again).substr(0, 1));
      again.erase(0, 1);
    } else {
      emit_text(mode_, marker_);
    }
    buf_ = again + rest;
  }

  void call_done(std::string rest) {
    call_.reset();
    call_raw_.clear();
    if (origin_ == Mode::kReasoning) implicit_close_ = true;
    think_allowed_ = false;
    mode_ = Mode::kContent;
    skip_ws_ = true;
    seen_content_ = false;
    buf_ = std::move(rest);
  }

  std::unique_ptr<CallParser> parser_for_marker() {
    switch (opts_.tool_format) {
      case ToolFormat::kHermes:
      case ToolFormat::kQwenXml:
        return make_tagged_call_parser(schemas_, opts_.strict_calls);
      case ToolFormat::kMistral:
        return make_mistral_call_parser();
      default:
        return make_json_object_call_parser();
    }
  }

  // Feeds buffered bytes to the open call. False: all consumed, waiting for more.
  bool run_call(bool final) {
    for (size_t i = 0; i < buf_.size(); ++i) {
      const char c = buf_[i];
      call_raw_ += c;
      const CallParser::Status s = call_->push(c, *this);
      if (s == CallParser::Status::kMore) continue;
      std::string rest = buf_.substr(i + 1);
      if (s == CallParser::Status::kDone) {
        call_done(call_->take_give_back() + rest);
      } else {
        call_failed(std::move(rest));
      }
      return true;
    }
    buf_.clear();
    if (!final) {
      call_->flush(*this);
      return false;
    }
    // A bare <function= was only a guess at a call (the model left out <tool_call>): while
    // its name is unread it stays text. Any other open call was cut.
    if (marker_ == kBareFunction && !call_->committed()) {
      call_failed({});
      return true;
    }
    call_cut();
    call_done({});
    return true;
  }

  struct Found {
    size_t pos = std::string::npos;
    std::string_view marker;
  };

  void run(bool final) {
    for (;;) {
      if (mode_ == Mode::kCall) {
        if (!run_call(final)) return;
        continue;
      }
      // <think> opens reasoning only at the start of the answer.
      if (mode_ == Mode::kContent && think_allowed_ && !seen_content_) {
        size_t i = 0;
        while (i < buf_.size() && is_ws(buf_[i])) ++i;
        const std::string_view rest = std::string_view(buf_).substr(i);
        if (rest.starts_with(kThinkOpen)) {
          emit_text(mode_, std::string_view(buf_).substr(0, i));
          buf_.erase(0, i + kThinkOpen.size());
          on_marker(kThinkOpen);
          continue;
        }
        if (!final && kThinkOpen.starts_with(rest)) {  // (also: nothing but whitespace yet)
          emit_text(mode_, std::string_view(buf_).substr(0, i));
          buf_.erase(0, i);
          return;
        }
        think_allowed_ = false;
      }
      // Llama 3.x: a JSON object at the start of the answer (or after a call and a ';')
      // is a call.
      if (tools_on_ && opts_.tool_format == ToolFormat::kLlama3Json && mode_ == Mode::kContent &&
          !seen_content_) {
        size_t i = 0;
        while (i < buf_.size() && (is_ws(buf_[i]) || (n_calls_ > 0 && buf_[i] == ';'))) ++i;
        if (i == buf_.size() && !final) {
          if (n_calls_ == 0) {  // (after a call: held, a ';' may separate the next)
            emit_text(mode_, buf_);
            buf_.clear();
          }
          return;
        }
        if (i < buf_.size() && buf_[i] == '{') {
          if (n_calls_ == 0) emit_text(mode_, std::string_view(buf_).substr(0, i));
          buf_.erase(0, i);
          start_call("", make_json_object_call_parser());
          continue;
        }
      }
      std::vector<std::string_view> markers;
      if (mode_ == Mode::kReasoning) markers.push_back(kThinkClose);
      if (mode_ == Mode::kContent && implicit_close_) markers.push_back(kThinkClose);
      if (!call_marker_.empty()) markers.push_back(call_marker_);
      // Qwen XML models sometimes leave out <tool_call>: a bare <function= starts a call too.
      if (!call_marker_.empty() && opts_.tool_format == ToolFormat::kQwenXml)
        markers.push_back(kBareFunction);

      Found found;
      for (std::string_view m : markers) {
        const size_t p = buf_.find(m);
        if (p < found.pos) found = {p, m};
      }
      if (found.pos != std::string::npos) {
        emit_text(mode_, std::string_view(buf_).substr(0, found.pos));
        buf_.erase(0, found.pos + found.marker.size());
        on_marker(found.marker);
        continue;
      }
      size_t keep = 0;
      if (!final) {
        for (std::string_view m : markers) {
          for (size_t k = std::min(m.size() - 1, buf_.size()); k > keep; --k) {
            if (std::string_view(buf_).substr(buf_.size() - k) == m.substr(0, k)) {
              keep = k;
              break;
            }
          }
        }
      }
      // Generation that ended inside the call marker itself ("<tool" of "<tool_call>") cut
      // a call too: under a forced tool_choice every token is the call's.
      size_t cut = 0;
      if (final && !call_marker_.empty()) {
        for (size_t k = std::min(call_marker_.size() - 1, buf_.size()); k > 0; --k) {
          if (std::string_view(buf_).substr(buf_.size() - k) == std::string_view(call_marker_).substr(0, k)) {
            cut = k;
            break;
          }
        }
      }
      size_t n = buf_.size() - keep - cut;
      if (!final) n = utf8_whole_prefix(std::string_view(buf_).substr(0, n));
      emit_text(mode_, std::string_view(buf_).substr(0, n));
      buf_.erase(0, n);
      if (final) {
        if (mode_ == Mode::kContent && cut == 0) push_text(Kind::kContent, std::move(ws_hold_));
        ws_hold_.clear();
        if (cut > 0) {
          OutputEvent e;
          e.kind = Kind::kToolCallCut;
          e.index = n_calls_++;
          e.text = std::move(buf_);
          events_.push_back(std::move(e));
          buf_.clear();
        }
      }
      return;
    }
  }

  void on_marker(std::string_view m) {
    if (m == kThinkOpen) {
      drop_ws();
      mode_ = Mode::kReasoning;
      skip_ws_ = true;
      think_allowed_ = false;
    } else if (m == kThinkClose && mode_ == Mode::kReasoning) {
      drop_ws();
      mode_ = Mode::kContent;
      skip_ws_ = true;
      think_allowed_ = false;
      seen_content_ = false;
    } else if (m == kThinkClose) {  // a stray </think> after a call ended the reasoning
      implicit_close_ = false;
      skip_ws_ = true;
    } else if (m == kBareFunction) {
      start_call(m, make_tagged_call_parser(schemas_, opts_.strict_calls));
      for (const char c : m) call_->push(c, *this);  // (the marker is the call's own start)
    } else {
      start_call(m, parser_for_marker());
    }
  }

  OutputOptions opts_;
  ToolSchemas schemas_;
  bool tools_on_ = false, hold_ws_ = false, finished_ = false;
  std::string call_marker_;
  Mode mode_ = Mode::kContent, origin_ = Mode::kContent;
  std::string buf_, ws_hold_, pre_marker_ws_;
  bool skip_ws_ = false, think_allowed_ = false, seen_content_ = false, implicit_close_ = false;
  std::unique_ptr<CallParser> call_;
  std::string marker_, call_raw_;
  int n_calls_ = 0, call_index_ = 0;
  std::vector<OutputEvent> events_;
  std::vector<OutputEvent> held_;  // the open call's events (emitted at its end)
};

bool contains(std::string_view s, std::string_view what) {
  return s.find(what) != std::string_view::npos;
}

}  // namespace

std::unique_ptr<OutputParser> make_output_parser(const OutputOptions& options) {
  return std::make_unique<Parser>(options);
}

ParsedOutput fold_events(const std::vector<OutputEvent>& events) {
  ParsedOutput out;
  for (const OutputEvent& e : events) {
    switch (e.kind) {
      case Kind::kReasoning:
        out.reasoning += e.text;
        break;
      case Kind::kContent:
        out.content += e.text;
        break;
      case Kind::kToolCallBegin:
        if (e.index >= 0 && static_cast<size_t>(e.index) >= out.tool_calls.size()) {
          out.tool_calls.resize(static_cast<size_t>(e.index) + 1);
        }
        if (e.index >= 0) {
          out.tool_calls[static_cast<size_t>(e.index)].id = e.id;
          out.tool_calls[static_cast<size_t>(e.index)].name = e.name;
        }
        break;
      case Kind::kToolCallArgs:
        if (e.index >= 0 && static_cast<size_t>(e.index) < out.tool_calls.size()) {
          out.tool_calls[static_cast<size_t>(e.index)].arguments += e.text;
        }
        break;
      case Kind::kToolCallEnd:
        break;
      case Kind::kToolCallCut:
        ++out.n_cut_calls;
        break;
    }
  }
  for (ToolCall& call : out.tool_calls) {
    try {
      call.arguments =
          json::parse(call.arguments).dump(-1, ' ', false, json::error_handler_t::replace);
    } catch (const json::exception&) {
    }
  }
  return out;
}

TemplateCaps detect_template_caps(std::string_view src) {
  TemplateCaps caps;
  static const std::regex tools_word(R"(\btools\b)");
  caps.renders_tools = std::regex_search(src.begin(), src.end(), tools_word);
  caps.knows_reasoning = contains(src, "<think>") || contains(src, "reasoning_content");
  if (contains(src, "<function=") && contains(src, "<parameter=")) {
    caps.tool_format = ToolFormat::kQwenXml;
  } else if (contains(src, "<tool_call>")) {
    caps.tool_format = ToolFormat::kHermes;
  } else if (contains(src, "[TOOL_CALLS]")) {
    caps.tool_format = ToolFormat::kMistral;
  } else if (contains(src, "<|python_tag|>") ||
             (contains(src, "<|start_header_id|>") && contains(src, "\"parameters\""))) {
    caps.tool_format = ToolFormat::kLlama3Json;
  }
  return caps;
}

bool prompt_opens_reasoning(std::string_view prompt) {
  size_t end = prompt.size();
  while (end > 0 && is_ws(prompt[end - 1])) --end;
  prompt = prompt.substr(0, end);
  return prompt.ends_with(kThinkOpen);
}

const char* tool_format_name(ToolFormat format) {
  switch (format) {
    case ToolFormat::kHermes:
      return "hermes";
    case ToolFormat::kQwenXml:
      return "qwen_xml";
    case ToolFormat::kLlama3Json:
      return "llama3_json";
    case ToolFormat::kMistral:
      return "mistral";
    case ToolFormat::kNone:
      break;
  }
  return "none";
}

}  // namespace hearth::server
