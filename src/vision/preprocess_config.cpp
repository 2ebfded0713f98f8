// parse_preprocess_config: the fields transformers' Qwen2VLImageProcessor reads, with its
// precedence (top-level min_pixels / max_pixels over size.shortest_edge / longest_edge)
// and its class defaults for what is absent.
#include "vision/preprocess_config.h"

#include <cmath>

#include "core/error.h"

namespace hearth::vision {
namespace {

[[noreturn]] void bad(const std::string& file, const std::string& field, const std::string& why) {
  fail(ErrorKind::kInvalidInput, "vision", file + ": field '" + field + "' " + why);
}

[[noreturn]] void unsupported(const std::string& file, const std::string& field,
                              const std::string& why) {
  fail(ErrorKind::kUnsupported, "vision", file + ": field '" + field + "' " + why);
}

int64_t positive_int(const nlohmann::json& v, const std::string& file, const std::string& field,
                     int64_t max) {
  // Integral values written as 3136.0 are accepted; fractions are not.
  if (v.is_number_integer() || v.is_number_unsigned()) {
    if (v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t(max) && v.get<uint64_t>() > 0
                               : v.get<int64_t>() > 0 && v.get<int64_t>() <= max) {
      return v.get<int64_t>();
    }
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    if (d > 0 && d <= double(max) && std::floor(d) == d) return int64_t(d);
  } else {
    bad(file, field, "must be a positive integer, not " + std::string(v.type_name()));
  }
  bad(file, field,
      "must be an integer from 1 to " + std::to_string(max) + " (got " + v.dump() + ")");
}

bool flag(const nlohmann::json& j, const std::string& file, const char* field) {
  if (!j.contains(field) || j[field].is_null()) return true;  // the processor's default
  if (!j[field].is_boolean()) bad(file, field, "must be true or false");
  return j[field].get<bool>();
}

void three(const nlohmann::json& v, const std::string& file, const std::string& field,
           double out[3]) {
  if (v.is_number()) {
    out[0] = out[1] = out[2] = v.get<double>();
    return;
  }
  if (!v.is_array() || v.size() != 3)
    bad(file, field, "must be a list of 3 numbers (one per RGB channel)");
  for (int c = 0; c < 3; ++c) {
    if (!v[c].is_number()) bad(file, field + "[" + std::to_string(c) + "]", "must be a number");
    out[c] = v[c].get<double>();
    if (!std::isfinite(out[c])) bad(file, field + "[" + std::to_string(c) + "]", "must be finite");
  }
}

}  // namespace

PreprocessConfig parse_preprocess_config(const nlohmann::json& j, const std::string& file) {
  if (!j.is_object()) fail(ErrorKind::kInvalidInput, "vision", file + ": must hold a JSON object");
  if (j.contains("image_processor_type") && j["image_processor_type"].is_string()) {
    const std::string type = j["image_processor_type"].get<std::string>();
    if (type.rfind("Qwen2VLImageProcessor", 0) != 0) {
      unsupported(file, "image_processor_type",
                  "is " + type + "; only Qwen2VLImageProcessor is implemented");
    }
  }
  PreprocessConfig cfg;
  // Qwen2VLImageProcessor's class defaults.
  cfg.patch_size = 14;
  cfg.temporal_patch_size = 2;
  cfg.merge_size = 2;
  cfg.min_pixels = 56 * 56;
  cfg.max_pixels = 28 * 28 * 1280;
  const double clip_mean[3] = {0.48145466, 0.4578275, 0.40821073};
  const double clip_std[3] = {0.26862954, 0.26130258, 0.27577711};
  double mean[3] = {clip_mean[0], clip_mean[1], clip_mean[2]};
  double stdv[3] = {clip_std[0], clip_std[1], clip_std[2]};

  auto get = [&](const char* field) -> const nlohmann::json* {
    return j.contains(field) && !j[field].is_null() ? &j[field] : nullptr;
  };
  if (auto* v = get("patch_size"))
    cfg.patch_size = int32_t(positive_int(*v, file, "patch_size", 1024));
  if (auto* v = get("temporal_patch_size")) {
    cfg.temporal_patch_size = int32_t(positive_int(*v, file, "temporal_patch_size", 64));
  }
  if (auto* v = get("merge_size"))
    cfg.merge_size = int32_t(positive_int(*v, file, "merge_size", 64));
  constexpr int64_t kMaxPixels = int64_t{1} << 40;
  if (auto* size = get("size")) {
    if (!size->is_object()) bad(file, "size", "must be an object");
    for (const char* key : {"shortest_edge", "min_pixels"}) {
      if (size->contains(key) && !(*size)[key].is_null()) {
        cfg.min_pixels = positive_int((*size)[key], file, std::string("size.") + key, kMaxPixels);
      }
    }
    for (const char* key : {"longest_edge", "max_pixels"}) {
      if (size->contains(key) && !(*size)[key].is_null()) {
        cfg.max_pixels = positive_int((*size)[key], file, std::string("size.") + key, kMaxPixels);
      }
    }
    if (size->contains("height") || size->contains("width")) {
      unsupported(file, "size",
                  "gives a fixed height / width; only pixel bounds (shortest_edge / longest_edge) "
                  "are implemented");
    }
  }
  if (auto* v = get("min_pixels"))
    cfg.min_pixels = positive_int(*v, file, "min_pixels", kMaxPixels);
  if (auto* v = get("max_pixels"))
    cfg.max_pixels = positive_int(*v, file, "max_pixels", kMaxPixels);
  if (cfg.min_pixels > cfg.max_pixels) {
    bad(file, "size",
        "has a minimum of " + std::to_string(cfg.min_pixels) + " pixels above its maximum of " +
            std::to_string(cfg.max_pixels));
  }
  if (auto* v = get("image_mean")) three(*v, file, "image_mean", mean);
  if (auto* v = get("image_std")) three(*v, file, "image_std", stdv);
  for (int c = 0; c < 3; ++c) {
    if (stdv[c] == 0.0) bad(file, "image_std[" + std::to_string(c) + "]", "must not be zero");
  }
  double rescale = 1.0 / 255.0;
  if (auto* v = get("rescale_factor")) {
    if (!v->is_number() || !std::isfinite(v->get<double>()) || v->get<double>() <= 0) {
      bad(file, "rescale_factor", "must be a positive number");
    }
    rescale = v->get<double>();
  }
  if (auto* v = get("resample")) {
    if (!v->is_number_integer() || v->get<int64_t>() != 3) {
      unsupported(file, "resample", "is " + v->dump() + "; only 3 (bicubic) is implemented");
    }
  }
  if (!flag(j, file, "do_resize")) {
    unsupported(file, "do_resize",
                "is false; images are always resized to multiples of patch_size * merge_size");
  }
  if (!flag(j, file, "do_convert_rgb"))
    unsupported(file, "do_convert_rgb", "is false; images are always RGB");
  // Without rescaling or normalising the steps become the identity, which the config can say.
  cfg.rescale_factor = flag(j, file, "do_rescale") ? rescale : 1.0;
  const bool normalize = flag(j, file, "do_normalize");
  for (int c = 0; c < 3; ++c) {
    cfg.image_mean[c] = normalize ? static_cast<float>(mean[c]) : 0.0f;
    cfg.image_std[c] = normalize ? static_cast<float>(stdv[c]) : 1.0f;
  }
  return cfg;
}

}  // namespace hearth::vision
