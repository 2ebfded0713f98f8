// The vision tower of a Hugging Face Qwen3.5 / Qwen3-VL-style checkpoint folder
// (model.visual.*) -> the projector GGUF llama.cpp's converter writes with --mmproj
// (general.architecture "clip", projector type qwen3vl_merger, tensor names v.* / mm.*,
// the Conv3d patch kernel split into two per-frame Conv2d kernels), so that one loader
// (model::VisionEncoder) reads both. The image processor's settings come from the
// folder's preprocessor_config.json (image_mean / image_std / min and max pixels).
#pragma once

#include <optional>
#include <string>

#include "convert/hf_import.h"
#include "format/gguf.h"
#include "format/gguf_writer.h"

namespace hearth::convert {

// True when DIR's config.json has a vision_config and its weights hold model.visual.*.
bool hf_has_vision(const std::string& dir);

// The projector GGUF for DIR's vision tower. Throws Error naming the file and key or
// tensor when the tower is not a Qwen3-VL-style one Hearth reads (deepstack mergers,
// another activation) or a tensor is missing or malformed.
gguf::Writer hf_folder_to_projector(const std::string& dir, const ConvertOptions& opt,
                                    ConvertSummary* summary = nullptr);

// The projector for a model path, when there is one: an HF folder's vision tower
// (converted in memory), or for a GGUF file one beside it: the mmproj*.gguf whose name holds
// the model's file name (as `hearth convert` writes it), else the only mmproj*.gguf there.
// A projector found beside the model that cannot be chosen or read is left out with a line
// on stderr (the model then serves text); `explicit_path` (--mmproj) wins over both, and
// its errors throw.
std::optional<gguf::File> open_projector(const std::string& model_path, const std::string& explicit_path = "");

}  // namespace hearth::convert
