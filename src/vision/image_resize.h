// Bicubic resampling of 8-bit RGB exactly as Pillow's Image.resize(size, BICUBIC) does it
// (libImaging/Resample.c of Pillow 13, no reducing_gap): separable (horizontal pass first
// unless the height shrinks much more than the width), each pass with the cubic kernel
// (a = -0.5) stretched by the downscale factor, coefficients in 22-bit fixed point and
// the intermediate image rounded to 8 bits.
#pragma once

#include <cstdint>

#include "vision/image.h"

namespace hearth::vision {

Image resize_bicubic(const Image& image, int32_t width, int32_t height);

}  // namespace hearth::vision
