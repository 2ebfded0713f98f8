// `hearth convert HF_FOLDER -o OUT.gguf [--type TYPE]`: writes the GGUF llama.cpp's
// converter would write for a Hugging Face checkpoint folder (src/convert/hf_import.h),
// then prints one summary line. A folder with a vision tower (model.visual.*) also gets
// its projector file beside OUT: mmproj-<OUT's name>.gguf (src/convert/hf_vision.h), which
// `run` / `serve` find there the way llama-server users expect.
#include <cstdio>
#include <filesystem>
#include <string>

#include "cli/commands.h"
#include "convert/hf_import.h"
#include "convert/hf_vision.h"
#include "core/error.h"
#include "format/gguf.h"

namespace hearth::cli {

void add_convert_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("convert", "Convert a Hugging Face checkpoint folder to a GGUF file");
  static std::string dir, out, type;
  cmd->add_option("folder", dir, "Folder with config.json and *.safetensors")->required();
  cmd->add_option("-o,--output", out, "GGUF file to write")->required();
  cmd->add_option("--type", type, "Weight type: f32, f16, bf16, q8_0, q4_k, q6_k (default: keep each tensor's dtype)");
  cmd->callback([]() {
    if (!convert::is_hf_folder(dir))
      fail(ErrorKind::kNotFound, "convert", dir + ": not a folder with config.json");
    convert::ConvertOptions opt;
    if (!type.empty()) opt.type = convert::parse_output_type(type);
    convert::ConvertSummary s;
    const gguf::Writer w = convert::hf_folder_to_gguf(dir, opt, &s);
    w.write_file(out);
    const gguf::File check = gguf::File::open(out);  // what was written parses
    std::string types;
    for (const auto& [name, n] : s.type_counts) types += (types.empty() ? "" : ", ") + std::to_string(n) + " " + name;
    std::printf("%s: %s, %zu tensors (%s), %llu bytes of tensor data, %llu bytes in all%s\n", out.c_str(),
                check.get_string("general.architecture").c_str(), s.n_tensors, types.c_str(),
                static_cast<unsigned long long>(s.tensor_bytes), static_cast<unsigned long long>(check.file_size()),
                s.n_fallback ? (", " + std::to_string(s.n_fallback) + " tensors in a fallback type").c_str() : "");
    if (convert::hf_has_vision(dir)) {
      const std::filesystem::path o(out);
      const std::string proj = (o.parent_path() / ("mmproj-" + o.filename().string())).string();
      convert::ConvertSummary ps;
      convert::hf_folder_to_projector(dir, opt, &ps).write_file(proj);
      const gguf::File pcheck = gguf::File::open(proj);
      std::printf("%s: vision projector (qwen3vl_merger), %zu tensors, %llu bytes in all\n", proj.c_str(), ps.n_tensors,
                  static_cast<unsigned long long>(pcheck.file_size()));
    }
  });
}

}  // namespace hearth::cli
