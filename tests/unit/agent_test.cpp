// hearth agent: output capping, context trimming, transcripts, the tools and
// the stream parser, without a server.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "agent/agent_loop.h"
#include "agent/chat_client.h"
#include "agent/context_trim.h"
#include "agent/file_tools.h"
#include "agent/output_cap.h"
#include "agent/shell_tool.h"
#include "agent/tools.h"
#include "agent/transcript.h"
#include "core/error.h"

namespace hearth::agent {
namespace {

using json = nlohmann::ordered_json;
namespace fs = std::filesystem;

// A fresh folder under the system temp dir, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() /
            ("hearth_agent_test_" + std::to_string(getpid()) + "_" + std::to_string(n_++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
  static inline int n_ = 0;
};

std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// ---- output cap ----

TEST(AgentOutputCap, ShortTextUnchanged) {
  EXPECT_EQ(cap_output("hello", 5), "hello");
  EXPECT_EQ(cap_output("hello", 0), "hello");
  EXPECT_EQ(cap_output("", 3), "");
}

TEST(AgentOutputCap, LongTextKeepsHeadAndTailAndCountsTheCut) {
  std::string text;
  for (int i = 0; i < 100; ++i) text += static_cast<char>('a' + i % 26);
  const std::string out = cap_output(text, 10);
  EXPECT_EQ(out, text.substr(0, 5) + "\n[... 90 characters cut ...]\n" + text.substr(95));
}

TEST(AgentOutputCap, CutsOnCodePointsNotBytes) {
  std::string text;
  for (int i = 0; i < 20; ++i) text += "\xc3\xa9";  // é, two bytes each
  EXPECT_EQ(count_chars(text), 20u);
  const std::string out = cap_output(text, 4);
  EXPECT_EQ(out, "\xc3\xa9\xc3\xa9\n[... 16 characters cut ...]\n\xc3\xa9\xc3\xa9");
  EXPECT_EQ(cap_output(text, 1), "\xc3\xa9\n[... 19 characters cut ...]\n");
}

// ---- context trimming ----

json msg(const std::string& role, const std::string& content) {
  return json{{"role", role}, {"content", content}};
}

json call_msg(const std::string& id) {
  return json{
      {"role", "assistant"},
      {"content", ""},
      {"tool_calls", json::array({{{"id", id},
                                   {"type", "function"},
                                   {"function", {{"name", "read_file"}, {"arguments", "{}"}}}}})}};
}

json tool_msg(const std::string& id, const std::string& content) {
  return json{{"role", "tool"}, {"tool_call_id", id}, {"content", content}};
}

TEST(AgentTrim, UnitsKeepToolCallsWithTheirResults) {
  json m = json::array({msg("system", "s"), msg("user", "u1"), call_msg("a"), tool_msg("a", "r"),
                        tool_msg("a", "r2"), msg("assistant", "x"), msg("user", "u2"),
                        call_msg("b"), tool_msg("b", "r3"), msg("assistant", "y")});
  const auto units = droppable_units(m);
  // u1, [call a + 2 results], x, [call b + result]; u2 (the last user) and y (the last) never.
  ASSERT_EQ(units.size(), 4u);
  EXPECT_EQ(units[0], std::make_pair(size_t{1}, size_t{2}));
  EXPECT_EQ(units[1], std::make_pair(size_t{2}, size_t{5}));
  EXPECT_EQ(units[2], std::make_pair(size_t{5}, size_t{6}));
  EXPECT_EQ(units[3], std::make_pair(size_t{7}, size_t{9}));
}

// A measure that counts characters of content: deterministic and easy to reason about.
int64_t content_chars(const json& messages) {
  int64_t n = 0;
  for (const json& m : messages)
    if (m.contains("content") && m["content"].is_string())
      n += static_cast<int64_t>(m["content"].get<std::string>().size());
  return n;
}

TEST(AgentTrim, DropsOldestUntilItFitsAndNeverSplitsACall) {
  const std::string big(100, 'x');
  json m =
      json::array({msg("system", "sys"), msg("user", big), call_msg("a"), tool_msg("a", big),
                   msg("assistant", big), msg("user", "now"), call_msg("b"), tool_msg("b", big)});
  int calls = 0;
  const TrimResult r = trim_to_fit(
      m,
      [&](const json& x) {
        ++calls;
        return content_chars(x);
      },
      210);
  EXPECT_TRUE(r.fits);
  EXPECT_LE(r.tokens, 210);
  EXPECT_EQ(r.tokens, content_chars(m));
  EXPECT_EQ(m[0]["role"], "system");
  // Whatever was dropped, a tool message is always preceded by its call.
  for (size_t i = 1; i < m.size(); ++i)
    if (m[i]["role"] == "tool") {
      ASSERT_TRUE(m[i - 1].contains("tool_calls") || m[i - 1]["role"] == "tool") << m.dump();
    }
  // The current question and the latest call + result survive.
  EXPECT_EQ(m[m.size() - 3]["content"], "now");
  EXPECT_EQ(m.back()["role"], "tool");
  EXPECT_GE(r.dropped, 4u);
}

TEST(AgentTrim, NothingToDoWhenItFits) {
  json m = json::array({msg("system", "s"), msg("user", "hi")});
  const TrimResult r = trim_to_fit(m, content_chars, 100);
  EXPECT_EQ(r.dropped, 0u);
  EXPECT_TRUE(r.fits);
  EXPECT_EQ(m.size(), 2u);
}

TEST(AgentTrim, ReportsWhenEvenTheLastMessageIsTooBig) {
  json m = json::array({msg("system", "s"), msg("user", "old"), msg("assistant", "a"),
                        msg("user", std::string(500, 'q'))});
  const TrimResult r = trim_to_fit(m, content_chars, 100);
  EXPECT_FALSE(r.fits);
  EXPECT_EQ(m.size(), 2u);  // the system prompt and the question
  EXPECT_EQ(m[1]["content"].get<std::string>().size(), 500u);
}

// ---- transcript ----

TEST(AgentTranscript, RoundTripWithClear) {
  TempDir dir;
  const std::string path = dir.file("t.jsonl");
  json kept = json::array({msg("system", "s"), msg("user", "q \xc3\xa9 \"quoted\"\nline"),
                           call_msg("c1"), tool_msg("c1", "result"), msg("assistant", "done")});
  {
    TranscriptWriter w(path);
    w.message(msg("user", "forgotten"));
    w.clear();
    for (const json& m : kept) w.message(m);
  }
  EXPECT_EQ(load_transcript(path), kept);
  {  // appending continues the same conversation
    TranscriptWriter w(path);
    w.message(msg("user", "more"));
  }
  kept.push_back(msg("user", "more"));
  EXPECT_EQ(load_transcript(path), kept);
}

TEST(AgentTranscript, BadLinesAreRejectedWithLineNumbers) {
  TempDir dir;
  const std::string path = dir.file("bad.jsonl");
  std::ofstream(path)
      << "{\"role\":\"user\",\"content\":\"a\"}\n\n{\"role\":\"user\",\"content\":\n";
  try {
    load_transcript(path);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(":3: not JSON at offset"), std::string::npos) << e.what();
  }
  std::ofstream(path) << "{\"role\":\"robot\"}\n";
  EXPECT_THROW(load_transcript(path), Error);
  std::ofstream(path) << "[1]\n";
  EXPECT_THROW(load_transcript(path), Error);
  EXPECT_THROW(load_transcript(dir.file("missing.jsonl")), Error);
}

// ---- file tools ----

TEST(AgentFileTools, WriteReadEditList) {
  TempDir dir;
  const std::string f = dir.file("sub/a.txt");
  EXPECT_EQ(write_file_tool(f, "one two two\n"), "wrote 12 bytes to " + f);
  EXPECT_EQ(read_file_tool(f), "one two two\n");
  EXPECT_EQ(edit_file_tool(f, "one", "1"), "replaced 1 occurrence in " + f + " (line 1)");
  EXPECT_EQ(slurp(f), "1 two two\n");
  try {
    edit_file_tool(f, "two", "2");
    FAIL();
  } catch (const ToolError& e) {
    EXPECT_NE(std::string(e.what()).find("occurs 2 times"), std::string::npos);
  }
  EXPECT_THROW(edit_file_tool(f, "three", "3"), ToolError);
  EXPECT_EQ(slurp(f), "1 two two\n");  // failed edits change nothing
  EXPECT_THROW(read_file_tool(dir.file("nope")), ToolError);
  EXPECT_THROW(read_file_tool(dir.file("sub")), ToolError);
  EXPECT_EQ(list_dir_tool(dir.file("sub")), "a.txt  10\n");
  EXPECT_EQ(list_dir_tool(dir.file("")), "sub/\n");
  EXPECT_THROW(list_dir_tool(f), ToolError);
}

TEST(AgentFileTools, SearchWithRegexAndCap) {
  TempDir dir;
  write_file_tool(dir.file("a.txt"), "alpha\nbeta\ngamma beta\n");
  write_file_tool(dir.file("b/c.txt"), "betamax\n");
  write_file_tool(dir.file(".git/x"), "beta\n");
  const std::string out = search_files_tool("^beta|a bet", dir.file(""), 100);
  EXPECT_NE(out.find("a.txt:2: beta"), std::string::npos) << out;
  EXPECT_NE(out.find("a.txt:3: gamma beta"), std::string::npos) << out;
  EXPECT_NE(out.find("c.txt:1: betamax"), std::string::npos) << out;
  EXPECT_EQ(out.find(".git"), std::string::npos) << out;
  const std::string capped = search_files_tool("beta", dir.file(""), 1);
  EXPECT_NE(capped.find("[2 more matches not shown]"), std::string::npos) << capped;
  try {
    search_files_tool("a(b", dir.file(""), 10);
    FAIL();
  } catch (const ToolError& e) {
    EXPECT_NE(std::string(e.what()).find("offset 3"), std::string::npos) << e.what();
  }
  EXPECT_NE(search_files_tool("zzz", dir.file(""), 10).find("no match"), std::string::npos);
}

// ---- shell tool and dispatch ----

TEST(AgentShell, OutputStatusAndCap) {
  const ShellResult r =
      run_shell("printf 'abcdefghij%.0s' 1 2 3; echo err >&2; exit 3", 10, nullptr);
  EXPECT_EQ(r.exit_status, 3);
  EXPECT_EQ(r.output, "abcdefghijabcdefghijabcdefghijerr\n");
  const std::string text = format_shell_result(r, 10, 10);
  EXPECT_EQ(text, "abcde\n[... 24 characters cut ...]\njerr\n[exit status 3]");
}

TEST(AgentShell, TimeLimitKillsTheGroup) {
  const auto t0 = std::chrono::steady_clock::now();
  const ShellResult r = run_shell("sleep 30 & sleep 30; echo never", 0.5, nullptr);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_TRUE(r.timed_out);
  EXPECT_NE(format_shell_result(r, 100, 0.5).find("time limit"), std::string::npos);
}

TEST(AgentShell, StopFlagInterrupts) {
  std::atomic<bool> stop{false};
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    stop = true;
  });
  const ShellResult r = run_shell("echo started; sleep 30", 60, &stop);
  t.join();
  EXPECT_TRUE(r.interrupted);
  EXPECT_EQ(r.output, "started\n");
}

TEST(AgentShell, ProgramAndAllowList) {
  EXPECT_EQ(command_program("  /bin/ls -la"), "ls");
  EXPECT_EQ(command_program("LC_ALL=C sort x"), "sort");
  EXPECT_EQ(command_program(""), "");
  EXPECT_TRUE(shell_command_allowed("ls -la /tmp", {"ls"}));
  EXPECT_FALSE(shell_command_allowed("ls; rm -rf x", {"ls"}));
  EXPECT_FALSE(shell_command_allowed("ls $(rm x)", {"ls"}));
  EXPECT_FALSE(shell_command_allowed("cat x > y", {"cat"}));
  EXPECT_FALSE(shell_command_allowed("rm x", {"ls"}));
}

TEST(AgentTools, DispatchAsksUnlessAllowedOrYes) {
  TempDir dir;
  ToolPolicy p;
  int asked = 0;
  const auto no = [&](const std::string&) {
    ++asked;
    return false;
  };
  const std::string f = dir.file("w.txt");
  const json args = {{"path", f}, {"content", "hi"}};
  EXPECT_EQ(run_tool("write_file", args.dump(), p, no, nullptr),
            "error: the user declined to run this");
  EXPECT_EQ(asked, 1);
  EXPECT_FALSE(fs::exists(f));
  p.yes = true;
  EXPECT_EQ(run_tool("write_file", args.dump(), p, no, nullptr), "wrote 2 bytes to " + f);
  EXPECT_EQ(asked, 1);
  p.yes = false;
  p.allow = {"echo"};
  EXPECT_EQ(run_tool("run_shell", R"({"command":"echo hi"})", p, no, nullptr),
            "hi\n[exit status 0]");
  EXPECT_EQ(run_tool("run_shell", R"({"command":"echo hi; echo x"})", p, no, nullptr),
            "error: the user declined to run this");
  EXPECT_EQ(run_tool("read_file", "{", p, no, nullptr)
                .rfind("error: the arguments are not valid JSON", 0),
            0u);
  EXPECT_EQ(run_tool("read_file", "{}", p, no, nullptr), "error: missing argument 'path'");
  EXPECT_EQ(run_tool("read_file", R"({"path": 3})", p, no, nullptr),
            "error: argument 'path' must be a string");
  EXPECT_EQ(run_tool("fly", "{}", p, no, nullptr), "error: unknown tool 'fly'");
  p.output_chars = 4;
  EXPECT_EQ(run_tool("read_file", json{{"path", f}}.dump(), p, no, nullptr), "hi");
  EXPECT_EQ(tool_schemas().size(), 6u);
}

// Constrained decoding writes properties in the order the schema lists them: the path must come
// before the (long) content, or a model cut short by max_tokens never names the file.
TEST(AgentTools, SchemasKeepPropertyOrder) {
  for (const auto& t : tool_schemas()) {
    if (t["function"]["name"] != "write_file") continue;
    const std::string s = t["function"]["parameters"]["properties"].dump();
    EXPECT_LT(s.find("\"path\""), s.find("\"content\"")) << s;
    return;
  }
  FAIL() << "no write_file tool";
}

// ---- stream parsing and status ----

TEST(AgentStream, MergesToolCallFragmentsAndReasoning) {
  ChatResult r;
  std::string shown_reasoning, shown_content;
  StreamHandlers h{[&](const std::string& s) { shown_content += s; },
                   [&](const std::string& s) { shown_reasoning += s; }};
  for (
      const char* ev :
      {R"({"choices":[{"delta":{"reasoning_content":"think "}}]})",
       R"({"choices":[{"delta":{"reasoning":"more"}}]})",
       R"({"choices":[{"delta":{"content":"Hi"}}]})",
       R"({"choices":[{"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"read_file","arguments":""}}]}}]})",
       R"({"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"path\":"}}]}}]})",
       R"({"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"a\"}"}}]}}]})",
       R"({"choices":[{"delta":{},"finish_reason":"tool_calls"}],"timings":{"drafted_n":12,"accepted_n":9}})",
       R"({"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":7}})"})
    EXPECT_FALSE(apply_chat_event(ev, r, h));
  EXPECT_TRUE(apply_chat_event("[DONE]", r, h));
  EXPECT_EQ(r.drafted, 12);
  EXPECT_EQ(r.accepted, 9);
  EXPECT_EQ(r.reasoning, "think more");
  EXPECT_EQ(shown_reasoning, "think more");
  EXPECT_EQ(r.content, "Hi");
  EXPECT_EQ(shown_content, "Hi");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0]["id"], "call_1");
  EXPECT_EQ(r.tool_calls[0]["function"]["name"], "read_file");
  EXPECT_EQ(r.tool_calls[0]["function"]["arguments"], R"({"path":"a"})");
  EXPECT_EQ(r.finish_reason, "tool_calls");
  EXPECT_EQ(r.prompt_tokens, 10);
  EXPECT_EQ(r.completion_tokens, 7);
  ChatResult bad;
  apply_chat_event(R"({"error":{"message":"boom"}})", bad, h);
  EXPECT_EQ(bad.error, "error in stream: boom");
}

TEST(AgentStatus, Line) {
  EXPECT_EQ(status_line(2, 15, 819, 8192, 11, 2.0, 1.0),
            "step 2/15 | context 819/8192 (10%) | 11 tokens | 2.0 s | 10.0 tok/s");
  EXPECT_EQ(status_line(1, 3, 50, 0, 0, 0.5, -1),
            "step 1/3 | context 50 | 0 tokens | 0.5 s | 0.0 tok/s");
  EXPECT_EQ(status_line(1, 3, 50, 0, 0, 0.5, -1, 0, 0), "step 1/3 | context 50 | 0 tokens | 0.5 s | 0.0 tok/s");
  EXPECT_EQ(status_line(2, 15, 819, 8192, 11, 2.0, 1.0, 40, 31),
            "step 2/15 | context 819/8192 (10%) | 11 tokens | 2.0 s | 10.0 tok/s | 31 of 40 drafted accepted");
}

}  // namespace
}  // namespace hearth::agent
