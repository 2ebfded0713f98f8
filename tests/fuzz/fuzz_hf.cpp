// libFuzzer target for the Hugging Face side of model loading (src/convert, src/format):
// a .safetensors file (header JSON, offsets, dtypes, then every float tensor converted),
// config.json (read_hf_config, then the GGUF hyper-parameters written from it), and
// tokenizer.json + tokenizer_config.json (write_tokenizer). The first byte picks the
// file; for the tokenizer the part after the line "#config#" is tokenizer_config.json.
// Files are written to a private temporary folder because the readers take a folder.
// hearth::Error is the expected way to reject bad input; anything else (crash, sanitizer
// report, other exception, time-out, huge allocation) is a bug.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>

#include "convert/hf_config.h"
#include "convert/hf_tensors.h"
#include "convert/hf_tokenizer.h"
#include "core/error.h"
#include "format/gguf_writer.h"
#include "format/safetensors.h"

namespace {

const std::string& work_dir() {
  static const std::string dir = [] {
    std::string d =
        std::filesystem::temp_directory_path().string() + "/fuzz_hf." + std::to_string(getpid());
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

void put(const std::string& name, std::string_view bytes) {
  const std::string path = work_dir() + "/" + name;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) __builtin_trap();
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
}

void drop(const std::string& name) { std::remove((work_dir() + "/" + name).c_str()); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  using namespace hearth;
  try {
    switch (data[0] % 3) {
      case 0: {
        const auto file = safetensors::File::parse(data + 1, size - 1, "fuzz.safetensors");
        for (const auto& t : file.tensors()) {
          try {
            (void)convert::tensor_to_f32(file, t);
          } catch (const Error&) {
          }
        }
        break;
      }
      case 1: {
        put("config.json", body);
        const convert::HfConfig cfg = convert::read_hf_config(work_dir());
        gguf::Writer w;
        convert::write_hparams(cfg, w);
        break;
      }
      default: {
        constexpr std::string_view kSplit = "\n#config#\n";
        const size_t cut = body.find(kSplit);
        put("tokenizer.json", body.substr(0, cut));
        if (cut != std::string_view::npos) {
          put("tokenizer_config.json", body.substr(cut + kSplit.size()));
        } else {
          drop("tokenizer_config.json");
        }
        gguf::Writer w;
        (void)convert::write_tokenizer(work_dir(), nullptr, 0, w);
        break;
      }
    }
  } catch (const Error&) {
  }
  return 0;
}
