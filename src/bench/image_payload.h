// Images for requests: a deterministic synthetic picture (a "screenshot": title bar,
// panels, text-like strokes over a gradient, all from a seed), PNG encoding with
// libpng, base64 and data: URLs. Used by the bench's image scenario and by the agent
// (its view_image tool and attached images).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hearth::bench {

// width x height 8-bit RGB pixels (rows top to bottom, 3 bytes per pixel), the same
// for the same (seed, width, height) everywhere.
std::vector<uint8_t> synthetic_screenshot(uint64_t seed, int width, int height);

// PNG (8-bit RGB, no interlace) of `rgb` (width * height * 3 bytes). Throws Error
// (kInvalidInput) for a size that does not match or is not positive, (kInternal) when
// libpng fails.
std::string encode_png(const std::vector<uint8_t>& rgb, int width, int height);

// Standard base64 (RFC 4648, '=' padding).
std::string base64_encode(std::string_view bytes);

// The media type of an encoded image told by its signature: image/png, image/jpeg,
// image/webp, image/gif; "" for anything else.
std::string image_media_type(std::string_view bytes);

// "data:<media type>;base64,<data>" (the media type from the signature; "" when the
// bytes are not one of the four formats).
std::string image_data_url(std::string_view bytes);

}  // namespace hearth::bench
