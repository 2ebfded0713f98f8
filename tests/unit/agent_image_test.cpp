// The agent's images: view_image's file checks, the image part it returns, the tool
// message content, and the bookkeeping of image parts in a conversation.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>

#include "agent/file_tools.h"
#include "agent/image_tool.h"
#include "agent/tools.h"
#include "bench/image_payload.h"

namespace hearth::agent {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() / ("hearth_agent_image_test_" + std::to_string(getpid()) + "_" +
                                         std::to_string(n_++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string write(const std::string& name, const std::string& bytes) const {
    const std::string p = (path_ / name).string();
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }
  std::string path(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
  static inline int n_ = 0;
};

// 'path' (built with append: GCC 12 warns falsely about "'" + std::string).
std::string q(const std::string& path) { return std::string("'").append(path).append("'"); }

std::string png() { return bench::encode_png(bench::synthetic_screenshot(3, 40, 30), 40, 30); }

// The ToolError message of read_image_file, or "" when it succeeded.
std::string refusal(const std::string& path, size_t max_bytes = kMaxImageBytes) {
  try {
    read_image_file(path, max_bytes);
  } catch (const ToolError& e) {
    return e.what();
  }
  return "";
}

TEST(AgentImage, ReadsTheFourFormatsBySignature) {
  TempDir d;
  const std::string p = d.write("shot.png", png());
  const ImageFile img = read_image_file(p);
  EXPECT_EQ(img.path, p);
  EXPECT_EQ(img.media_type, "image/png");
  EXPECT_EQ(img.bytes, png());
  EXPECT_EQ(describe_image(img), p + " (image/png, " + std::to_string(png().size()) + " bytes)");
  // Only the signature is looked at here (the server decodes); these are not whole images.
  EXPECT_EQ(read_image_file(d.write("a.jpg", std::string("\xff\xd8\xff\xe0\x00\x10JFIF", 10))).media_type,
            "image/jpeg");
  EXPECT_EQ(read_image_file(d.write("a.webp", std::string("RIFF\x24\x00\x00\x00WEBPVP8 ", 16))).media_type,
            "image/webp");
  EXPECT_EQ(read_image_file(d.write("a.gif", "GIF89a\x01\x00\x01\x00")).media_type, "image/gif");
}

TEST(AgentImage, RefusesWhatIsNotAnImageFileWithinTheLimit) {
  TempDir d;
  EXPECT_EQ(refusal(""), "'path' is empty");
  EXPECT_EQ(refusal(d.path("missing.png")), q(d.path("missing.png")) + " does not exist");
  fs::create_directories(d.path("dir.png"));
  EXPECT_EQ(refusal(d.path("dir.png")), q(d.path("dir.png")) + " is a directory (use list_dir)");
  ASSERT_EQ(mkfifo(d.path("pipe.png").c_str(), 0600), 0);
  EXPECT_EQ(refusal(d.path("pipe.png")), q(d.path("pipe.png")) + " is not a regular file");
  EXPECT_EQ(refusal(d.write("empty.png", "")), q(d.path("empty.png")) + " is empty");
  EXPECT_EQ(refusal(d.write("doc.png", "%PDF-1.7\n")),
            q(d.path("doc.png")) + " is not a PNG, JPEG, WebP or GIF image (it starts with 25 50 44 46 2d 31 2e 37)");
  EXPECT_EQ(refusal(d.write("short.png", "\x89PN")),
            q(d.path("short.png")) + " is not a PNG, JPEG, WebP or GIF image (it starts with 89 50 4e)");
  const std::string p = d.write("big.png", png());
  EXPECT_EQ(refusal(p, png().size() - 1), q(p) + " is " + std::to_string(png().size()) +
                                              " bytes, more than the " + std::to_string(png().size() - 1) +
                                              " an image may have");
  EXPECT_EQ(refusal(p, png().size()), "");
  // A symlink to an image is read like the file (as read_file does).
  fs::create_symlink(p, d.path("link.png"));
  EXPECT_EQ(read_image_file(d.path("link.png")).bytes, png());
}

TEST(AgentImage, ViewImageToolReturnsTheImagePart) {
  TempDir d;
  const std::string p = d.write("shot.png", png());
  ToolPolicy policy;
  const auto no = [](const std::string&) { return false; };
  const json args = {{"path", p}};
  // Not offered (text-only model): an error the model can read.
  ToolResult r = run_tool_call("view_image", args.dump(), policy, no, nullptr);
  EXPECT_EQ(r.text, "error: the served model takes text only (no vision encoder): it cannot be shown images");
  EXPECT_TRUE(r.image.is_null());
  EXPECT_EQ(r.content(), json(r.text));

  policy.images = true;
  r = run_tool_call("view_image", args.dump(), policy, no, nullptr);  // no confirmation: it only reads
  EXPECT_EQ(r.text, "image " + p + " (image/png, " + std::to_string(png().size()) + " bytes) attached");
  const std::string url = "data:image/png;base64," + bench::base64_encode(png());
  EXPECT_EQ(r.image, (json{{"type", "image_url"}, {"image_url", {{"url", url}}}}));
  EXPECT_EQ(r.content(), (json::array({json{{"type", "text"}, {"text", r.text}}, r.image})));
  EXPECT_EQ(run_tool("view_image", args.dump(), policy, no, nullptr), r.text);

  EXPECT_EQ(run_tool("view_image", "{}", policy, no, nullptr), "error: missing argument 'path'");
  EXPECT_EQ(run_tool("view_image", json{{"path", d.write("n.txt", "hello")}}.dump(), policy, no, nullptr),
            "error: '" + d.path("n.txt") + "' is not a PNG, JPEG, WebP or GIF image (it starts with 68 65 6c 6c 6f)");
  policy.max_image_bytes = 10;
  EXPECT_EQ(run_tool("view_image", args.dump(), policy, no, nullptr).rfind("error: '" + p + "' is ", 0), 0u);
}

TEST(AgentImage, OfferedOnlyWithImages) {
  EXPECT_EQ(tool_schemas().size(), 6u);
  const json with = tool_schemas(true);
  ASSERT_EQ(with.size(), 7u);
  EXPECT_EQ(with.back()["function"]["name"], "view_image");
  EXPECT_EQ(with.back()["function"]["parameters"]["required"], json::array({"path"}));
  EXPECT_TRUE(is_known_tool("view_image"));
}

json image(const std::string& tag) {
  return json{{"type", "image_url"}, {"image_url", {{"url", "data:image/png;base64," + tag}}}};
}

TEST(AgentImage, KeepsTheMostRecentImagesAndReplacesTheRest) {
  json msgs = json::array(
      {json{{"role", "user"}, {"content", json::array({json{{"type", "text"}, {"text", "q"}}, image("A"), image("B")})}},
       json{{"role", "assistant"}, {"content", "ok"}},
       json{{"role", "tool"}, {"content", json::array({json{{"type", "text"}, {"text", "t"}}, image("C")})}},
       json{{"role", "user"}, {"content", "plain"}}});
  EXPECT_EQ(count_images(msgs), 3u);
  json kept = msgs;
  EXPECT_EQ(keep_recent_images(kept, 2), 1u);
  EXPECT_EQ(count_images(kept), 2u);
  EXPECT_EQ(kept[0]["content"][1]["type"], "text");  // A, the oldest, left out
  EXPECT_EQ(kept[0]["content"][2], image("B"));
  EXPECT_EQ(kept[2]["content"][1], image("C"));
  EXPECT_EQ(keep_recent_images(kept, 5), 0u);
  json none = msgs;
  EXPECT_EQ(replace_images(none, "gone"), 3u);
  EXPECT_EQ(count_images(none), 0u);
  EXPECT_EQ(none[2]["content"][1], (json{{"type", "text"}, {"text", "gone"}}));
  EXPECT_EQ(none[3], msgs[3]);
}

TEST(AgentImage, MessageSizeCountsAnImageAsAFixedShare) {
  const std::string big(400000, 'A');
  const json m = {{"role", "user"}, {"content", json::array({json{{"type", "text"}, {"text", "hi"}}, image(big)})}};
  const json without = {{"role", "user"}, {"content", json::array({json{{"type", "text"}, {"text", "hi"}}})}};
  // The comma between the parts stays; the image part's JSON counts as 4096.
  EXPECT_EQ(message_chars(m), without.dump().size() + 1 + 4096);
  EXPECT_EQ(message_chars(without), without.dump().size());
  EXPECT_EQ(message_chars(m, 10), without.dump().size() + 1 + 10);
}

}  // namespace
}  // namespace hearth::agent
