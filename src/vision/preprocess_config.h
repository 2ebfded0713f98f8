// preprocessor_config.json of a Qwen2-VL / Qwen2.5-VL / Qwen3-VL / Qwen3.5 checkpoint read
// into PreprocessConfig. Absent fields take the defaults of transformers'
// Qwen2VLImageProcessor; settings this implementation cannot follow (no resize, a
// resample other than bicubic, another processor type) are refused, naming the file and
// the field.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "vision/image.h"

namespace hearth::vision {

// `file` names the file in messages. Throws Error(kInvalidInput) for a malformed field,
// Error(kUnsupported) for a setting that is valid but not implemented.
PreprocessConfig parse_preprocess_config(const nlohmann::json& j, const std::string& file);

}  // namespace hearth::vision
