// Model stores: real layouts built in a temporary folder (a Hugging Face hub cache with two
// revisions, several quants, a split GGUF, a projector and blobs behind symbolic links; a
// safetensors repo; an Ollama manifest + blob; an LM Studio folder) and every resolution,
// listing and error message checked against them.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "core/error.h"
#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "store/folder_scan.h"
#include "store/locations.h"
#include "store/model_info.h"
#include "store/resolver.h"
#include "store/split_shards.h"

namespace fs = std::filesystem;
using hearth::Error;
using hearth::GgmlType;
using namespace hearth::store;

namespace {

// A tiny valid GGUF: llama, one F32 matrix of 4x8 (32 parameters).
void write_gguf(const fs::path& path, uint32_t file_type, int split_no = -1, int split_count = 0) {
  hearth::gguf::Writer w;
  w.set_string("general.architecture", "llama");
  w.set_u32("general.file_type", file_type);
  w.set_u32("llama.context_length", 2048);
  if (split_count > 0) {
    w.set_u16("split.no", static_cast<uint16_t>(split_no));
    w.set_u16("split.count", static_cast<uint16_t>(split_count));
    w.set_i32("split.tensors.count", split_count);  // one tensor per shard
  }
  std::vector<float> v(32, 0.5f);
  w.add_tensor_f32("blk." + std::to_string(std::max(split_no, 0)) + ".w", {8, 4}, v);
  fs::create_directories(path.parent_path());
  w.write_file(path.string());
}

void write_text(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

// A safetensors file with one F32 tensor of shape [2, 3].
void write_safetensors(const fs::path& path) {
  const std::string header = R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})";
  std::string bytes(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  bytes += header + std::string(24, '\0');
  write_text(path, bytes);
}

class StoreTest : public ::testing::Test {
 protected:
  fs::path root;
  Locations loc;

  // HUB/models--ORG--NAME: the file goes to blobs/<blob> and snapshots/<rev>/<name> links to it.
  void hub_file(const std::string& repo, const std::string& rev, const std::string& name,
                const std::string& blob, uint32_t ft = 3, int split_no = -1, int split_count = 0) {
    const fs::path r = root / "hub" / ("models--" + repo);
    if (!fs::exists(r / "blobs" / blob)) write_gguf(r / "blobs" / blob, ft, split_no, split_count);
    const fs::path link = r / "snapshots" / rev / name;
    fs::create_directories(link.parent_path());
    fs::create_symlink((r / "blobs" / blob).lexically_relative(link.parent_path()), link);
  }
  void set_ref(const std::string& repo, const std::string& hash) {
    write_text(root / "hub" / ("models--" + repo) / "refs" / "main", hash + "\n");
  }
  std::string ollama_manifest(const std::string& rel, const std::string& model_digest,
                              const std::string& proj = "") {
    std::string layers = R"({"mediaType":"application/vnd.ollama.image.model","digest":"sha256:)" +
                         model_digest + R"(","size":1})";
    if (!proj.empty())
      layers += R"(,{"mediaType":"application/vnd.ollama.image.projector","digest":"sha256:)" +
                proj + R"("})";
    const std::string text = R"({"schemaVersion":2,"layers":[)" + layers + "]}";
    write_text(root / "ollama" / "manifests" / rel, text);
    return text;
  }

  void SetUp() override {
    root = fs::temp_directory_path() /
           ("hearth-store-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root);
    loc.hf_hub = (root / "hub").string();
    loc.lmstudio = {(root / "lms").string(), (root / "lms-old").string()};
    loc.ollama = (root / "ollama").string();

    // org/multi: rev1 (old) has one Q8_0; rev2 (main) has Q4_K_M, Q8_0, an F16 split in three, a
    // projector.
    hub_file("org--multi", "1111", "multi-Q8_0.gguf", "old-q8", 7);
    hub_file("org--multi", "2222", "multi-Q4_K_M.gguf", "q4km", 15);
    hub_file("org--multi", "2222", "multi-Q8_0.gguf", "q8", 7);
    for (int i = 0; i < 3; ++i) {
      hub_file("org--multi", "2222",
               "F16/multi-F16-0000" + std::to_string(i + 1) + "-of-00003.gguf",
               "f16-" + std::to_string(i), 1, i, 3);
    }
    hub_file("org--multi", "2222", "mmproj-multi-f16.gguf", "proj", 1);
    set_ref("org--multi", "2222");
    // org/single: one GGUF (also in LM Studio's folder).
    hub_file("org--single", "aaaa", "single.Q4_1.gguf", "s", 3);
    set_ref("org--single", "aaaa");
    write_gguf(root / "lms" / "org" / "single" / "single-Q4_0.gguf", 2);
    // org/st: a safetensors repo.
    const fs::path st = root / "hub" / "models--org--st";
    write_text(st / "blobs" / "cfg",
               R"({"model_type":"llama","max_position_embeddings":4096,"torch_dtype":"bfloat16"})");
    write_safetensors(st / "blobs" / "w");
    fs::create_directories(st / "snapshots" / "cccc");
    fs::create_symlink("../../blobs/cfg", st / "snapshots" / "cccc" / "config.json");
    fs::create_symlink("../../blobs/w", st / "snapshots" / "cccc" / "model.safetensors");
    set_ref("org--st", "cccc");
    // Broken repos: a dangling blob link; refs/main naming a missing snapshot.
    fs::create_directories(root / "hub" / "models--org--dangling" / "snapshots" / "dddd");
    fs::create_symlink("../../blobs/gone", root / "hub" / "models--org--dangling" / "snapshots" /
                                               "dddd" / "d-Q4_0.gguf");
    set_ref("org--dangling", "dddd");
    fs::create_directories(root / "hub" / "models--org--badref" / "snapshots" / "eeee");
    set_ref("org--badref", "ffff");
    // LM Studio: pub/repo with two quants.
    write_gguf(root / "lms" / "pub" / "repo" / "repo-Q4_0.gguf", 2);
    write_gguf(root / "lms-old" / "pub" / "old" / "old-Q8_0.gguf", 7);
    // Ollama: tiny:latest with a projector, hf.co/org/multi:Q4_K_M, and a broken manifest.
    const std::string d1(64, 'a'), d2(64, 'b'), d3(64, 'c');
    write_gguf(root / "ollama" / "blobs" / ("sha256-" + d1), 15);
    write_gguf(root / "ollama" / "blobs" / ("sha256-" + d2), 1);
    fs::create_symlink(root / "hub" / "models--org--multi" / "blobs" / "q4km",
                       root / "ollama" / "blobs" / ("sha256-" + d3));
    ollama_manifest("registry.ollama.ai/library/tiny/latest", d1, d2);
    ollama_manifest("hf.co/org/multi/Q4_K_M", d3);
    write_text(
        root / "ollama" / "manifests" / "registry.ollama.ai" / "library" / "broken" / "latest",
        "{\"layers\": [");
  }
  void TearDown() override { fs::remove_all(root); }

  std::string error_of(const std::string& ref) {
    try {
      resolve_model(ref, loc);
    } catch (const Error& e) {
      return e.what();
    }
    ADD_FAILURE() << ref << " resolved without an error";
    return "";
  }
  static bool has(const std::string& s, const std::string& part) {
    return s.find(part) != std::string::npos;
  }
};

TEST(StoreNames, QuantTagsAndSplits) {
  EXPECT_EQ(quant_tag_of("qwen2.5-7b-instruct-q4_k_m.gguf"), "Q4_K_M");
  EXPECT_EQ(quant_tag_of("SmolLM2-135M-Instruct.Q4_1.gguf"), "Q4_1");
  EXPECT_EQ(quant_tag_of("Model-UD-Q4_K_XL-00001-of-00002.gguf"), "UD-Q4_K_XL");
  EXPECT_EQ(quant_tag_of("m-bf16.gguf"), "BF16");
  EXPECT_EQ(quant_tag_of("m-IQ2_XXS.gguf"), "IQ2_XXS");
  EXPECT_EQ(quant_tag_of("Qwen3-8B.gguf"), "");
  auto s = parse_split_name("a-b-00002-of-00003.gguf");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->base, "a-b");
  EXPECT_EQ(s->index, 2);
  EXPECT_EQ(s->count, 3);
  EXPECT_FALSE(parse_split_name("a-00004-of-00003.gguf"));
  EXPECT_TRUE(is_projector("mmproj-model-f16.gguf"));
  EXPECT_TRUE(looks_like_path("./x"));
  EXPECT_TRUE(looks_like_path("m.GGUF"));
  EXPECT_FALSE(looks_like_path("org/name:Q4_K_M"));
}

TEST_F(StoreTest, HubQuantPickedFromMainRevisionWithProjector) {
  const Resolution r = resolve_model("org/multi:q4_k_m", loc);
  EXPECT_EQ(r.entry.store, kStoreHf);
  EXPECT_EQ(r.entry.name, "org/multi:Q4_K_M");
  EXPECT_EQ(r.entry.path,
            (root / "hub/models--org--multi/snapshots/2222/multi-Q4_K_M.gguf").string());
  EXPECT_TRUE(fs::is_symlink(r.entry.path));
  EXPECT_EQ(r.entry.mmproj,
            (root / "hub/models--org--multi/snapshots/2222/mmproj-multi-f16.gguf").string());
  EXPECT_TRUE(r.entry.shards.empty());
  const hearth::gguf::File f = hearth::gguf::File::open(r.entry.path);  // through the link
  EXPECT_EQ(f.find_int("general.file_type"), 15);
  // hf.co/ prefix, other case.
  EXPECT_EQ(resolve_model("hf.co/org/multi:Q8_0", loc).entry.name, "org/multi:Q8_0");
}

TEST_F(StoreTest, SeveralQuantsWithoutOneListsThem) {
  const std::string msg = error_of("org/multi");
  EXPECT_TRUE(has(msg, "holds 3 GGUF models; add :QUANT, one of: F16, Q4_K_M, Q8_0")) << msg;
  const std::string missing = error_of("org/multi:Q5_K_M");
  EXPECT_TRUE(has(missing, "no GGUF with quant 'Q5_K_M'")) << missing;
  EXPECT_TRUE(has(missing, "(found: F16, Q4_K_M, Q8_0)")) << missing;
}

TEST_F(StoreTest, SplitGgufIsOneModelJoinedFromItsShards) {
  const Resolution r = resolve_model("org/multi:F16", loc);
  ASSERT_EQ(r.entry.shards.size(), 3u);
  EXPECT_EQ(r.entry.path, r.entry.shards[0]);
  EXPECT_TRUE(has(r.entry.path, "multi-F16-00001-of-00003.gguf"));
  // The shards open as one model: every shard's tensor, the first's metadata.
  const hearth::gguf::File f = hearth::gguf::File::open_split(r.entry.shards);
  ASSERT_EQ(f.tensors().size(), 3u);
  for (int i = 0; i < 3; ++i)
    EXPECT_NE(f.find_tensor("blk." + std::to_string(i) + ".w"), nullptr) << i;
  EXPECT_EQ(f.find_int("general.file_type"), 1);
  EXPECT_FALSE(f.find_int("split.count").has_value());
  // A shard given as a path finds its siblings by name.
  EXPECT_EQ(split_shard_paths(r.entry.shards[1], 3), r.entry.shards);
  try {
    split_shard_paths((root / "x.gguf").string(), 3);
    FAIL() << "a file not named as a shard gave shard paths";
  } catch (const Error& e) {
    EXPECT_TRUE(has(e.what(), "x.gguf: a shard of a split GGUF of 3 files")) << e.what();
  }
  // One shard missing: the model is named with the count.
  fs::remove(root / "hub/models--org--multi/snapshots/2222/F16/multi-F16-00002-of-00003.gguf");
  const std::string msg = error_of("org/multi:F16");
  EXPECT_TRUE(has(msg, "has 2 of its 3 files")) << msg;
}

TEST_F(StoreTest, UnslothDynamicQuantAndDuplicateTags) {
  write_gguf(root / "lms" / "un" / "model" / "model-UD-Q4_K_XL.gguf", 15);
  EXPECT_TRUE(has(resolve_model("un/model:q4_k_xl", loc).entry.path, "model-UD-Q4_K_XL.gguf"));
  EXPECT_TRUE(has(resolve_model("un/model:UD-Q4_K_XL", loc).entry.path, "model-UD-Q4_K_XL.gguf"));
  write_gguf(root / "lms" / "un" / "two" / "a" / "x-Q8_0.gguf", 7);
  write_gguf(root / "lms" / "un" / "two" / "b" / "y-Q8_0.gguf", 7);
  const std::string msg = error_of("un/two:Q8_0");
  EXPECT_TRUE(has(msg, "un/two:Q8_0 matches several GGUF models: ")) << msg;
  EXPECT_TRUE(has(msg, "a/x-Q8_0.gguf") && has(msg, "b/y-Q8_0.gguf")) << msg;
}

TEST_F(StoreTest, OtherRevision) {
  const Resolution r = resolve_model("org/multi@1111", loc);
  EXPECT_EQ(r.entry.path,
            (root / "hub/models--org--multi/snapshots/1111/multi-Q8_0.gguf").string());
  EXPECT_EQ(r.entry.name, "org/multi@1111");
  const std::string msg = error_of("org/multi@v2");
  EXPECT_TRUE(
      has(msg, "refs/v2 does not exist and no snapshot is named 'v2' (snapshots: 1111, 2222"))
      << msg;
}

TEST_F(StoreTest, SafetensorsRepoIsAnHfFolder) {
  const Resolution r = resolve_model("org/st", loc);
  EXPECT_TRUE(r.entry.hf_folder);
  EXPECT_EQ(r.entry.path, (root / "hub/models--org--st/snapshots/cccc").string());
  const ModelInfo info = describe_model(r.entry);
  EXPECT_EQ(info.error, "");
  EXPECT_EQ(info.architecture, "llama");
  EXPECT_EQ(info.parameters, 6u);
  EXPECT_EQ(info.quantization, "BF16");
  EXPECT_EQ(info.context_length, 4096);
  EXPECT_TRUE(has(error_of("org/st:Q4_0"), "is a safetensors model")) << error_of("org/st:Q4_0");
}

TEST_F(StoreTest, BrokenHubReposNameTheFile) {
  const std::string dangling = error_of("org/dangling");
  EXPECT_TRUE(has(
      dangling,
      "snapshots/dddd/d-Q4_0.gguf is a symbolic link to ../../blobs/gone, which does not exist"))
      << dangling;
  const std::string badref = error_of("org/badref");
  EXPECT_TRUE(has(badref, "models--org--badref/refs/main names commit ffff but")) << badref;
  EXPECT_TRUE(has(badref, "snapshots/ffff does not exist")) << badref;
}

TEST_F(StoreTest, OllamaNamesResolveToBlobs) {
  const std::string blob = (root / "ollama/blobs" / ("sha256-" + std::string(64, 'a'))).string();
  for (const char* ref :
       {"tiny", "tiny:latest", "library/tiny", "registry.ollama.ai/library/tiny:latest"}) {
    const Resolution r = resolve_model(ref, loc);
    EXPECT_EQ(r.entry.store, kStoreOllama) << ref;
    EXPECT_EQ(r.entry.name, "tiny:latest") << ref;
    EXPECT_EQ(r.entry.path, blob) << ref;
    EXPECT_EQ(r.entry.mmproj, (root / "ollama/blobs" / ("sha256-" + std::string(64, 'b'))).string())
        << ref;
  }
  // The blob has no extension: the reader takes it by its magic.
  EXPECT_EQ(
      hearth::gguf::File::open(resolve_model("tiny", loc).entry.path).find_int("general.file_type"),
      15);
  const std::string msg = error_of("broken");
  EXPECT_TRUE(has(
      msg,
      "manifests/registry.ollama.ai/library/broken/latest: the Ollama manifest is not valid JSON"))
      << msg;
  // A manifest whose blob is gone.
  fs::remove(root / "ollama/blobs" / ("sha256-" + std::string(64, 'a')));
  const std::string gone = error_of("tiny");
  EXPECT_TRUE(has(gone, "sha256-" + std::string(64, 'a') + " does not exist")) << gone;
}

TEST_F(StoreTest, LmStudioFolders) {
  const Resolution r = resolve_model("pub/repo", loc);
  EXPECT_EQ(r.entry.store, kStoreLmStudio);
  EXPECT_EQ(r.entry.path, (root / "lms/pub/repo/repo-Q4_0.gguf").string());
  EXPECT_EQ(resolve_model("pub/old:q8_0", loc).entry.path,
            (root / "lms-old/pub/old/old-Q8_0.gguf").string());
}

TEST_F(StoreTest, NameInTwoStoresUsesTheFirstAndSaysSo) {
  const Resolution r = resolve_model("org/single", loc);
  EXPECT_EQ(r.entry.store, kStoreHf);
  ASSERT_EQ(r.notes.size(), 1u);
  EXPECT_TRUE(has(r.notes[0],
                  "also in lmstudio (" + (root / "lms/org/single/single-Q4_0.gguf").string() + ")"))
      << r.notes[0];
  // hf.co/ORG/NAME:QUANT is also an Ollama name (pulled from hf.co).
  const Resolution both = resolve_model("hf.co/org/multi:Q4_K_M", loc);
  EXPECT_EQ(both.entry.store, kStoreHf);
  ASSERT_EQ(both.notes.size(), 1u);
  EXPECT_TRUE(has(both.notes[0], "also in ollama")) << both.notes[0];
}

TEST_F(StoreTest, MissingNameListsPlacesAndCloseMatches) {
  const std::string msg = error_of("other/multi:Q4_K_M");
  EXPECT_TRUE(has(msg, "the Hugging Face hub cache " + loc.hf_hub + " (models--other--multi)"))
      << msg;
  EXPECT_TRUE(has(msg, "LM Studio's models folders " + loc.lmstudio[0] + ", " + loc.lmstudio[1]))
      << msg;
  EXPECT_TRUE(has(
      msg, "Ollama's store " + loc.ollama + " (manifests/registry.ollama.ai/other/multi/Q4_K_M)"))
      << msg;
  EXPECT_TRUE(
      has(msg, "close matches: org/multi:F16 (huggingface), org/multi:Q4_K_M (huggingface)"))
      << msg;
  EXPECT_TRUE(has(msg, "hf.co/org/multi:Q4_K_M (ollama)")) << msg;
  const std::string none = error_of("zzz");
  EXPECT_TRUE(has(none, "no close matches")) << none;
}

TEST_F(StoreTest, ExistingPathsAreUsedAsTheyAre) {
  const std::string p = (root / "lms/pub/repo/repo-Q4_0.gguf").string();
  const Resolution r = resolve_model(p, loc);
  EXPECT_EQ(r.entry.store, kStorePath);
  EXPECT_EQ(r.entry.path, p);
  EXPECT_EQ(resolve_model("/no/such/file.gguf", loc).entry.store,
            kStorePath);  // the loader says it is missing
}

TEST_F(StoreTest, ListingDescribesEveryModelAndKeepsBrokenOnes) {
  std::map<std::string, ModelInfo> by_name;
  for (const auto& e : list_store_models(loc)) by_name[e.store + " " + e.name] = describe_model(e);
  for (const char* name :
       {"huggingface org/multi:Q4_K_M", "huggingface org/multi:Q8_0", "huggingface org/multi:F16",
        "huggingface org/single", "huggingface org/st", "huggingface org/dangling",
        "huggingface org/badref", "lmstudio org/single", "lmstudio pub/repo", "lmstudio pub/old",
        "ollama tiny:latest", "ollama hf.co/org/multi:Q4_K_M", "ollama broken:latest"}) {
    EXPECT_EQ(by_name.count(name), 1u) << name;
  }
  EXPECT_EQ(by_name.size(), 13u);
  const ModelInfo& q4 = by_name["huggingface org/multi:Q4_K_M"];
  EXPECT_EQ(q4.error, "");
  EXPECT_EQ(q4.architecture, "llama");
  EXPECT_EQ(q4.quantization, "Q4_K_M");
  EXPECT_EQ(q4.parameters, 32u);
  EXPECT_EQ(q4.context_length, 2048);
  EXPECT_EQ(q4.size_bytes, fs::file_size(root / "hub/models--org--multi/blobs/q4km"));
  const ModelInfo& f16 = by_name["huggingface org/multi:F16"];
  EXPECT_EQ(f16.parameters, 96u);  // every shard
  EXPECT_EQ(f16.entry.shards.size(), 3u);
  EXPECT_EQ(by_name["ollama tiny:latest"].quantization, "Q4_K_M");
  EXPECT_TRUE(has(by_name["huggingface org/dangling"].error, "dangling"))
      << by_name["huggingface org/dangling"].error;
  EXPECT_TRUE(has(by_name["huggingface org/badref"].error, "refs/main names commit ffff"))
      << by_name["huggingface org/badref"].error;
  EXPECT_TRUE(has(by_name["ollama broken:latest"].error, "not valid JSON"));
  const auto j = to_json(by_name["ollama broken:latest"]);
  EXPECT_TRUE(j.contains("error"));
  EXPECT_EQ(to_json(q4)["quantization"], "Q4_K_M");
  // A file that is not a GGUF in a store: an error, not a crash.
  write_text(root / "lms/pub/junk/junk-Q4_0.gguf", "not a gguf at all");
  for (const auto& e : list_store_models(loc)) {
    if (e.name == "pub/junk") {
      EXPECT_TRUE(has(describe_model(e).error, "bad magic")) << describe_model(e).error;
    }
  }
}

TEST(StoreLocations, FromEnvironment) {
  const char* home = std::getenv("HOME");
  const std::string saved_home = home != nullptr ? home : "";
  ::setenv("HF_HUB_CACHE", "/x/hub", 1);
  ::setenv("OLLAMA_MODELS", "/x/ollama", 1);
  ::setenv("LMSTUDIO_MODELS_DIR", "/x/lms", 1);
  Locations l = locations_from_env();
  EXPECT_EQ(l.hf_hub, "/x/hub");
  EXPECT_EQ(l.ollama, "/x/ollama");
  EXPECT_EQ(l.lmstudio, std::vector<std::string>{"/x/lms"});
  ::unsetenv("HF_HUB_CACHE");
  ::unsetenv("LMSTUDIO_MODELS_DIR");
  ::setenv("HF_HOME", "/y", 1);
  ::setenv("HOME", "/home/u", 1);
  l = locations_from_env();
  EXPECT_EQ(l.hf_hub, "/y/hub");
  EXPECT_EQ(l.lmstudio, (std::vector<std::string>{"/home/u/.lmstudio/models",
                                                  "/home/u/.cache/lm-studio/models"}));
  ::unsetenv("HF_HOME");
  EXPECT_EQ(locations_from_env().hf_hub, "/home/u/.cache/huggingface/hub");
  ::unsetenv("OLLAMA_MODELS");
  if (home != nullptr) ::setenv("HOME", saved_home.c_str(), 1);
}

}  // namespace
